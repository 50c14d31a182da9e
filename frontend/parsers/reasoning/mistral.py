"""``mistral``: ``[THINK]...[/THINK]`` reasoning of Magistral-style models
(tokenizers with the ``[THINK]`` token); without it, no reasoning at all.

A ``[TOOL_CALLS]`` ends reasoning too.
"""

from __future__ import annotations

from frontend.parsers.grammar.mistral import MistralParser, is_supported_tokenizer
from frontend.parsers.grammar.parser import GrammarParser
from frontend.parsers.reasoning.grammar_based import GrammarReasoningParser
from frontend.parsers.tokenizer import ParserTokenizer


class MistralReasoningParser(GrammarReasoningParser):
    mistral_guided_schema = True

    @classmethod
    def check_tokenizer(cls, tokenizer: ParserTokenizer) -> None:
        if not is_supported_tokenizer(tokenizer):
            raise ValueError(
                "the mistral reasoning parser needs a v11+ Mistral tokenizer "
                "(with the [TOOL_CALLS] and [ARGS] tokens)"
            )

    def make_grammar_parser(self) -> GrammarParser:
        return MistralParser(self.tokenizer)
