"""``kimi_k3``: Kimi K3's XTML ``think`` channel, each marker three special
tokens::

    <|open|>think<|sep|>reasoning<|close|>think<|sep|><|open|>response<|sep|>...

vLLM's ``KimiK3ReasoningParser`` as it is.  The opener may have been the
prompt's, so reasoning runs from the start (or the opener) to the closer;
an output with a response opener and no think marker is all content, one
with neither still reasoning.  ``thinking``/``enable_thinking`` false: all
content.  After reasoning, the response/message markers are stripped from
the content unless the request has tools and tool_choice is not "none"
(the tool parser reads them then).  The token-id checks match the markers'
id sequences; reasoning has ended when the last marker is a closer.
Streaming holds back a tail that may begin a marker.  vLLM pairs it with its
own composite (``vllm_composite``), which strips streamed content as
:meth:`strip_content_streaming` does when no tool parser runs.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from frontend.parsers.text_so_far import TextSoFarReasoningParser
from frontend.parsers.tokenizer import ParserTokenizer
from frontend.parsers.tool.kimi_k3 import MARKERS
from frontend.parsers.types import ParsedDelta

THINK_OPEN, THINK_CLOSE = "<|open|>think<|sep|>", "<|close|>think<|sep|>"
RESPONSE_OPEN, RESPONSE_CLOSE = "<|open|>response<|sep|>", "<|close|>response<|sep|>"
MESSAGE_CLOSE = "<|close|>message<|sep|>"
_O, _C, _S = r"<\|open\|>", r"<\|close\|>", r"<\|sep\|>"
_THINK_OPEN_RE = re.compile(_O + r"\s*think\s*" + _S)
_THINK_CLOSE_RE = re.compile(_C + r"\s*think\s*" + _S)
_RESPONSE_OPEN_RE = re.compile(_O + r"\s*response\s*" + _S)
_RESPONSE_CLOSE_RE = re.compile(_C + r"\s*response\s*" + _S)
_MESSAGE_CLOSE_RE = re.compile(_C + r"\s*message\s*" + _S)


def _match_at(haystack: Sequence[int], i: int, needle: Sequence[int]) -> bool:
    return all(haystack[i + k] == needle[k] for k in range(len(needle)))


def _last_index(haystack: Sequence[int], needle: Sequence[int]) -> int:
    """Start of the last occurrence of ``needle`` in ``haystack``, or -1."""
    if not needle:
        return -1
    for i in range(len(haystack) - len(needle), -1, -1):
        if haystack[i] == needle[0] and _match_at(haystack, i, needle):
            return i
    return -1


def _newest_marker(haystack: Sequence[int], a: Sequence[int], b: Sequence[int]) -> int:
    """0 if ``a`` occurs last in ``haystack``, 1 if ``b`` does, -1 if neither."""
    if not a or not b:
        return -1
    n = len(haystack)
    for i in range(n - min(len(a), len(b)), -1, -1):
        if haystack[i] == a[0] and i + len(a) <= n and _match_at(haystack, i, a):
            return 0
        if haystack[i] == b[0] and i + len(b) <= n and _match_at(haystack, i, b):
            return 1
    return -1


def _held_back(text: str, markers: Sequence[str]) -> str:
    """``text`` without a tail that may begin one of ``markers``."""
    overlap = 0
    for marker in markers:
        for n in range(min(len(marker) - 1, len(text)), 0, -1):
            if text.endswith(marker[:n]):
                overlap = max(overlap, n)
                break
    return text[:-overlap] if overlap else text


def strip_content_wrapper(text: str) -> str:
    """The response channel's body, without message markers."""
    m_open = _RESPONSE_OPEN_RE.search(text)
    m_close = _RESPONSE_CLOSE_RE.search(text, m_open.end() if m_open else 0)
    if m_open is not None and m_close is not None:
        text = text[m_open.end() : m_close.start()]
    elif m_open is not None:
        text = text[m_open.end() :]
    else:
        text = _RESPONSE_CLOSE_RE.sub("", _RESPONSE_OPEN_RE.sub("", text))
    return _MESSAGE_CLOSE_RE.sub("", text)


def _content_ready(text: str) -> str:
    """Streamed content so far without the wrapper, or a tail that may begin one."""
    m_open = _RESPONSE_OPEN_RE.search(text)
    if m_open is not None:
        text = text[m_open.end() :]
    text = _MESSAGE_CLOSE_RE.sub("", _RESPONSE_CLOSE_RE.sub("", text))
    return _held_back(text, (RESPONSE_OPEN, RESPONSE_CLOSE, MESSAGE_CLOSE))


def _reasoning_ready(text: str) -> str:
    m_open = _THINK_OPEN_RE.search(text)
    if m_open is not None:
        text = text[m_open.end() :]
    return _held_back(text, (THINK_OPEN, THINK_CLOSE))


def _new_part(current: str, previous: str) -> str:
    return current[len(previous) :] if current.startswith(previous) else current


