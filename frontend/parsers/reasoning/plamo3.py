"""``plamo3``: PLaMo 3 reasoning, on the PLaMo 3 grammar (thinking unless
the chat template kwargs set ``enable_thinking`` false)."""

from __future__ import annotations

from frontend.parsers.grammar.parser import GrammarParser
from frontend.parsers.grammar.plamo3 import Plamo3Parser
from frontend.parsers.reasoning.grammar_based import GrammarReasoningParser


class Plamo3ParserReasoningAdapter(GrammarReasoningParser):
    def make_grammar_parser(self) -> GrammarParser:
        return Plamo3Parser(self.tokenizer, chat_template_kwargs=self.chat_template_kwargs)
