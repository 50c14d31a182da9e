"""``ling3``: Ling 3 (inclusionAI) reasoning, on the GLM grammar; the
thinking switch is always honoured (no GLM-5.3 template check).
"""

from __future__ import annotations

from frontend.parsers.grammar.glm47 import Glm47Parser
from frontend.parsers.grammar.parser import GrammarParser
from frontend.parsers.reasoning.grammar_based import GrammarReasoningParser


class Ling3ReasoningParser(GrammarReasoningParser):
    def make_grammar_parser(self) -> GrammarParser:
        return Glm47Parser(
            self.tokenizer, chat_template_kwargs=self.chat_template_kwargs, ignore_template=True
        )
