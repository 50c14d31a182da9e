"""``glm45`` (also ``glm47``): GLM-4.5/4.6/4.7/5 tool calls, on the GLM
grammar (:mod:`frontend.parsers.grammar.glm47`).

Its structural tag constrains tool_choice "auto" calls too (vLLM's
``default_tool_strict_level = FUNCTION``): keys and basic value types for
tools without ``strict``.
"""

from __future__ import annotations

from typing import ClassVar

from frontend.parsers.grammar.glm47 import Glm47Parser
from frontend.parsers.grammar.parser import GrammarParser
from frontend.parsers.tool.grammar_based import GrammarToolParser


class Glm47MoeModelToolParser(GrammarToolParser):
    structural_tag_model: ClassVar[str | None] = "glm_4_7"
    supports_required_and_named: ClassVar[bool] = False
    default_tool_strict_level: ClassVar[str | None] = "function"

    def make_grammar_parser(self, chat_template_kwargs: dict | None) -> GrammarParser:
        return Glm47Parser(self.tokenizer, self.tools, self.tool_choice, chat_template_kwargs)
