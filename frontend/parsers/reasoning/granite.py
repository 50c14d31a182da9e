"""``granite``: IBM Granite 3.x reasoning, in plain text:
``Here is my thought process: ... Here is my response: ...`` (``Here's`` too).

No tokens mark it, so streaming watches the text so far: what may still be
the start of either phrase is held back, and once a phrase breaks off, the
held text goes out.  Output that does not open with the thought phrase is
all content.  Reasoning never ends for a tool parser (as in vLLM).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from frontend.parsers.text_so_far import TextSoFarReasoningParser
from frontend.parsers.types import ParsedDelta

THINK_STARTS = ("Here's my thought process:", "Here is my thought process:")
RESPONSE_STARTS = ("Here's my response:", "Here is my response:")
_REASONING_RE = re.compile(
    r"(?:Here's|Here is) my thought process:(.*?)(?:Here's|Here is) my response:(.*)", re.DOTALL
)


def _starts_one_of(text: str, phrases: tuple[str, ...]) -> bool:
    return any(phrase.startswith(text) for phrase in phrases)


class GraniteReasoningParser(TextSoFarReasoningParser):
    def is_reasoning_end(self, token_ids: Sequence[int]) -> bool:
        return False

    def extract_content_ids(self, token_ids: list[int]) -> list[int]:
        return []

    def extract(self, text: str) -> tuple[str | None, str | None]:
        match = _REASONING_RE.search(text)
        if match is None:
            return None, text
        return match.group(1), match.group(2) or None

    def extract_streaming(
        self,
        previous_text: str,
        current_text: str,
        delta_text: str,
        previous_ids: Sequence[int],
        current_ids: Sequence[int],
        delta_ids: Sequence[int],
    ) -> ParsedDelta | None:
        reasoning, response_len, content = _sections(current_text)
        if not reasoning:
            delta = _before_reasoning(current_text, delta_text)
        elif not content:
            delta = _in_reasoning(current_text, reasoning, delta_text)
        else:
            assert response_len is not None
            delta = _after_response_start(
                delta_text, reasoning, content, current_text, response_len
            )
        if not delta.content and not delta.reasoning:
            return None
        return delta


def _before_reasoning(current_text: str, delta_text: str) -> ParsedDelta:
    is_prefix = _starts_one_of(current_text, THINK_STARTS)
    was_prefix = _starts_one_of(current_text[: len(current_text) - len(delta_text)], THINK_STARTS)
    if was_prefix and not is_prefix:
        return ParsedDelta(reasoning=None, content=current_text)  # the held text too
    if is_prefix:
        return ParsedDelta(reasoning=None, content=None)
    return ParsedDelta(reasoning=None, content=delta_text)


def _in_reasoning(current_text: str, reasoning: str, delta_text: str) -> ParsedDelta:
    if any(current_text.endswith(start) for start in RESPONSE_STARTS):
        return ParsedDelta(reasoning=None, content=None)
    previous = reasoning[: -len(delta_text)]
    prev_idx = previous.rfind("Here")
    delta_idx = delta_text.rfind("Here")
    prev_was = prev_idx >= 0 and _starts_one_of(previous[prev_idx:], RESPONSE_STARTS)
    continues = prev_idx >= 0 and _starts_one_of(reasoning[prev_idx:], RESPONSE_STARTS)
    new = delta_idx >= 0 and _starts_one_of(delta_text[delta_idx:], RESPONSE_STARTS)
    if continues:
        return ParsedDelta(reasoning=None, content=None)
    if not prev_was:
        if new:
            return ParsedDelta(reasoning=delta_text[:delta_idx], content=None)
        return ParsedDelta(reasoning=delta_text, content=None)
    if new:
        return ParsedDelta(reasoning=previous[prev_idx:] + delta_text[:delta_idx], content=None)
    return ParsedDelta(reasoning=previous[prev_idx:] + delta_text, content=None)


def _after_response_start(
    delta_text: str, reasoning: str, content: str, current_text: str, response_len: int
) -> ParsedDelta:
    delta_content = delta_text[-len(content) :]
    reasoning_end = len(delta_text) - (len(content) + response_len)
    if reasoning_end < 0:
        delta_reasoning = None
    else:
        start = len(reasoning) + response_len + len(content) - 1
        offset = max(0, start - (len(current_text) - len(delta_text)))
        delta_reasoning = delta_text[offset:reasoning_end]
    return ParsedDelta(reasoning=delta_reasoning, content=delta_content)


def _sections(text: str) -> tuple[str | None, int | None, str | None]:
    """(reasoning, the response phrase's length, content) of the text so far."""
    chunk_start = 0
    reasoning_start: int | None = None
    for chunk_end in [i for i, ch in enumerate(text) if ch == ":"]:
        chunk = text[chunk_start:chunk_end]
        if reasoning_start is None:
            for start in THINK_STARTS:
                if chunk == start[:-1]:
                    reasoning_start = chunk_start = chunk_end + 1
                    break
        else:
            for start in RESPONSE_STARTS:
                if chunk[-len(start) + 1 :] == start[:-1]:
                    reasoning = text[reasoning_start : chunk_end - len(start)]
                    return reasoning, len(start), text[chunk_end + 1 :]
    if reasoning_start:
        return text[reasoning_start:], None, None
    return None, None, None
