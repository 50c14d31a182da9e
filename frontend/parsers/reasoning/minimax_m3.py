"""``minimax_m3``: MiniMax M3's ``<mm:think>...</mm:think>`` reasoning.

The markers are single vocabulary entries, but generated marker text may be
tokenized into smaller pieces, so streaming works on the text (holding back
a partial marker) and token checks on the markers' encoded id sequences.
With ``thinking_mode="enabled"`` (chat template kwarg) the template opened
reasoning: the output starts inside it.  Otherwise a leading stray
``</mm:think>`` is dropped, and text outside a ``<mm:think>`` block is
content (before and after it).
"""

from __future__ import annotations

from collections.abc import Sequence

from frontend.parsers.text_so_far import TextSoFarReasoningParser
from frontend.parsers.tokenizer import ParserTokenizer
from frontend.parsers.types import ParsedDelta

START, END = "<mm:think>", "</mm:think>"


def _contains(ids: Sequence[int], marker: tuple[int, ...]) -> bool:
    return _rfind(ids, marker) >= 0


def _rfind(ids: Sequence[int], marker: tuple[int, ...]) -> int:
    n = len(marker)
    if not marker or n > len(ids):
        return -1
    for i in range(len(ids) - n, -1, -1):
        if tuple(ids[i : i + n]) == marker:
            return i
    return -1


def _ends_with_prefix(ids: Sequence[int], marker: tuple[int, ...]) -> bool:
    """Whether ``ids`` ends with a proper prefix of ``marker``."""
    for k in range(min(len(ids), len(marker) - 1), 0, -1):
        if tuple(ids[-k:]) == marker[:k]:
            return True
    return False


def _strip_partial(text: str, marker: str) -> str:
    for k in range(min(len(text), len(marker) - 1), 0, -1):
        if marker.startswith(text[-k:]):
            return text[:-k]
    return text


def _visible_delta(previous: str | None, current: str | None) -> str | None:
    if not current:
        return None
    if not previous:
        return current
    if current.startswith(previous):
        return current[len(previous) :] or None
    return current


