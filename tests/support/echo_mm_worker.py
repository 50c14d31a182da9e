"""engine_core/mm_processor.py's message loop with a processor that needs no
vLLM: for testing the frontend's worker pool over real pipes.

    python -m tests.support.echo_mm_worker
"""

from __future__ import annotations

import asyncio
import sys
from typing import Any

from engine_core import mm_processor


class EchoProcessor:
    """Answers a body ``{"sleep": s}`` after ``s`` seconds, with token ids [1, 2]."""

    def __init__(self, engine_args: dict[str, Any], renderer_options: dict[str, Any]) -> None:
        pass

    async def chat(self, body: bytes) -> dict[str, Any]:
        await asyncio.sleep(mm_processor.json.loads(body).get("sleep", 0))
        return {
            "ok": True,
            "prompt_token_ids": [1, 2],
            "prompt": "",
            "conversation": [],
            "features": [],
            "placeholders": {},
        }


if __name__ == "__main__":
    mm_processor.Processor = EchoProcessor
    sys.exit(asyncio.run(mm_processor.amain()))
