"""``minimax_m2_append_think``: MiniMax-M2's output left whole as content,
with the ``<think>`` the template put in the prompt put back in front.

Reasoning ends (for the tool parser) at a ``</think>`` after the last
``<think>``.
"""

from __future__ import annotations

from collections.abc import Sequence

from frontend.parsers.text_so_far import TextSoFarReasoningParser
from frontend.parsers.tokenizer import ParserTokenizer
from frontend.parsers.types import ParsedDelta

START, END = "<think>", "</think>"


class MiniMaxM2AppendThinkReasoningParser(TextSoFarReasoningParser):
    def __init__(
        self, tokenizer: ParserTokenizer, chat_template_kwargs: dict | None = None
    ) -> None:
        super().__init__(tokenizer, chat_template_kwargs)
        self.start_id = tokenizer.vocab.get(START)
        self.end_id = tokenizer.vocab.get(END)

    def is_reasoning_end(self, token_ids: Sequence[int]) -> bool:
        for token_id in reversed(token_ids):
            if token_id in (self.end_id, self.start_id):
                return token_id == self.end_id
        return False

    def extract_content_ids(self, token_ids: list[int]) -> list[int]:
        return token_ids

    def extract_streaming(
        self,
        previous_text: str,
        current_text: str,
        delta_text: str,
        previous_ids: Sequence[int],
        current_ids: Sequence[int],
        delta_ids: Sequence[int],
    ) -> ParsedDelta | None:
        return ParsedDelta(content=START + delta_text if not previous_ids else delta_text)

    def extract(self, text: str) -> tuple[str | None, str | None]:
        return None, START + text
