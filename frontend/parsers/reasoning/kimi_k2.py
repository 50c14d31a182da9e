"""``kimi_k2``: Kimi K2 reasoning, on the Kimi K2 grammar (thinking unless
the chat template kwargs turn ``thinking``/``enable_thinking`` off)."""

from __future__ import annotations

from frontend.parsers.grammar.kimi_k2 import KimiK2Parser
from frontend.parsers.grammar.parser import GrammarParser
from frontend.parsers.reasoning.grammar_based import GrammarReasoningParser


class KimiK2ReasoningParser(GrammarReasoningParser):
    def make_grammar_parser(self) -> GrammarParser:
        return KimiK2Parser(self.tokenizer, chat_template_kwargs=self.chat_template_kwargs)
