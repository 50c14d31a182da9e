"""engine_core/mm_processor.py's message loop with a processor that needs no
vLLM: for testing the frontend's worker pool over real pipes.

    python -m tests.support.echo_mm_worker
"""

from __future__ import annotations

import asyncio
import os
import sys
import time
from typing import Any

from engine_core import mm_processor


class EchoProcessor:
    """Answers a body ``{"sleep": s}`` after ``s`` seconds, with token ids [1, 2];
    ``{"block": s}`` blocks its event loop for ``s`` seconds first (a processor
    stuck in C code: not even a cancel is read); ``{"garbage": true}`` writes
    bytes that are no answer to its stdout first. With the engine arg
    ``"die_if_exists": path``, it exits at start-up while that file exists."""

    def __init__(self, engine_args: dict[str, Any], renderer_options: dict[str, Any]) -> None:
        if os.path.exists(engine_args.get("die_if_exists", "")):
            sys.exit(3)

    async def chat(self, body: bytes) -> dict[str, Any]:
        request = mm_processor.json.loads(body)
        if request.get("garbage"):  # bytes on stdout that are no answer
            sys.__stdout__.buffer.write(b"\x03\x00\x00\x00\xc1\xc1\xc1")
            sys.__stdout__.flush()
        time.sleep(request.get("block", 0))
        await asyncio.sleep(request.get("sleep", 0))
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