class KimiK3ReasoningParser(TextSoFarReasoningParser):
    keeps_special_tokens = True
    joins_special_tokens = True
    vllm_composite = "kimi_k3"

    def __init__(
        self, tokenizer: ParserTokenizer, chat_template_kwargs: dict | None = None
    ) -> None:
        super().__init__(tokenizer, chat_template_kwargs)
        kwargs = chat_template_kwargs or {}
        thinking = kwargs.get("thinking")
        if thinking is None:
            thinking = kwargs.get("enable_thinking", True)
        self.thinking = bool(thinking)
        self.think_open_ids = tokenizer.encode(THINK_OPEN)
        self.think_close_ids = tokenizer.encode(THINK_CLOSE)
        self.response_open_ids = tokenizer.encode(RESPONSE_OPEN)
        self.keep_tool_channels = False
        self._cached_delta_ids: tuple[int, ...] | None = None
        self._cached_content_ids: list[int] | None = None

    @classmethod
    def check_tokenizer(cls, tokenizer: ParserTokenizer) -> None:
        missing = [m for m in MARKERS if m not in tokenizer.vocab]
        if missing:
            raise ValueError(f"the kimi_k3 reasoning parser needs the {', '.join(missing)} tokens")

    def set_request(self, tools: list[dict] | None, tool_choice: object) -> None:
        self.keep_tool_channels = bool(tools) and tool_choice != "none"

    # -- token ids ---------------------------------------------------------------

    def is_reasoning_end(self, token_ids: Sequence[int]) -> bool:
        if not self.thinking:
            return True
        return _newest_marker(token_ids, self.think_close_ids, self.think_open_ids) == 0

    def is_reasoning_end_streaming(
        self, token_ids: Sequence[int], delta_ids: Sequence[int]
    ) -> bool:
        if not self.thinking:
            return True
        delta = list(delta_ids)
        if not delta:
            return False
        # Only this step's ids, and enough before them for a marker that straddles.
        carry = max(len(self.think_close_ids), len(self.think_open_ids)) - 1
        head = len(token_ids) - len(delta)
        window = list(token_ids[max(0, head - carry) : head]) + delta
        return _newest_marker(window, self.think_close_ids, self.think_open_ids) == 0

    def _content_ids(self, token_ids: list[int]) -> list[int]:
        if not self.thinking:
            return token_ids
        at = _last_index(token_ids, self.think_close_ids)
        return [] if at == -1 else token_ids[at + len(self.think_close_ids) :]

    def extract_content_ids(self, token_ids: list[int]) -> list[int]:
        # The step that closed reasoning computed them on all ids so far.
        cached_delta, cached_content = self._cached_delta_ids, self._cached_content_ids
        self._cached_delta_ids = self._cached_content_ids = None
        if cached_delta == tuple(token_ids) and cached_content is not None:
            return cached_content
        return self._content_ids(token_ids)

    def count_reasoning_tokens(self, token_ids: Sequence[int]) -> int:
        if not self.thinking:
            return 0
        think_open, think_close, response_open = (
            self.think_open_ids,
            self.think_close_ids,
            self.response_open_ids,
        )
        first_ids = {m[0] for m in (think_open, think_close, response_open) if m}
        n, count, i = len(token_ids), 0, 0
        in_reasoning, seen_open = True, False
        while i < n:
            if token_ids[i] in first_ids:
                if i + len(think_open) <= n and _match_at(token_ids, i, think_open):
                    in_reasoning = seen_open = True
                    i += len(think_open)
                    continue
                if i + len(think_close) <= n and _match_at(token_ids, i, think_close):
                    in_reasoning = False
                    i += len(think_close)
                    continue
                if (
                    not seen_open
                    and i + len(response_open) <= n
                    and _match_at(token_ids, i, response_open)
                ):
                    in_reasoning = False
                    i += len(response_open)
                    continue
            if in_reasoning:
                count += 1
            i += 1
        return count

    # -- text ----------------------------------------------------------------------

    def _content_after_reasoning(self, text: str) -> str | None:
        if self.keep_tool_channels:
            return text or None
        return strip_content_wrapper(text) or None

    def extract(self, text: str) -> tuple[str | None, str | None]:
        if not self.thinking:
            return None, self._content_after_reasoning(text)
        m_open = _THINK_OPEN_RE.search(text)
        start = m_open.end() if m_open is not None else 0
        m_close = _THINK_CLOSE_RE.search(text, start)
        if m_open is None and m_close is None and _RESPONSE_OPEN_RE.search(text) is not None:
            return None, self._content_after_reasoning(text)
        if m_close is not None:
            reasoning = text[start : m_close.start()]
            return reasoning or None, self._content_after_reasoning(text[m_close.end() :])
        return text[start:] or None, None

    def strip_content_streaming(self, previous_content: str, content: str) -> str | None:
        """The new content without the response/message markers."""
        return _new_part(_content_ready(content), _content_ready(previous_content)) or None

    def extract_streaming(
        self,
        previous_text: str,
        current_text: str,
        delta_text: str,
        previous_ids: Sequence[int],
        current_ids: Sequence[int],
        delta_ids: Sequence[int],
    ) -> ParsedDelta | None:
        self._cached_delta_ids = self._cached_content_ids = None
        if not self.thinking or _THINK_CLOSE_RE.search(previous_text):
            return ParsedDelta(content=delta_text)
        m_close = _THINK_CLOSE_RE.search(current_text)
        if m_close is not None:
            self._cached_delta_ids = tuple(delta_ids)
            self._cached_content_ids = self._content_ids(list(current_ids))
            m_open = _THINK_OPEN_RE.search(current_text)
            reasoning = current_text[m_open.end() if m_open is not None else 0 : m_close.start()]
            reasoning_delta = _new_part(reasoning, _reasoning_ready(previous_text))
            content = current_text[m_close.end() :]
            return ParsedDelta(reasoning=reasoning_delta or None, content=content or None)
        reasoning_delta = _new_part(_reasoning_ready(current_text), _reasoning_ready(previous_text))
        return ParsedDelta(reasoning=reasoning_delta) if reasoning_delta else None
