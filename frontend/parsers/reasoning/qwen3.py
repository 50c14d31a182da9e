"""``qwen3``: Qwen3 reasoning, on the Qwen3 grammar.

Reasoning is on from the first token unless ``enable_thinking=False`` (a chat
template kwarg); ``</think>`` or a ``<tool_call>`` ends it.
"""

from __future__ import annotations

from frontend.parsers.grammar.parser import GrammarParser
from frontend.parsers.grammar.qwen3 import Qwen3Parser
from frontend.parsers.reasoning.grammar_based import GrammarReasoningParser


class Qwen3ReasoningParser(GrammarReasoningParser):
    def make_grammar_parser(self) -> GrammarParser:
        return Qwen3Parser(self.tokenizer, chat_template_kwargs=self.chat_template_kwargs)
