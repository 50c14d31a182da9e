"""``ling3``: Ling 3 (inclusionAI) tool calls, GLM's XML format on the GLM
grammar (:mod:`frontend.parsers.grammar.glm47`); the thinking switch is always
honoured.  Unlike ``glm45``, "auto" calls are not constrained by default."""

from __future__ import annotations

from typing import ClassVar

from frontend.parsers.grammar.glm47 import Glm47Parser
from frontend.parsers.grammar.parser import GrammarParser
from frontend.parsers.tool.grammar_based import GrammarToolParser


class Ling3ToolParser(GrammarToolParser):
    structural_tag_model: ClassVar[str | None] = "glm_4_7"
    supports_required_and_named: ClassVar[bool] = False

    def make_grammar_parser(self, chat_template_kwargs: dict | None) -> GrammarParser:
        return Glm47Parser(
            self.tokenizer, self.tools, self.tool_choice, chat_template_kwargs, ignore_template=True
        )
