"""``inkling``: Inkling thinking blocks, on the Inkling grammar.

Output continues after the prompt's last block marker; a thinking block is
reasoning until the next text or tool block opens.  Reasoning tokens are
those between ``<|content_thinking|>`` and a block's end, counted by id.
"""

from __future__ import annotations

from collections.abc import Sequence

from frontend.parsers.grammar.inkling import InklingParser
from frontend.parsers.reasoning.grammar_based import GrammarReasoningParser


class InklingParserReasoningAdapter(GrammarReasoningParser):
    grammar_parser: InklingParser

    def make_grammar_parser(self) -> InklingParser:
        return InklingParser(self.tokenizer)

    def count_reasoning_tokens(self, token_ids: Sequence[int]) -> int:
        return self.grammar_parser.count_reasoning_ids(token_ids)
