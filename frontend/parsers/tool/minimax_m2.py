"""``minimax_m2``: MiniMax-M2 XML tool calls, on the MiniMax M2 grammar
(:mod:`frontend.parsers.grammar.minimax_m2`)."""

from __future__ import annotations

from typing import ClassVar

from frontend.parsers.grammar.minimax_m2 import MinimaxM2Parser
from frontend.parsers.grammar.parser import GrammarParser
from frontend.parsers.tool.grammar_based import GrammarToolParser


class MinimaxM2ToolParser(GrammarToolParser):
    structural_tag_model: ClassVar[str | None] = "minimax"
    supports_required_and_named: ClassVar[bool] = False

    def make_grammar_parser(self, chat_template_kwargs: dict | None) -> GrammarParser:
        return MinimaxM2Parser(self.tokenizer, self.tools, self.tool_choice)
