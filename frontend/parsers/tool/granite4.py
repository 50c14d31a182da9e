"""``granite4``: Granite 4 JSON tool calls in ``<tool_call>`` tags.

::

    text<tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call>more

vLLM's ``Granite4ToolParser`` as it is: text around the calls is content
(before, between and after them); a call is sent whole once its end tag
arrives (the name and the arguments as one piece; string arguments as they
are).  A malformed output (an unclosed or empty call, two start tags in a
row, a body that is not a JSON object with ``name`` and ``arguments``) is
all content whole, and streams nothing for the step that shows it.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from frontend.parsers.text_so_far import TextSoFarToolParser
from frontend.parsers.types import (
    UNSET,
    DeltaToolCall,
    ExtractedToolCalls,
    ParsedDelta,
    ToolCall,
    make_tool_call_id,
)

START = "<tool_call>"
END = "</tool_call>"


def _dump_args(args: Any) -> str | None:
    if args is None or isinstance(args, str):
        return args
    return json.dumps(args, ensure_ascii=False)


def _partial_search(text: str, tag: str) -> tuple[int, int, bool]:
    """``regex``'s ``search(text, partial=True)`` for a literal: the first
    place the tag is, or where the text ends inside it (maybe empty)."""
    for i in range(len(text) + 1):
        if text.startswith(tag, i):
            return i, i + len(tag), False
        if tag.startswith(text[i:]):
            return i, len(text), True
    raise AssertionError("unreachable: the empty tail is a partial match")


class Granite4ToolParser(TextSoFarToolParser):
    keeps_special_tokens = "with_tools"

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.current_tool_id = -1
        self.look_ahead = ""
        self.in_tc = False

    def _collect(
        self, text_segments: list[str], tc_segments: list[str], whole: bool
    ) -> tuple[str, list[tuple[Any, str | None]]]:
        objs = [json.loads(t) for t in tc_segments]
        calls = []
        for obj in objs:
            assert isinstance(obj, dict)
            self.prev_tool_call_arr.append(obj)
            name, args = obj["name"], _dump_args(obj["arguments"])
            # vLLM's FunctionCall / DeltaFunctionCall: a string name, and
            # (whole) string arguments.
            if not isinstance(name, str) and (whole or name is not None):
                raise TypeError("tool name must be a string")
            if whole and args is None:
                raise TypeError("arguments must be a string")
            calls.append((name, args))
        return "".join(text_segments), calls

    def extract(self, text: str) -> ExtractedToolCalls:
        try:
            text_segments: list[str] = []
            tc_segments: list[str] = []
            last = 0
            pos = 0
            while True:
                start, end = text.find(START, pos), text.find(END, pos)
                if start < 0 and end < 0:
                    break
                if start >= 0 and (end < 0 or start < end):
                    assert not self.in_tc, "two tool call start tokens in a row"
                    if text[last:start]:
                        text_segments.append(text[last:start])
                    self.in_tc = True
                    last = pos = start + len(START)
                else:
                    assert self.in_tc, "tool call end token without a start token"
                    assert text[last:end], "no text between the tool call tokens"
                    tc_segments.append(text[last:end])
                    self.in_tc = False
                    last = pos = end + len(END)
            assert not self.in_tc, "an incomplete tool call"
            if text[last:]:
                text_segments.append(text[last:])
            content, calls = self._collect(text_segments, tc_segments, whole=True)
        except Exception:
            return ExtractedToolCalls(False, [], text)
        tool_calls = [ToolCall(name, args or "", make_tool_call_id()) for name, args in calls]
        return ExtractedToolCalls(bool(tool_calls), tool_calls, content or None)

    def _step(self, delta_text: str) -> tuple[bool, str, str]:
        start_pos = start_end = end_pos = end_end = -1
        s_start, s_end, partial = _partial_search(delta_text, START)
        if not partial:
            start_pos, start_end = s_start, s_end
        elif s_end > s_start:
            start_pos = -2
        found = delta_text.find(END)
        if found >= 0:
            end_pos, end_end = found, found + len(END)

        done = True
        content = tc_text = ""
        if start_pos < 0:
            if start_pos == -2:
                content = delta_text[:s_start]
                self.look_ahead = delta_text[s_start:]
            else:
                content = delta_text
        elif not self.in_tc:
            self.in_tc = True
            content = delta_text[:start_pos]
            if end_pos > 0:
                tc_text = delta_text[start_end:end_pos]
                self.look_ahead = delta_text[end_end:]
                done = False  # more may be buffered
            else:
                self.look_ahead = delta_text[start_pos:]
        elif end_pos < 0:
            self.look_ahead = delta_text
        else:
            tc_text = delta_text[start_end:end_pos]
            self.in_tc = False
            self.look_ahead = delta_text[end_end:]
            done = False
        return done, content, tc_text

    def extract_streaming(
        self,
        previous_text: str,
        current_text: str,
        delta_text: str,
        previous_ids: Sequence[int],
        current_ids: Sequence[int],
        delta_ids: Sequence[int],
    ) -> ParsedDelta | None:
        try:
            done = False
            text_segments: list[str] = []
            tc_segments: list[str] = []
            while not done:
                delta_text = self.look_ahead + delta_text
                self.look_ahead = ""
                done, content, tc_text = self._step(delta_text)
                if content:
                    text_segments.append(content)
                if tc_text:
                    tc_segments.append(tc_text)
                delta_text = ""
            content, calls = self._collect(text_segments, tc_segments, whole=False)
            deltas = []
            for name, args in calls:
                self.current_tool_id += 1
                deltas.append(
                    DeltaToolCall(
                        self.current_tool_id,
                        id=make_tool_call_id(),
                        type="function",
                        name=UNSET if name is None else name,
                        arguments=UNSET if args is None else args,
                    )
                )
                self.streamed_args_for_tool.append(args or "")
            assert self.current_tool_id + 1 == len(self.prev_tool_call_arr)
            assert self.current_tool_id + 1 == len(self.streamed_args_for_tool)
            if content or deltas:
                return ParsedDelta(content=content or None, tool_calls=deltas)
        except Exception:
            pass
        return None
