"""``qwen3_coder`` (also ``qwen3_xml``): Qwen3-Coder / Qwen3.5 XML tool calls.

The format (``<tool_call><function=NAME><parameter=KEY>VALUE...``) is the
Qwen3 grammar, :mod:`frontend.parsers.grammar.qwen3`. Argument values are
converted to the types of the tool's parameter schema.
"""

from __future__ import annotations

from frontend.parsers.grammar.parser import GrammarParser
from frontend.parsers.grammar.qwen3 import Qwen3Parser
from frontend.parsers.tool.grammar_based import GrammarToolParser


class Qwen3CoderToolParser(GrammarToolParser):
    structural_tag_model = "qwen_3_coder"
    supports_required_and_named = False

    def make_grammar_parser(self, chat_template_kwargs: dict | None) -> GrammarParser:
        return Qwen3Parser(self.tokenizer, self.tools, self.tool_choice, chat_template_kwargs)
