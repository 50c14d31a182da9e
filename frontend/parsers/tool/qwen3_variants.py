"""``seed_oss``, ``step3p5``, ``mimo``: Qwen3-Coder's XML tool calls in other
models' markers or rules (:mod:`frontend.parsers.grammar.qwen3_variants`)."""

from __future__ import annotations

from typing import ClassVar

from frontend.parsers.grammar.parser import GrammarParser
from frontend.parsers.grammar.qwen3_variants import MiMoParser, SeedOssParser, Step3p5Parser
from frontend.parsers.tool.grammar_based import GrammarToolParser


class SeedOssEngineToolParser(GrammarToolParser):
    structural_tag_model: ClassVar[str | None] = None

    def make_grammar_parser(self, chat_template_kwargs: dict | None) -> GrammarParser:
        return SeedOssParser(self.tokenizer, self.tools, self.tool_choice, chat_template_kwargs)


class Step3p5ToolParser(GrammarToolParser):
    structural_tag_model: ClassVar[str | None] = "qwen_3_coder"
    supports_required_and_named: ClassVar[bool] = False

    def make_grammar_parser(self, chat_template_kwargs: dict | None) -> GrammarParser:
        return Step3p5Parser(self.tokenizer, self.tools, self.tool_choice, chat_template_kwargs)


class MiMoToolParser(GrammarToolParser):
    structural_tag_model: ClassVar[str | None] = "mimo"
    supports_required_and_named: ClassVar[bool] = False

    def make_grammar_parser(self, chat_template_kwargs: dict | None) -> GrammarParser:
        return MiMoParser(self.tokenizer, self.tools, self.tool_choice, chat_template_kwargs)
