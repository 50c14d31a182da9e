"""``muse_glimmer``: MuseGlimmer's channels, in the decoded text.

::

    to=self<|message|>...reasoning...<|eom|>to=user<|message|>answer<|eot|>

Reasoning is the ``to=self`` bodies, content the ``to=user`` ones; framing
never reaches the client.  Reasoning ends (for the tool parser) when a tool
channel (``to=<tool><|message|>`` with ATEM ``<atem:invoke``) opens, and that
channel is handed over from its header.  The prompt and earlier turns do not
count (the current ``<|start|>assistant`` turn only).  A stream that ends
before a tool channel sends what is left of the answer at the end.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from frontend.parsers.text_so_far import TextSoFarReasoningParser
from frontend.parsers.types import ParsedDelta

EOM, EOT = "<|eom|>", "<|eot|>"
FUNCTION_CALLS = "<atem:function_calls>"
REASONING_OPEN = "to=self<|message|>"
ASSISTANT_TURN = "<|start|>assistant"
_HEADER_RE = re.compile(r"to=(?P<recipient>[^\s<]+)<\|message\|>")
_HEADER = r"to=[^\s<]+<\|message\|>"
_COLLAPSE_RE = re.compile(
    r"<\|eom\|>(?:(?!to=self<\|message\|>).)*?to=self<\|message\|>", re.DOTALL
)
_REASONING_RE = re.compile(r"to=self<\|message\|>(.*?)<\|eom\|>", re.DOTALL)
_CONTENT_RE = re.compile(r"to=user<\|message\|>(.*?)(?=<\|eot\|>|<\|eom\|>|$)", re.DOTALL)
_STRIP_REASONING_RE = re.compile(
    r"(?:<\|start\|>assistant\s*)?to=self<\|message\|>.*?<\|eom\|>", re.DOTALL
)
# An unterminated reasoning span stops at the next channel header.
_STRIP_OPEN_REASONING_RE = re.compile(
    r"(?:<\|start\|>assistant\s*)?to=self<\|message\|>"
    r"(?:(?!<\|eom\|>)(?!" + _HEADER + r").)*(?=" + _HEADER + r"|$)",
    re.DOTALL,
)
_OPEN_REASONING_RE = re.compile(
    r"to=self<\|message\|>((?:(?!<\|eom\|>)(?!" + _HEADER + r").)*)(?=" + _HEADER + r"|$)",
    re.DOTALL,
)
_HOLDBACK = (EOM, EOT, "<|start|>", "<|message|>")
_OPEN_TAIL_HEADER_RE = re.compile(r"[\s](?:t|to|to=[^\s<]*)$")


def _current_turn(text: str) -> str:
    at = text.rfind(ASSISTANT_TURN)
    return text[at + len(ASSISTANT_TURN) :] if at != -1 else text


def _trim_open_body(body: str) -> str:
    """Hold back a still-growing body's tail that may be framing (to a fixpoint)."""
    while True:
        trimmed = body
        for marker in _HOLDBACK:
            for k in range(min(len(marker) - 1, len(trimmed)), 0, -1):
                if trimmed.endswith(marker[:k]):
                    trimmed = trimmed[:-k]
                    break
            else:
                continue
            break
        tail = _OPEN_TAIL_HEADER_RE.search(trimmed)
        if tail is not None:
            trimmed = trimmed[: tail.start()]
        if trimmed == body:
            return body
        body = trimmed


def _tool_channel(text: str) -> str:
    """The current turn from its first tool-channel header on ("" if none)."""
    scoped = _STRIP_OPEN_REASONING_RE.sub("", _STRIP_REASONING_RE.sub("", _current_turn(text)))
    for match in _HEADER_RE.finditer(scoped):
        if match.group("recipient") not in ("self", "user"):
            return scoped[match.start() :]
    return ""


def _has_tool_markup(text: str) -> bool:
    return FUNCTION_CALLS in text or "<atem:invoke" in text


def _bodies(text: str) -> tuple[str, str]:
    """(reasoning bodies, answer bodies) of the text, an open body trimmed."""
    reasoning: list[str] = []
    content: list[str] = []
    pos, n = 0, len(text)
    while pos < n:
        match = _HEADER_RE.search(text, pos)
        if not match:
            break
        start = match.end()
        eom, eot = text.find(EOM, start), text.find(EOT, start)
        ends = [p for p in (eom, eot) if p != -1]
        next_header = _HEADER_RE.search(text, start)
        if next_header is not None:
            ends.append(next_header.start())
        end = min(ends) if ends else n
        body = text[start:end] if ends else _trim_open_body(text[start:end])
        recipient = match.group("recipient")
        if recipient == "self":
            reasoning.append(body)
        elif recipient == "user" and not _has_tool_markup(body):
            content.append(body)
        if ends and end in (eom, eot):
            pos = end + len(EOM if end == eom else EOT)
        else:
            pos = end
    return "".join(reasoning), "".join(content)


class MuseGlimmerReasoningParser(TextSoFarReasoningParser):
    keeps_special_tokens = True

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._emitted_reasoning = ""
        self._emitted_content = ""
        self._handed_off = False

    def is_reasoning_end(self, token_ids: Sequence[int]) -> bool:
        return _has_tool_markup(_tool_channel(self.tokenizer.decode(list(token_ids))))

    def extract_content_ids(self, token_ids: list[int]) -> list[int]:
        return []

    def fallback_content(self) -> str | None:
        _, content = _bodies(self._so_far.text)
        return content[len(self._emitted_content) :] or None

    def extract(self, text: str) -> tuple[str | None, str | None]:
        matches = _REASONING_RE.findall(_COLLAPSE_RE.sub("\n", text))
        reasoning = "\n".join(matches) if matches else None
        open_match = _OPEN_REASONING_RE.search(text)
        if open_match and open_match.group(1):
            partial = open_match.group(1)
            reasoning = f"{reasoning}\n{partial}" if reasoning else partial
        remainder = _STRIP_OPEN_REASONING_RE.sub("", _STRIP_REASONING_RE.sub("", text))
        if _has_tool_markup(remainder):
            return reasoning, remainder or None
        content_match = _CONTENT_RE.search(text)
        if content_match:
            return reasoning, content_match.group(1) or None
        if REASONING_OPEN in text:
            return reasoning, None
        return None, text or None

    def extract_streaming(
        self,
        previous_text: str,
        current_text: str,
        delta_text: str,
        previous_ids: Sequence[int],
        current_ids: Sequence[int],
        delta_ids: Sequence[int],
    ) -> ParsedDelta | None:
        reasoning, content = _bodies(current_text)
        reasoning_delta = content_delta = ""
        if reasoning.startswith(self._emitted_reasoning) and len(reasoning) > len(
            self._emitted_reasoning
        ):
            reasoning_delta = reasoning[len(self._emitted_reasoning) :]
            self._emitted_reasoning = reasoning
        if content.startswith(self._emitted_content) and len(content) > len(self._emitted_content):
            content_delta = content[len(self._emitted_content) :]
            self._emitted_content = content
        if not self._handed_off:
            channel = _tool_channel(current_text)
            if _has_tool_markup(channel):
                self._handed_off = True
                return ParsedDelta(reasoning=reasoning_delta or None, content=channel)
        if reasoning_delta and content_delta:
            return ParsedDelta(reasoning=reasoning_delta, content=content_delta)
        if reasoning_delta:
            return ParsedDelta(reasoning=reasoning_delta)
        if content_delta:
            return ParsedDelta(content=content_delta)
        return None
