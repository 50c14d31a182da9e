"""``deepseek_v41``: DeepSeek V4.1 reasoning, on the DeepSeek V4 grammar (thinking unless
turned off by the chat template kwargs)."""

from __future__ import annotations

from frontend.parsers.grammar.deepseek_v4 import DeepSeekV41Parser
from frontend.parsers.grammar.parser import GrammarParser
from frontend.parsers.reasoning.grammar_based import GrammarReasoningParser


class DeepSeekV41ReasoningParser(GrammarReasoningParser):
    def make_grammar_parser(self) -> GrammarParser:
        return DeepSeekV41Parser(self.tokenizer, chat_template_kwargs=self.chat_template_kwargs)
