"""``hy_v4``: Hunyuan V4's ``<think>...</think>`` (DeepSeek-R1 style: the
template puts ``<think>`` in the prompt), unless the chat template kwargs'
``reasoning_effort`` is ``"no_think"`` (default ``"high"``).

The markers carry the checkpoint's suffix, read from the vocabulary
(``<think:6124c78e>``).  Every streamed delta sets both fields (one may be
null), as vLLM's adapter builds them.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from frontend.parsers.reasoning.deepseek_r1 import DeepSeekR1ReasoningParser
from frontend.parsers.tokenizer import ParserTokenizer
from frontend.parsers.types import UNSET, ParsedDelta

_STRUCTURAL_RE = re.compile(r"<(?:think|tool_calls|tool_call|arg_key|arg_value)(:[^\s>]+)?>")


def token_suffix(tokenizer: ParserTokenizer) -> str:
    """The suffix of the checkpoint's structural tokens (``":6124c78e"`` or "")."""
    special = tokenizer.init_kwargs.get("model_specific_special_tokens", {})
    if special.get("think_begin_token", ""):
        raise ValueError(
            "This checkpoint declares HYV4 structural tokens (think_begin_token"
            "/toolcalls_begin_token/argkey_begin_token) in "
            "tokenizer_config.json, which transformers 5 no longer supports. "
            "Remove those fields and keep the tokens in the tokenizer's own "
            "token definitions so the suffix can be read from the vocab."
        )
    for token in tokenizer.vocab:
        match = _STRUCTURAL_RE.fullmatch(token)
        if match:
            return match.group(1) or ""
    return ""


def _both(delta: ParsedDelta | None) -> ParsedDelta | None:
    if delta is None:
        return None
    return ParsedDelta(
        reasoning=None if delta.reasoning is UNSET else delta.reasoning,
        content=None if delta.content is UNSET else delta.content,
    )


class HYV4ReasoningParser(DeepSeekR1ReasoningParser):
    def __init__(
        self, tokenizer: ParserTokenizer, chat_template_kwargs: dict | None = None
    ) -> None:
        suffix = token_suffix(tokenizer)
        self.start_token = f"<think{suffix}>"
        self.end_token = f"</think{suffix}>"
        super().__init__(tokenizer, chat_template_kwargs)

    @classmethod
    def check_tokenizer(cls, tokenizer: ParserTokenizer) -> None:
        token_suffix(tokenizer)  # the markers are needed only by a request that thinks

    def reasoning_on(self, chat_template_kwargs: dict) -> bool:
        return (chat_template_kwargs.get("reasoning_effort") or "high") != "no_think"

    def feed(self, delta_text: str, delta_ids: list[int]) -> ParsedDelta | None:
        if self.identity:
            return ParsedDelta(reasoning=None, content=delta_text) if delta_text else None
        return super().feed(delta_text, delta_ids)

    def extract_streaming(
        self,
        previous_text: str,
        current_text: str,
        delta_text: str,
        previous_ids: Sequence[int],
        current_ids: Sequence[int],
        delta_ids: Sequence[int],
    ) -> ParsedDelta | None:
        return _both(
            super().extract_streaming(
                previous_text, current_text, delta_text, previous_ids, current_ids, delta_ids
            )
        )

    def count_reasoning_tokens(self, token_ids: Sequence[int]) -> int:
        """Tokens up to ``</think>`` (all when cut), a leading ``<think>`` not counted."""
        if self.identity:
            return 0
        ids = list(token_ids)
        start = 1 if ids and ids[0] == self.start_id else 0
        try:
            return ids.index(self.end_id, start) - start
        except ValueError:
            return len(ids) - start
