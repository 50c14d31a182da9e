"""``minicpmv``: MiniCPM-V reasoning, on the MiniCPM-V grammar
(:mod:`frontend.parsers.grammar.minicpmv`).

Reasoning only (vLLM registers no MiniCPM-V tool parser: its calls are
Qwen3-Coder's, ``qwen3_coder``).  As vLLM's parser for a ``minicpmv`` stack
does, the choice's reasoning and content get their escaped newlines back
(:mod:`frontend.parsers.escaped_newlines`).
"""

from __future__ import annotations

from typing import ClassVar

from frontend.parsers.escaped_newlines import EscapedNewlinesOutput
from frontend.parsers.grammar.minicpmv import MiniCPMVParser
from frontend.parsers.grammar.parser import GrammarParser
from frontend.parsers.reasoning.grammar_based import GrammarReasoningParser


class MiniCPMVParserReasoningAdapter(GrammarReasoningParser):
    output_rewriter: ClassVar[type | None] = EscapedNewlinesOutput

    def make_grammar_parser(self) -> GrammarParser:
        return MiniCPMVParser(self.tokenizer, chat_template_kwargs=self.chat_template_kwargs)
