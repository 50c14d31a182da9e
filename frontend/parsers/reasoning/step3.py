"""``step3``: Step3's reasoning, everything before ``</think>`` (no start
marker), found by token id while streaming.
"""

from __future__ import annotations

from collections.abc import Sequence

from frontend.parsers.text_so_far import TextSoFarReasoningParser
from frontend.parsers.tokenizer import ParserTokenizer
from frontend.parsers.types import ParsedDelta

END = "</think>"


class Step3ReasoningParser(TextSoFarReasoningParser):
    def __init__(
        self, tokenizer: ParserTokenizer, chat_template_kwargs: dict | None = None
    ) -> None:
        super().__init__(tokenizer, chat_template_kwargs)
        self.check_tokenizer(tokenizer)
        self.end_id = tokenizer.vocab[END]

    @classmethod
    def check_tokenizer(cls, tokenizer: ParserTokenizer) -> None:
        if END not in tokenizer.vocab:
            raise ValueError(f"the step3 reasoning parser needs the {END} token")

    def extract_streaming(
        self,
        previous_text: str,
        current_text: str,
        delta_text: str,
        previous_ids: Sequence[int],
        current_ids: Sequence[int],
        delta_ids: Sequence[int],
    ) -> ParsedDelta | None:
        if len(delta_ids) == 1 and delta_ids[0] == self.end_id:
            return None
        if self.end_id in delta_ids:
            end = delta_text.find(END)
            content = delta_text[end + len(END) :]
            return ParsedDelta(reasoning=delta_text[:end], content=content or None)
        if self.end_id in previous_ids:
            return ParsedDelta(content=delta_text)
        return ParsedDelta(reasoning=delta_text)

    def extract(self, text: str) -> tuple[str | None, str | None]:
        reasoning, end, content = text.partition(END)
        return (reasoning, content or None) if end else (text, None)

    def is_reasoning_end(self, token_ids: Sequence[int]) -> bool:
        return self.end_id in token_ids

    def is_reasoning_end_streaming(
        self, token_ids: Sequence[int], delta_ids: Sequence[int]
    ) -> bool:
        return self.end_id in delta_ids

    def extract_content_ids(self, token_ids: list[int]) -> list[int]:
        if self.end_id not in token_ids[:-1]:
            return []
        return token_ids[token_ids.index(self.end_id) + 1 :]

    def count_reasoning_tokens(self, token_ids: Sequence[int]) -> int:
        if self.end_id not in token_ids:
            return len(token_ids)
        return list(token_ids).index(self.end_id)
