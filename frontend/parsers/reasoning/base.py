"""The reasoning parser interface (vLLM 0.32's ``ReasoningParser`` contract).

One instance per choice.  ``extract`` splits a complete output into
(reasoning, content); ``extract_streaming`` classifies one step's delta,
given the text and token ids so far; ``is_reasoning_end`` tells whether a
token sequence (the prompt, or the output so far) has left reasoning.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

from frontend.parsers.tokenizer import ParserTokenizer
from frontend.parsers.types import Delta


class ReasoningParser:
    engine_based: ClassVar[bool] = False
    # vLLM's adjust_request sets skip_special_tokens=False for this parser.
    keeps_special_tokens: ClassVar[bool] = False
    # For "required"/named, Mistral's parsers force a bare [{"name", "arguments"}] array.
    mistral_guided_schema: ClassVar[bool] = False

    def __init__(self, tokenizer: ParserTokenizer,
                 chat_template_kwargs: dict | None = None) -> None:
        self.tokenizer = tokenizer

    @classmethod
    def check_tokenizer(cls, tokenizer: ParserTokenizer) -> None:
        """Raise ValueError if the model's tokenizer lacks the parser's tokens."""

    def is_reasoning_end(self, token_ids: Sequence[int]) -> bool:
        raise NotImplementedError

    def is_reasoning_end_streaming(self, token_ids: Sequence[int],
                                   delta_ids: Sequence[int]) -> bool:
        return self.is_reasoning_end(token_ids)

    def extract_content_ids(self, token_ids: list[int]) -> list[int]:
        raise NotImplementedError

    def extract(self, text: str) -> tuple[str | None, str | None]:
        raise NotImplementedError

    def extract_streaming(self, previous_text: str, current_text: str, delta_text: str,
                          previous_ids: Sequence[int], current_ids: Sequence[int],
                          delta_ids: Sequence[int]) -> Delta | None:
        raise NotImplementedError

    def count_reasoning_tokens(self, token_ids: Sequence[int]) -> int:
        return 0
