"""``ernie45``: ERNIE-4.5 thinking models, ``abc\\n</think>\\n\\n<response>\\ndef\\n</response>\\n``
or ``abc\\n</think>\\ndef``: reasoning before ``</think>`` (``<think>`` is
optional), the content inside ``<response>...</response>`` when there is one.
"""

from __future__ import annotations

from collections.abc import Sequence

from frontend.parsers.reasoning.deepseek_r1 import ThinkTagsReasoningParser
from frontend.parsers.tokenizer import ParserTokenizer
from frontend.parsers.types import ParsedDelta

RESPONSE_START, RESPONSE_END = "<response>", "</response>"
NEWLINE = "<0x0A>"


class Ernie45ReasoningParser(ThinkTagsReasoningParser):
    def __init__(
        self, tokenizer: ParserTokenizer, chat_template_kwargs: dict | None = None
    ) -> None:
        super().__init__(tokenizer, chat_template_kwargs)
        vocab = tokenizer.vocab
        self.response_start_id = vocab.get(RESPONSE_START)
        self.response_end_id = vocab.get(RESPONSE_END)
        self.newline_id = vocab.get(NEWLINE)
        self._skipped = (self.start_id, self.end_id, self.response_start_id, self.response_end_id)

    def extract_streaming(
        self,
        previous_text: str,
        current_text: str,
        delta_text: str,
        previous_ids: Sequence[int],
        current_ids: Sequence[int],
        delta_ids: Sequence[int],
    ) -> ParsedDelta | None:
        if len(delta_ids) == 1 and delta_ids[0] in self._skipped:
            return None
        if self.end_id in delta_ids:
            end = delta_text.find(self.end_token)
            content = delta_text[end + len(self.end_token) :].lstrip("\n")
            start_at = content.find(RESPONSE_START)
            end_at = content.rfind(RESPONSE_END)
            if start_at != -1:
                content = content[start_at + len(RESPONSE_START) :]
            if end_at != -1:
                # vLLM cuts at the index found before the start was cut off.
                content = content[:end_at]
            return ParsedDelta(reasoning=delta_text[:end], content=content or None)
        if self.end_id not in previous_ids:
            return ParsedDelta(reasoning=delta_text)
        content = delta_text
        if self.response_start_id in delta_ids:
            content = content.lstrip("\n")
            content = content[content.find(RESPONSE_START) + len(RESPONSE_START) :]
            end_at = content.rfind(RESPONSE_END)
            if end_at != -1:
                content = content[:end_at]
        elif self.response_end_id in delta_ids:
            end_at = content.rfind(RESPONSE_END)
            if end_at != -1:
                content = content[:end_at]
        starts_with_newline = bool(delta_ids) and delta_ids[0] == self.newline_id
        if starts_with_newline and previous_ids[-1] in (self.end_id, self.response_end_id):
            content = content.lstrip("\n")
        if starts_with_newline and len(previous_ids) > 1 and previous_ids[-2] == self.end_id:
            content = content.lstrip("\n")
        return ParsedDelta(content=content or None)

    def extract(self, text: str) -> tuple[str | None, str | None]:
        reasoning, content = super().extract(text)
        if content:
            start_at = content.find(RESPONSE_START)
            end_at = content.rfind(RESPONSE_END)
            if start_at != -1 and end_at != -1 and start_at < end_at:
                content = content[start_at + len(RESPONSE_START) : end_at]
        return reasoning, content or None
