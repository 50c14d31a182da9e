"""``deepseek_v4``, ``deepseek_v41``: DeepSeek V4 / V4.1 DSML tool calls, on
the DeepSeek V4 grammar (:mod:`frontend.parsers.grammar.deepseek_v4`)."""

from __future__ import annotations

from typing import ClassVar

from frontend.parsers.grammar.deepseek_v4 import DeepSeekV4Parser, DeepSeekV41Parser
from frontend.parsers.grammar.parser import GrammarParser
from frontend.parsers.tool.grammar_based import GrammarToolParser


class DeepSeekV4EngineToolParser(GrammarToolParser):
    structural_tag_model: ClassVar[str | None] = "deepseek_v4"
    supports_required_and_named: ClassVar[bool] = False

    def make_grammar_parser(self, chat_template_kwargs: dict | None) -> GrammarParser:
        return DeepSeekV4Parser(self.tokenizer, self.tools, self.tool_choice, chat_template_kwargs)


class DeepSeekV41EngineToolParser(GrammarToolParser):
    structural_tag_model: ClassVar[str | None] = "deepseek_v4_1"
    supports_required_and_named: ClassVar[bool] = False

    def make_grammar_parser(self, chat_template_kwargs: dict | None) -> GrammarParser:
        return DeepSeekV41Parser(self.tokenizer, self.tools, self.tool_choice, chat_template_kwargs)
