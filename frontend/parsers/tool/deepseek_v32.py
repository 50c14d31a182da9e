"""``deepseek_v32``: DeepSeek-V3.2 DSML tool calls, on the DeepSeek-V3.2
grammar (:mod:`frontend.parsers.grammar.deepseek_v32`)."""

from __future__ import annotations

from typing import ClassVar

from frontend.parsers.grammar.deepseek_v32 import DeepSeekV32Parser
from frontend.parsers.grammar.parser import GrammarParser
from frontend.parsers.tool.grammar_based import GrammarToolParser


class DeepSeekV32EngineToolParser(GrammarToolParser):
    structural_tag_model: ClassVar[str | None] = "deepseek_v3_2"
    supports_required_and_named: ClassVar[bool] = False

    def make_grammar_parser(self, chat_template_kwargs: dict | None) -> GrammarParser:
        return DeepSeekV32Parser(self.tokenizer, self.tools, self.tool_choice)
