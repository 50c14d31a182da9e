"""``plamo3``: PLaMo 3 tool requests, on the PLaMo 3 grammar
(:mod:`frontend.parsers.grammar.plamo3`).

Its structural tag (``plamo3``, vLLM's own builder) constrains forced calls;
special tokens are always kept.
"""

from __future__ import annotations

from typing import ClassVar

from frontend.parsers.grammar.parser import GrammarParser
from frontend.parsers.grammar.plamo3 import Plamo3Parser
from frontend.parsers.tool.grammar_based import GrammarToolParser


class Plamo3EngineToolParser(GrammarToolParser):
    structural_tag_model: ClassVar[str | None] = "plamo3"
    supports_required_and_named: ClassVar[bool] = False

    def make_grammar_parser(self, chat_template_kwargs: dict | None) -> GrammarParser:
        return Plamo3Parser(self.tokenizer, self.tools, self.tool_choice, chat_template_kwargs)