class MiniMaxM3ReasoningParser(TextSoFarReasoningParser):
    def __init__(
        self, tokenizer: ParserTokenizer, chat_template_kwargs: dict | None = None
    ) -> None:
        super().__init__(tokenizer, chat_template_kwargs)
        self.check_tokenizer(tokenizer)
        self.start_ids = tuple(tokenizer.encode(START))
        self.end_ids = tuple(tokenizer.encode(END))
        kwargs = chat_template_kwargs or {}
        self.initial_in_reasoning = kwargs.get("thinking_mode") == "enabled"
        self._ended_streaming = False
        self._active = self.initial_in_reasoning
        self._pending_marker = False
        self._last_delta_ids: tuple[int, ...] | None = None
        self._last_content_ids: list[int] | None = None

    @classmethod
    def check_tokenizer(cls, tokenizer: ParserTokenizer) -> None:
        if START not in tokenizer.vocab or END not in tokenizer.vocab:
            raise ValueError(f"the minimax_m3 reasoning parser needs the {START} and {END} tokens")

    # -- complete outputs -----------------------------------------------------------

    def extract(self, text: str) -> tuple[str | None, str | None]:
        if not self.initial_in_reasoning and text.startswith(END):
            return None, text[len(END) :] or None
        if self.initial_in_reasoning and START not in text:
            reasoning, end, content = text.partition(END)
            return (reasoning, content or None) if end else (text, None)
        if START not in text:
            return None, text
        before, _, after = text.partition(START)
        reasoning, end, after_end = after.partition(END)
        if not end:
            return reasoning, before or None
        return reasoning, (before + after_end) or None

    def _segments(self, text: str) -> tuple[str | None, str | None]:
        """(reasoning, content) visible in the text so far."""
        if not text:
            return None, None
        if not self.initial_in_reasoning:
            if END.startswith(text) and len(text) < len(END):
                return None, None
            if text.startswith(END):
                text = text[len(END) :]
                if not text:
                    return None, None
        if self.initial_in_reasoning and START not in text:
            reasoning, end, content = text.partition(END)
            if end:
                return reasoning or None, content or None
            return _strip_partial(reasoning, END) or None, None
        if START not in text:
            return None, _strip_partial(text, START) or None
        before, _, after = text.partition(START)
        reasoning, end, after_end = after.partition(END)
        if end:
            return reasoning or None, (before + after_end) or None
        return _strip_partial(reasoning, END) or None, before or None

    # -- token ids ------------------------------------------------------------------

    def is_reasoning_end(self, token_ids: Sequence[int]) -> bool:
        end_at = _rfind(token_ids, self.end_ids)
        if end_at < 0:
            return False
        start_at = _rfind(token_ids, self.start_ids)
        return start_at < 0 or end_at > start_at

    def is_reasoning_end_streaming(
        self, token_ids: Sequence[int], delta_ids: Sequence[int]
    ) -> bool:
        if self._ended_streaming:
            return True
        if self._active or self._pending_marker:
            return False
        if _contains(delta_ids, self.end_ids) or _contains(token_ids, self.end_ids):
            return True
        if self.initial_in_reasoning:
            return False
        if _ends_with_prefix(token_ids, self.start_ids) or _ends_with_prefix(
            token_ids, self.end_ids
        ):
            return False
        if not _contains(token_ids, self.start_ids):
            return bool(token_ids)
        return False

    def extract_content_ids(self, token_ids: list[int]) -> list[int]:
        if self._last_delta_ids == tuple(token_ids) and self._last_content_ids is not None:
            content_ids = self._last_content_ids
            self._last_delta_ids = self._last_content_ids = None
            return list(content_ids)
        end_at = _rfind(token_ids, self.end_ids)
        if end_at >= 0:
            return token_ids[end_at + len(self.end_ids) :]
        if _contains(token_ids, self.start_ids):
            return []
        return [] if self.initial_in_reasoning else token_ids

    def count_reasoning_tokens(self, token_ids: Sequence[int]) -> int:
        count, depth, i = 0, 1 if self.initial_in_reasoning else 0, 0
        start, end = self.start_ids, self.end_ids
        while i < len(token_ids):
            if tuple(token_ids[i : i + len(start)]) == start:
                depth += 1
                i += len(start)
                continue
            if tuple(token_ids[i : i + len(end)]) == end:
                depth = max(0, depth - 1)
                i += len(end)
                continue
            if depth > 0:
                count += 1
            i += 1
        return count

    # -- streaming ------------------------------------------------------------------

    def _content_suffix_ids(
        self, delta_text: str, delta_ids: Sequence[int], content: str | None
    ) -> list[int]:
        if content is None:
            return []
        if content == delta_text:
            return list(delta_ids)
        if delta_text.endswith(content):
            prefix = delta_text[: len(delta_text) - len(content)]
            for index in range(len(delta_ids) + 1):
                if self.tokenizer.decode(list(delta_ids[:index])) == prefix:
                    return list(delta_ids[index:])
        return self.tokenizer.encode(content)

    def extract_streaming(
        self,
        previous_text: str,
        current_text: str,
        delta_text: str,
        previous_ids: Sequence[int],
        current_ids: Sequence[int],
        delta_ids: Sequence[int],
    ) -> ParsedDelta | None:
        if not delta_text:
            return None
        if not previous_text:
            self._ended_streaming = False
            self._active = self.initial_in_reasoning
            self._pending_marker = False
            self._last_delta_ids = self._last_content_ids = None
        previous_reasoning, previous_content = self._segments(previous_text)
        current_reasoning, current_content = self._segments(current_text)
        if END in current_text or current_content is not None:
            self._ended_streaming = True
            self._active = False
            self._pending_marker = False
        else:
            self._last_delta_ids = self._last_content_ids = None
            self._active = (
                self.initial_in_reasoning or START in current_text or current_reasoning is not None
            )
            self._pending_marker = not self._active and (
                START.startswith(current_text) or END.startswith(current_text)
            )
        reasoning = _visible_delta(previous_reasoning, current_reasoning)
        content = _visible_delta(previous_content, current_content)
        if self._ended_streaming:
            self._last_delta_ids = tuple(delta_ids)
            self._last_content_ids = self._content_suffix_ids(delta_text, delta_ids, content)
        if reasoning is None and content is None:
            return None
        return ParsedDelta(reasoning=reasoning, content=content)
