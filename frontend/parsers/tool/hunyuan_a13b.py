"""``hunyuan_a13b``: Hunyuan-A13B's JSON array of calls in ``<tool_calls>``.

::

    text<tool_calls>[{"name": "get_weather", "arguments": {"city": "Paris"}}]</tool_calls>

vLLM's ``HunyuanA13BToolParser`` as it is.  Whole: the first
``<tool_calls>`` block (not inside ``<think>...</think>``) whose body is
valid JSON; the text before it is content.  Without one, the chat
template's ``助手：`` is dropped from the content once.  A body that is not
a list is no call; a name that is not a string or arguments that are neither
an object nor a string make the whole output content (vLLM's pydantic
validation raises and its parser falls back).

Streaming reads the text only while it starts (after blanks and an optional
``<tool_calls>``) with ``[``; else each delta is content.  Names and
arguments are found with regular expressions over the whole text so far:
the first empty-arguments call anywhere sends ``{}`` for the current call
(vLLM's quirk), non-empty arguments (one level of nesting at most) stream
as their text grows.  Its sent arguments are kept in ``streamed_args``, not
``streamed_args_for_tool``, so the serving layer's end-of-stream top-up
appends the last call's whole arguments again when the final delta carries
a call piece (as vLLM's does).
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any

from frontend.parsers.text_so_far import TextSoFarToolParser
from frontend.parsers.types import (
    DeltaToolCall,
    ExtractedToolCalls,
    ParsedDelta,
    ToolCall,
    make_tool_call_id,
)

BOT = "<tool_calls>"
_BLOCK_RE = re.compile(r"<tool_calls>([\s\S]*?)</tool_calls>", re.DOTALL)
_THINK_RE = re.compile(r"<think>(.*?)</think>", re.DOTALL)
_NAME_RE = re.compile(r'"name"\s*:\s*"([^"]+)"')
_EMPTY_ARGS_RE = re.compile(r'"name"\s*:\s*"[^"]+"\s*,\s*"arguments"\s*:\s*\{\s*\}')
# vLLM's TODO: no deeper nesting than one object inside the arguments.
_ARGS_RE = re.compile(
    r'"name"\s*:\s*"[^"]+"\s*,\s*"arguments"\s*:\s*(\{(?:[^{}]|(?:\{[^{}]*\}))*\})'
)


def _skip_space(text: str, i: int) -> int:
    while i < len(text) and text[i].isspace():
        i += 1
    return i


def _find_block(text: str) -> tuple[str, str | None]:
    """(content before the block, the block's JSON body) or (text, None)."""
    for match in _BLOCK_RE.finditer(text):
        start, end = match.span()
        thinks = [m.span() for m in _THINK_RE.finditer(text)]
        if any(start > t_start and end < t_end for t_start, t_end in thinks):
            continue
        body = match.group(1).strip()
        try:
            json.loads(body)
        except ValueError:
            continue
        return text[:start], body
    return text, None


class _Sent:
    """What has been sent of one call."""

    __slots__ = ("name", "prefix", "arguments")

    def __init__(self) -> None:
        self.name = False
        self.prefix = False
        self.arguments = ""


class HunyuanA13BToolParser(TextSoFarToolParser):
    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.current_tool_id = -1
        self.current_index = -1
        self.sent: list[_Sent] = []
        self.streamed_args: list[str] = []

    def extract(self, text: str) -> ExtractedToolCalls:
        content, body = _find_block(text)
        if not body:
            return ExtractedToolCalls(False, [], content.replace("助手：", "", 1))
        data = json.loads(body)
        if not isinstance(data, list):
            return ExtractedToolCalls(False, [], content or text)
        calls = []
        for call in data:
            if not isinstance(call, dict) or "name" not in call or "arguments" not in call:
                continue
            name, args = call["name"], call["arguments"]
            if isinstance(args, dict):
                args = json.dumps(args, ensure_ascii=False)
            if not isinstance(name, str) or not isinstance(args, str):
                return ExtractedToolCalls(False, [], text)  # vLLM's validation error
            calls.append(ToolCall(name, args, make_tool_call_id()))
        return ExtractedToolCalls(bool(calls), calls, content if content.strip() else None)

    def extract_streaming(
        self,
        previous_text: str,
        current_text: str,
        delta_text: str,
        previous_ids: Sequence[int],
        current_ids: Sequence[int],
        delta_ids: Sequence[int],
    ) -> ParsedDelta | None:
        start = _skip_space(current_text, 0)
        if current_text.startswith(BOT, start):
            start = _skip_space(current_text, start + len(BOT))
        if start >= len(current_text) or current_text[start] != "[":
            return ParsedDelta(content=delta_text)
        try:
            parsed = json.loads(current_text[start:])
        except ValueError:
            pass
        else:
            if isinstance(parsed, list):
                self.prev_tool_call_arr = parsed
        names = list(_NAME_RE.finditer(current_text))
        count = len(names)
        if count == 0:
            return None
        while len(self.sent) < count:
            self.sent.append(_Sent())
        index = self.current_index
        # The next call's name, once it shows.
        following = index + 1
        if following < count and not self.sent[following].name:
            self.current_index = self.current_tool_id = following
            self.sent[following].name = True
            self._grow_streamed(following)
            return ParsedDelta.new_call(following, names[following].group(1))
        if 0 <= index < count:
            return self._stream_args(current_text, index, count)
        return None

    def _grow_streamed(self, index: int) -> None:
        while len(self.streamed_args) <= index:
            self.streamed_args.append("")

    def _send_args(self, index: int, piece: str) -> ParsedDelta:
        self._grow_streamed(index)
        self.streamed_args[index] += piece
        return ParsedDelta(tool_calls=[DeltaToolCall(index, arguments=piece)])

    def _next_call(self, index: int, count: int) -> None:
        if index < count - 1:
            self.current_index = self.current_tool_id = self.current_index + 1

    def _stream_args(self, text: str, index: int, count: int) -> ParsedDelta | None:
        sent = self.sent[index]
        # vLLM looks for any call with empty arguments, not the current one.
        empty = _EMPTY_ARGS_RE.search(text)
        if empty and empty.start() > 0 and not sent.prefix:
            sent.prefix, sent.arguments = True, "{}"
            delta = self._send_args(index, "{}")
            self._next_call(index, count)
            return delta
        matches: list[Any] = list(_ARGS_RE.finditer(text))
        if index >= len(matches):
            return None
        match = matches[index]
        args = match.group(1)
        if index != count - 1:
            next_call = text.find("},{", match.start())
            if next_call != -1:
                # Raises (IndexError) where vLLM's does, e.g. for '"arguments" :'.
                args = text[match.start() : next_call + 1].split('"arguments":')[1].strip()
        if not sent.prefix and args.startswith("{"):
            sent.prefix, sent.arguments = True, "{"
            return self._send_args(index, "{")
        if args.startswith(sent.arguments):
            diff = args[len(sent.arguments) :]
            if diff:
                sent.arguments = args
                return self._send_args(index, diff)
        if args.endswith("}") and args == sent.arguments:
            self._next_call(index, count)
        return None
