"""``minimax_m2``: MiniMax-M2 reasoning, on the MiniMax-M2 grammar: everything
before ``</think>`` (the template opened it) or a ``<minimax:tool_call>``."""

from __future__ import annotations

from frontend.parsers.grammar.minimax_m2 import MinimaxM2Parser
from frontend.parsers.grammar.parser import GrammarParser
from frontend.parsers.reasoning.grammar_based import GrammarReasoningParser


class MiniMaxM2ReasoningParser(GrammarReasoningParser):
    def make_grammar_parser(self) -> GrammarParser:
        return MinimaxM2Parser(self.tokenizer)
