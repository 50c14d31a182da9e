"""``k2_horizon``: K2 Horizon's reasoning, in the marker pair of the request's
``reasoning_effort`` (chat template kwarg; ``high`` by default):
``<ifm|think>``, ``<ifm|think_fast>`` (medium) or ``<ifm|think_faster>`` (low).

An output opening with the start marker has it dropped; reasoning runs to the
end marker or to a ``<ifm|tool_calls>`` (which stays in the content).  Without
either, a complete output is all content; a stream sends reasoning as it
comes, holding back what may be the start of a marker.
"""

from __future__ import annotations

from collections.abc import Sequence

from frontend.parsers.reasoning.deepseek_r1 import DeepSeekR1ReasoningParser
from frontend.parsers.tokenizer import ParserTokenizer
from frontend.parsers.types import ParsedDelta

TOOL_CALLS = "<ifm|tool_calls>"
EFFORT_TOKENS = {
    "high": ("<ifm|think>", "</ifm|think>"),
    "medium": ("<ifm|think_fast>", "</ifm|think_fast>"),
    "low": ("<ifm|think_faster>", "</ifm|think_faster>"),
}


def partial_overlap(text: str, tag: str) -> int:
    """The longest prefix of ``tag`` that ends ``text`` (0: none)."""
    for k in range(min(len(tag) - 1, len(text)), 0, -1):
        if text.endswith(tag[:k]):
            return k
    return 0


class K2HorizonReasoningParser(DeepSeekR1ReasoningParser):
    def __init__(
        self, tokenizer: ParserTokenizer, chat_template_kwargs: dict | None = None
    ) -> None:
        effort = (chat_template_kwargs or {}).get("reasoning_effort", "high")
        if not isinstance(effort, str) or effort not in EFFORT_TOKENS:
            raise ValueError(
                f"Unsupported reasoning_effort {effort!r}. "
                f"Supported values: {', '.join(EFFORT_TOKENS)}."
            )
        self.start_token, self.end_token = EFFORT_TOKENS[effort]
        super().__init__(tokenizer, chat_template_kwargs)
        self.tool_calls_id = tokenizer.vocab.get(TOOL_CALLS)
        self._buffer = ""
        self._at_start = True
        self._finished = False

    @classmethod
    def check_tokenizer(cls, tokenizer: ParserTokenizer) -> None:
        start, end = EFFORT_TOKENS["high"]
        if start not in tokenizer.vocab or end not in tokenizer.vocab:
            raise ValueError(f"the k2_horizon reasoning parser needs the {start} and {end} tokens")

    def extract(self, text: str) -> tuple[str | None, str | None]:
        text = text.removeprefix(self.start_token)
        if self.end_token in text:
            reasoning, _, content = text.partition(self.end_token)
            return reasoning, content or None
        tool_start = text.find(TOOL_CALLS)
        if tool_start != -1:
            return text[:tool_start], text[tool_start:]
        return "", text or None

    def is_reasoning_end(self, token_ids: Sequence[int]) -> bool:
        for token_id in reversed(token_ids):
            if token_id == self.start_id:
                return False
            if token_id == self.end_id or token_id == self.tool_calls_id:
                return True
        return False

    def is_reasoning_end_streaming(
        self, token_ids: Sequence[int], delta_ids: Sequence[int]
    ) -> bool:
        return self._finished or self.end_id in delta_ids

    def extract_content_ids(self, token_ids: list[int]) -> list[int]:
        if self.end_id in token_ids:
            return token_ids[token_ids.index(self.end_id) + 1 :]
        if self.tool_calls_id is not None and self.tool_calls_id in token_ids:
            return token_ids[token_ids.index(self.tool_calls_id) :]
        return token_ids if self._finished else []

    def _strip_start(self) -> bool:
        """Drop a leading start marker; False while the buffer may still be one."""
        if not self._at_start:
            return True
        if self.start_token.startswith(self._buffer):
            if self._buffer != self.start_token:
                return False
            self._buffer = ""
        elif self._buffer.startswith(self.start_token):
            self._buffer = self._buffer[len(self.start_token) :]
        self._at_start = False
        return True

    def extract_streaming(
        self,
        previous_text: str,
        current_text: str,
        delta_text: str,
        previous_ids: Sequence[int],
        current_ids: Sequence[int],
        delta_ids: Sequence[int],
    ) -> ParsedDelta | None:
        if self._finished:
            return ParsedDelta(content=delta_text) if delta_text else None
        self._buffer += delta_text
        if not self._strip_start():
            return None
        buffer = self._buffer
        end = buffer.find(self.end_token)
        tool_start = buffer.find(TOOL_CALLS)
        if end != -1:
            reasoning, content = buffer[:end], buffer[end + len(self.end_token) :]
        elif tool_start != -1:
            reasoning, content = buffer[:tool_start], buffer[tool_start:]
        else:
            held = max(partial_overlap(buffer, self.end_token), partial_overlap(buffer, TOOL_CALLS))
            reasoning = buffer[: len(buffer) - held]
            self._buffer = buffer[len(buffer) - held :]
            return ParsedDelta(reasoning=reasoning) if reasoning else None
        self._buffer = ""
        self._finished = True
        return ParsedDelta(reasoning=reasoning, content=content or None)
