"""``olmo3``: Olmo 3 reasoning in ``<think>...</think>`` written as ordinary
text (no marker tokens; ``<think>`` may be missing, the template having put
it in the prompt).

A complete output is reasoning up to the first ``</think>``; one without it
is all content.  A stream goes through a text buffer that holds back what
may be part of a marker and switches between reasoning and content at each
marker.  Reasoning ends (in the prompt) at the tokens of ``</think>``:
``</`` (or ``Ġ</``), ``think``, ``>``.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from frontend.parsers.text_so_far import TextSoFarReasoningParser
from frontend.parsers.tokenizer import ParserTokenizer
from frontend.parsers.types import ParsedDelta

START, END = "<think>", "</think>"
END_FIRST, END_REST = ("Ġ</", "</"), ("think", ">")
_REASONING_RE = re.compile(rf"^(?:{START})?(?P<reasoning>.*?){END}(?P<content>.*)$", re.DOTALL)


def _overlap_len(a: str, b: str) -> int | None:
    """How long the longest overlap of the two strings is (vLLM's
    ``string_overlap``): the shorter inside the longer, else the shorter's end
    on the longer's start, else the longer's end on the shorter's start."""
    short, long = (a, b) if len(a) < len(b) else (b, a)
    if short in long:
        return len(short)
    for i in range(len(short) - 1, 0, -1):
        if short[-i:] == long[:i]:
            return i
    for i in range(len(short) - 1, 0, -1):
        if long[-i:] == short[:i]:
            return i
    return None


class Olmo3ReasoningParser(TextSoFarReasoningParser):
    def __init__(
        self, tokenizer: ParserTokenizer, chat_template_kwargs: dict | None = None
    ) -> None:
        super().__init__(tokenizer, chat_template_kwargs)
        self.check_tokenizer(tokenizer)
        vocab = tokenizer.vocab
        self.end_first_ids = [vocab[token] for token in END_FIRST]
        self.end_rest_ids = [vocab[token] for token in END_REST]
        self._buffer = ""
        self._reasoning = True

    @classmethod
    def check_tokenizer(cls, tokenizer: ParserTokenizer) -> None:
        missing = [t for t in (*END_FIRST, *END_REST) if t not in tokenizer.vocab]
        if missing:
            raise ValueError(f"the olmo3 reasoning parser needs the tokens {missing}")

    def is_reasoning_end(self, token_ids: Sequence[int]) -> bool:
        rest = self.end_rest_ids
        for i in range(len(token_ids) - len(rest), -1, -1):
            if list(token_ids[i + 1 : i + 1 + len(rest)]) == rest and (
                token_ids[i] in self.end_first_ids
            ):
                return True
        return False

    def extract_content_ids(self, token_ids: list[int]) -> list[int]:
        return []

    def extract(self, text: str) -> tuple[str | None, str | None]:
        match = _REASONING_RE.match(text)
        if match is None:
            return None, text
        return match.group("reasoning") or None, match.group("content") or None

    def extract_streaming(
        self,
        previous_text: str,
        current_text: str,
        delta_text: str,
        previous_ids: Sequence[int],
        current_ids: Sequence[int],
        delta_ids: Sequence[int],
    ) -> ParsedDelta | None:
        delta = self._add_text(delta_text)
        if delta is None and END in self._buffer:
            delta = self._process()
        return delta

    def _add_text(self, delta_text: str) -> ParsedDelta | None:
        self._buffer += delta_text
        start_overlap = _overlap_len(delta_text, START)
        end_overlap = _overlap_len(delta_text, END)
        partial_start = start_overlap is not None and start_overlap < len(START)
        partial_end = end_overlap is not None and end_overlap < len(END)
        if partial_start and START in self._buffer and not partial_end:
            return self._process()
        if partial_end and END in self._buffer:
            return self._process()
        if partial_start or partial_end:
            return None
        return self._process()

    def _process(self) -> ParsedDelta | None:
        start = self._buffer.find(START)
        if start >= 0:
            self._reasoning = True
            before, self._buffer = self._buffer[:start], self._buffer[start + len(START) :]
            if start > 0:
                return ParsedDelta(content=before)
        end = self._buffer.rfind(END)
        if end >= 0:
            self._reasoning = False
            before, self._buffer = self._buffer[:end], self._buffer[end + len(END) :]
            if end > 0:
                return ParsedDelta(reasoning=before)
        text, self._buffer = self._buffer, ""
        return ParsedDelta(reasoning=text) if self._reasoning else ParsedDelta(content=text)
