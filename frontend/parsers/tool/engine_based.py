"""Tool parsers that run a declarative grammar (see :mod:`frontend.parsers.engine`).

Each step's delta is parsed on the grammar's own state; the text so far is
not re-read.  With no reasoning parser configured, reasoning markers the
grammar knows pass through as content.
"""

from __future__ import annotations

from collections.abc import Sequence

from frontend.parsers.engine.parser import EngineParser
from frontend.parsers.tool.base import ToolParser
from frontend.parsers.types import Delta, ExtractedToolCalls


class EngineToolParser(ToolParser):
    engine_based = True
    keeps_special_tokens = "always"

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.engine = self._make_engine(kwargs.get("chat_template_kwargs"))

    def _make_engine(self, chat_template_kwargs: dict | None) -> EngineParser:
        raise NotImplementedError

    @property
    def skip_reasoning_parsing(self) -> bool:
        return self.engine.skip_reasoning_parsing

    @skip_reasoning_parsing.setter
    def skip_reasoning_parsing(self, value: bool) -> None:
        self.engine.skip_reasoning_parsing = value

    def extract(self, text: str) -> ExtractedToolCalls:
        return self.engine.extract_tool_calls_from_content(text)

    def extract_streaming(self, previous_text: str, current_text: str, delta_text: str,
                          previous_ids: Sequence[int], current_ids: Sequence[int],
                          delta_ids: Sequence[int]) -> Delta | None:
        return self.engine.extract_tool_calls_streaming(delta_text, delta_ids)

    def finish_streaming(self) -> Delta | None:
        return self.engine.finish_streaming()
