"""``qwen3``: Qwen3 reasoning, on the Qwen3 grammar.

Reasoning is on from the first token unless ``enable_thinking=False`` (a chat
template kwarg); ``</think>`` or a ``<tool_call>`` ends it.  The models on a
variant of the grammar (``seed_oss``, ``mimo``, ``step3p5``) set ``variant``.
"""

from __future__ import annotations

from typing import ClassVar

from frontend.parsers.grammar.parser import GrammarParser
from frontend.parsers.grammar.qwen3 import QWEN3, Qwen3Parser, Variant
from frontend.parsers.reasoning.grammar_based import GrammarReasoningParser


class Qwen3ReasoningParser(GrammarReasoningParser):
    variant: ClassVar[Variant] = QWEN3

    def make_grammar_parser(self) -> GrammarParser:
        return Qwen3Parser(
            self.tokenizer, chat_template_kwargs=self.chat_template_kwargs, variant=self.variant
        )
