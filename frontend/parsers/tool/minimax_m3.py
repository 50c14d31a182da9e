"""``minimax_m3``: MiniMax M3's namespaced XML tool calls, on the MiniMax M3
grammar (:mod:`frontend.parsers.grammar.minimax_m3`).

Its markers are plain (non-special) added tokens, so unlike the other
grammar parsers it leaves ``skip_special_tokens`` alone; "required"/named
tool choice parse the native syntax, not forced JSON."""

from __future__ import annotations

from typing import ClassVar

from frontend.parsers.grammar.minimax_m3 import MinimaxM3Parser
from frontend.parsers.grammar.parser import GrammarParser
from frontend.parsers.tool.grammar_based import GrammarToolParser


class MinimaxM3ToolParser(GrammarToolParser):
    supports_required_and_named: ClassVar[bool] = False
    keeps_special_tokens: ClassVar[str | None] = None

    def make_grammar_parser(self, chat_template_kwargs: dict | None) -> GrammarParser:
        return MinimaxM3Parser(self.tokenizer, self.tools, self.tool_choice)
