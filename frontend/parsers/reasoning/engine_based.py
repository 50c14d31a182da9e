"""Reasoning parsers that run a declarative grammar (see :mod:`frontend.parsers.engine`).

The grammar sees each delta once; tool markup is left in the content for the
tool parser.  Streaming keeps the reasoning token count; for a complete
output it is counted on a fresh parse.
"""

from __future__ import annotations

from collections.abc import Sequence

from frontend.parsers.engine.parser import EngineParser
from frontend.parsers.reasoning.base import ReasoningParser
from frontend.parsers.tokenizer import ParserTokenizer
from frontend.parsers.types import Delta


class EngineReasoningParser(ReasoningParser):
    engine_based = True
    keeps_special_tokens = True

    def __init__(self, tokenizer: ParserTokenizer,
                 chat_template_kwargs: dict | None = None) -> None:
        super().__init__(tokenizer, chat_template_kwargs)
        self._kwargs = chat_template_kwargs
        self.engine = self._make_engine()
        self.engine.skip_tool_parsing = True
        self._streamed = False  # the streaming state holds the token count

    def _make_engine(self) -> EngineParser:
        raise NotImplementedError

    def is_reasoning_end(self, token_ids: Sequence[int]) -> bool:
        return self.engine.is_reasoning_end(token_ids)

    def extract_content_ids(self, token_ids: list[int]) -> list[int]:
        return self.engine.extract_content_ids(token_ids)

    def extract(self, text: str) -> tuple[str | None, str | None]:
        self._streamed = False
        return self.engine.extract_reasoning(text)

    def extract_streaming(self, previous_text: str, current_text: str, delta_text: str,
                          previous_ids: Sequence[int], current_ids: Sequence[int],
                          delta_ids: Sequence[int]) -> Delta | None:
        self._streamed = True
        return self.engine.extract_reasoning_streaming(delta_text, delta_ids)

    def confirmed_end(self) -> bool:
        """Whether the grammar has processed the end of reasoning."""
        return self.engine.reasoning_ended

    def finish_streaming(self) -> Delta | None:
        return self.engine.finish_streaming()

    def count_reasoning_tokens(self, token_ids: Sequence[int]) -> int:
        if self._streamed:
            return self.engine.reasoning_tokens
        if not token_ids:
            return 0
        return self._make_engine().count_reasoning_tokens_once(token_ids)
