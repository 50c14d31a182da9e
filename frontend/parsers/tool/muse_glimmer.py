"""``muse_glimmer``: MuseGlimmer's ATEM calls, in channel-scoped messages.

::

    to=self<|message|>...reasoning...<|eom|>
    <|start|>assistant to=search<|message|><atem:function_calls>
    <atem:invoke name="search"><atem:parameter name="query">x</atem:parameter>
    </atem:invoke></atem:function_calls><|eom|>
    <|start|>assistant to=user<|message|>...answer...<|eot|>

vLLM's ``MuseGlimmerToolParser`` as it is.  The output is cut into messages
(a message also ends where the next header starts); calls are read only from
messages addressed to a tool (never ``self`` or ``user``), or from the whole
text when no header is there at all.  A parameter value is JSON when it
parses, else its text; ``name.name`` is collapsed to a registered ``name``.
Content is the ``to=user`` (and bare ``<|message|>``) bodies, or unframed
text; streaming also sends the ``to=self`` bodies as reasoning, holding back
a still-open body's tail that may be framing.  A call goes out whole once
its ``</atem:invoke>`` has arrived.  Special tokens are always kept;
``tool_choice`` "required"/named is parsed as "auto".
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Sequence
from typing import Any

from frontend.parsers.text_so_far import TextSoFarToolParser
from frontend.parsers.types import (
    DeltaToolCall,
    ExtractedToolCalls,
    ParsedDelta,
    ToolCall,
    make_tool_call_id,
    tool_function,
)

# A message header: "<|start|>assistant to=x<|message|>", " to=self<|message|>"
# (the turn's first, after the prompt's "<|start|>assistant") or "<|message|>".
_MSG_HEADER_RE = re.compile(
    r"(?:<\|start\|>\s*assistant)?[^\S\n]*(?:to=(?P<rcpt>[A-Za-z0-9_.\-]+))?<\|message\|>"
)
_MSG_END_RE = re.compile(r"<\|eom\|>|<\|eot\|>")
REASONING, USER = "self", "user"
_STRUCTURAL_MARKERS = ("<|eom|>", "<|eot|>", "<|start|>", "<|message|>")
_MAX_MARKER_LEN = max(len(m) for m in _STRUCTURAL_MARKERS)
# A trailing " to=NAME" that may still become a header.
_OPEN_TAIL_TO_RE = re.compile(r"[^\S\n]+to=[A-Za-z0-9_.\-]*$")
_INVOKE_RE = re.compile(r"(<atem:invoke\b.*?</atem:invoke>)", re.DOTALL)
_NAME_RE = re.compile(r'<atem:invoke\b[^>]*?\bname="([^"]+)"')
_PARAM_RE = re.compile(
    r'<atem:parameter\b[^>]*?\bname="(?P<key>[^"]+)"[^>]*?>(?P<value>.*?)</atem:parameter>',
    re.DOTALL,
)
FUNCTION_CALLS = "<atem:function_calls>"
INVOKE = "<atem:invoke"


def _decode_value(raw: str) -> Any:
    try:
        return json.loads(raw)
    except ValueError:
        return raw


def _iter_messages(text: str) -> Iterator[tuple[str | None, str, bool]]:
    """(recipient, body, closed) per message; recipient None for a bare header."""
    pos = 0
    while pos < len(text):
        header = _MSG_HEADER_RE.search(text, pos)
        if header is None:
            return
        body_start = header.end()
        end = _MSG_END_RE.search(text, body_start)
        nxt = _MSG_HEADER_RE.search(text, body_start)
        body_end = end.start() if end is not None else len(text)
        closed = end is not None
        if nxt is not None and nxt.start() < body_end:
            body_end = nxt.start()
            closed = False
            next_pos = nxt.start()
        else:
            next_pos = end.end() if end is not None else len(text)
        body = text[body_start:body_end]
        # A <|start|> in a body is a next header still without its <|message|>.
        start_tok = body.find("<|start|>")
        if start_tok != -1:
            body = body[:start_tok]
            closed = False
        yield header.group("rcpt"), body, closed
        pos = next_pos


def _trailing_partial_marker_len(text: str) -> int:
    for overlap in range(min(len(text), _MAX_MARKER_LEN - 1), 0, -1):
        suffix = text[-overlap:]
        if any(marker.startswith(suffix) for marker in _STRUCTURAL_MARKERS):
            return overlap
    return 0


def _safe_open_body(body: str) -> str:
    """A still-growing body without the tail that may turn out to be framing."""
    tail_to = _OPEN_TAIL_TO_RE.search(body)
    if tail_to is not None:
        return body[: tail_to.start()]
    partial = _trailing_partial_marker_len(body)
    return body[: len(body) - partial] if partial else body


def _tool_channel_text(text: str) -> str:
    bodies = [
        body
        for rcpt, body, _closed in _iter_messages(text)
        if rcpt is not None and rcpt not in (REASONING, USER)
    ]
    if bodies:
        return "\n".join(bodies)
    if _MSG_HEADER_RE.search(text) is None and (FUNCTION_CALLS in text or INVOKE in text):
        return text  # no framing reached us: scan it all
    return ""


def _visible_channels(text: str) -> tuple[str, str, bool, bool]:
    """(content, reasoning, content's last message open, reasoning's open)."""
    content_parts: list[str] = []
    reasoning_parts: list[str] = []
    content_open = reasoning_open = False
    for rcpt, body, closed in _iter_messages(text):
        if rcpt == REASONING:
            reasoning_parts.append(body)
            reasoning_open = not closed
        elif rcpt is None or rcpt == USER:
            content_parts.append(body)
            content_open = not closed
    return "".join(content_parts), "".join(reasoning_parts), content_open, reasoning_open


def _normalize_name(emitted: str, registered: set[str]) -> str:
    """``get_weather.get_weather`` -> ``get_weather`` when that is registered."""
    if not registered or emitted in registered:
        return emitted
    head, sep, tail = emitted.partition(".")
    if sep and head == tail and head in registered:
        return head
    return emitted


def _extract_content(text: str) -> str | None:
    content, reasoning, _, _ = _visible_channels(text)
    if content:
        return content
    if not reasoning and _MSG_HEADER_RE.search(text) is None:
        return text or None
    return None


class MuseGlimmerToolParser(TextSoFarToolParser):
    supports_required_and_named = False
    keeps_special_tokens = "always"

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._streamed_content_len = 0
        self._streamed_reasoning_len = 0
        self._emitted_tool_calls = 0
        self._registered = {n for t in self.tools if (n := tool_function(t).get("name"))}

    def _parse_tool_calls(self, text: str) -> list[ToolCall]:
        calls = []
        for invoke in _INVOKE_RE.findall(_tool_channel_text(text)):
            name = _NAME_RE.search(invoke)
            if not name:
                continue
            args = {
                m.group("key"): _decode_value(m.group("value")) for m in _PARAM_RE.finditer(invoke)
            }
            calls.append(
                ToolCall(
                    _normalize_name(name.group(1), self._registered),
                    json.dumps(args, ensure_ascii=False),
                )
            )
        return calls

    def extract(self, text: str) -> ExtractedToolCalls:
        if FUNCTION_CALLS not in text and INVOKE not in text:
            return ExtractedToolCalls(False, [], _extract_content(text))
        try:
            calls = self._parse_tool_calls(text)
            return ExtractedToolCalls(bool(calls), calls, _extract_content(text))
        except Exception:
            return ExtractedToolCalls(False, [], text)

    def extract_streaming(
        self,
        previous_text: str,
        current_text: str,
        delta_text: str,
        previous_ids: Sequence[int],
        current_ids: Sequence[int],
        delta_ids: Sequence[int],
    ) -> ParsedDelta | None:
        if not previous_text:
            self._streamed_content_len = self._streamed_reasoning_len = 0
            self._emitted_tool_calls = 0
        try:
            calls = self._parse_tool_calls(current_text)
            content, reasoning, content_open, reasoning_open = _visible_channels(current_text)
        except Exception:
            return None
        if content_open:
            content = _safe_open_body(content)
        if reasoning_open:
            reasoning = _safe_open_body(reasoning)
        content_delta = content[self._streamed_content_len :]
        reasoning_delta = reasoning[self._streamed_reasoning_len :]
        pieces = [
            DeltaToolCall(
                i,
                id=make_tool_call_id(),
                type="function",
                name=calls[i].name,
                arguments=calls[i].arguments,
            )
            for i in range(self._emitted_tool_calls, len(calls))
        ]
        if not content_delta and not reasoning_delta and not pieces:
            return None
        self._streamed_content_len = len(content)
        self._streamed_reasoning_len = len(reasoning)
        self._emitted_tool_calls = len(calls)
        delta = ParsedDelta(tool_calls=pieces)
        if content_delta:
            delta.content = content_delta
        if reasoning_delta:
            delta.reasoning = reasoning_delta
        return delta
