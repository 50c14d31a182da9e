"""Tool parsers that run a declarative grammar (see :mod:`frontend.parsers.grammar`).

Each step's delta is parsed on the grammar's own state; the text so far is
not re-read.  With no reasoning parser configured, reasoning markers the
grammar knows pass through as content.  A subclass says which grammar
parser to build (:meth:`GrammarToolParser.make_grammar_parser`).
"""

from __future__ import annotations

from typing import ClassVar

from frontend.parsers.grammar.parser import GrammarParser
from frontend.parsers.tool.base import ToolParser
from frontend.parsers.types import ExtractedToolCalls, ParsedDelta


class GrammarToolParser(ToolParser):
    grammar_based = True
    keeps_special_tokens: ClassVar[str | None] = "always"

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.grammar_parser = self.make_grammar_parser(kwargs.get("chat_template_kwargs"))

    def make_grammar_parser(self, chat_template_kwargs: dict | None) -> GrammarParser:
        raise NotImplementedError

    @property
    def skip_reasoning_parsing(self) -> bool:
        return self.grammar_parser.skip_reasoning_parsing

    @skip_reasoning_parsing.setter
    def skip_reasoning_parsing(self, value: bool) -> None:
        self.grammar_parser.skip_reasoning_parsing = value

    def extract(self, text: str) -> ExtractedToolCalls:
        return self.grammar_parser.extract_tool_calls_from_content(text)

    def feed(self, delta_text: str, delta_ids: list[int]) -> ParsedDelta | None:
        return self.grammar_parser.extract_tool_calls_streaming(delta_text, delta_ids)

    def finish(self) -> ParsedDelta | None:
        return self.grammar_parser.finish_streaming()
