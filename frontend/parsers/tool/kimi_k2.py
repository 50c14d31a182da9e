"""``kimi_k2``: Kimi K2 tool calls, on the Kimi K2 grammar
(:mod:`frontend.parsers.grammar.kimi_k2`).

Tool call ids are the model's own (``functions.get_weather:0``).  Special
tokens are kept when tools are given and tool_choice is not "none" (vLLM's
``KimiK2ToolParser.adjust_request``).
"""

from __future__ import annotations

from typing import ClassVar

from frontend.parsers.grammar.kimi_k2 import KimiK2Parser
from frontend.parsers.grammar.parser import GrammarParser
from frontend.parsers.tool.grammar_based import GrammarToolParser


class KimiK2ToolParser(GrammarToolParser):
    structural_tag_model: ClassVar[str | None] = "kimi"
    supports_required_and_named: ClassVar[bool] = False
    keeps_special_tokens = "with_tools"

    def make_grammar_parser(self, chat_template_kwargs: dict | None) -> GrammarParser:
        return KimiK2Parser(self.tokenizer, self.tools, self.tool_choice, chat_template_kwargs)
