"""``glm45`` / ``glm47``: GLM-4.5/4.7 reasoning, on the GLM grammar.

Reasoning is on from the first token unless the chat template kwargs turn
``thinking``/``enable_thinking`` off (ignored for GLM-5.3's template, which
always thinks); ``</think>`` or a ``<tool_call>`` ends it.
"""

from __future__ import annotations

from frontend.parsers.grammar.glm47 import Glm47Parser
from frontend.parsers.grammar.parser import GrammarParser
from frontend.parsers.reasoning.grammar_based import GrammarReasoningParser


class Glm47MoeReasoningParser(GrammarReasoningParser):
    def make_grammar_parser(self) -> GrammarParser:
        return Glm47Parser(self.tokenizer, chat_template_kwargs=self.chat_template_kwargs)
