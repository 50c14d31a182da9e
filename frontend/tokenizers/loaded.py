"""What a tokenizer mode loads: the tokenizer as the rest of the frontend uses it."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from tokenizers import Tokenizer


@dataclass
class LoadedTokenizer:
    """A tokenizer as the rest of the frontend uses it."""

    tokenizer: Tokenizer
    config: dict[str, Any]  # tokenizer_config.json (with the defaults a conversion adds)
    source: str  # what was loaded, for the log
    mode: str = "hf"
    # Chat prompts rendered to token ids by the tokenizer itself (mistral), not
    # by a Jinja template: (messages, tools, add_generation_prompt,
    # continue_final_message, reasoning_effort) -> ids.
    render_chat: Callable[..., list[int]] | None = None
    # Ids skip_special_tokens drops (None: the tokenizer's special added tokens).
    skip_ids: frozenset[int] | None = None
    extra: dict[str, Any] = field(default_factory=dict)
