"""``granite-20b-fc``: granite-20b-functioncalling's ``<function_call>`` JSON calls.

::

    text<function_call> {"name": "get_weather", "arguments": {"city": "Paris"}}
    <function_call> {"name": "search", "arguments": {"query": "rain"}}

vLLM's ``Granite20bFCToolParser`` as it is: non-streaming, each
``<function_call>`` is followed by one JSON object (text after it until the
next tag is dropped) and content is the text before the first; streaming
only when the output starts with ``<function_call>``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence

from frontend.parsers.json_partial import common_prefix, loads_partial
from frontend.parsers.text_so_far import TextSoFarToolParser
from frontend.parsers.tool.base import is_complete_json
from frontend.parsers.types import (
    DeltaToolCall,
    ExtractedToolCalls,
    ParsedDelta,
    ToolCall,
    make_tool_call_id,
)

BOT = "<function_call>"
_CALL_RE = re.compile(r"<function_call>\s*")
_DECODER = json.JSONDecoder()


def _skip_space(i: int, s: str) -> int:
    while i < len(s) and s[i].isspace():
        i += 1
    return i


class Granite20bFCToolParser(TextSoFarToolParser):
    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.current_tool_id = -1
        self.current_tool_name_sent = False

    def extract(self, text: str) -> ExtractedToolCalls:
        if BOT not in text:
            return ExtractedToolCalls(False, [], text)
        try:
            matches = list(_CALL_RE.finditer(text))
            calls = []
            for i, m in enumerate(matches):
                stop = matches[i + 1].start() if i + 1 < len(matches) else None
                obj = _DECODER.raw_decode(text[m.end() : stop])[0]
                name = obj["name"]
                if not isinstance(name, str):  # vLLM's FunctionCall refuses it
                    raise TypeError("tool name must be a string")
                args = json.dumps(obj["arguments"], ensure_ascii=False)
                calls.append(ToolCall(name, args, make_tool_call_id()))
        except Exception:
            return ExtractedToolCalls(False, [], text)
        content = text[: text.find(BOT)]
        return ExtractedToolCalls(True, calls, content or None)

    def extract_streaming(
        self,
        previous_text: str,
        current_text: str,
        delta_text: str,
        previous_ids: Sequence[int],
        current_ids: Sequence[int],
        delta_ids: Sequence[int],
    ) -> ParsedDelta | None:
        if len(current_text) < len(BOT) and BOT.startswith(current_text):
            return None
        if not current_text.startswith(BOT):
            return ParsedDelta(content=delta_text)
        try:
            return self._step(current_text)
        except Exception:
            return None

    def _step(self, text: str) -> ParsedDelta | None:
        calls: list = []
        complete: list[bool] = []
        start = _skip_space(len(BOT), text)
        while start < len(text):
            obj, end = loads_partial(text[start:], self.current_tool_name_sent)
            complete.append(is_complete_json(text[start : start + end]))
            start = _skip_space(start + end, text)
            start = _skip_space(start + len(BOT), text)
            calls.append(obj)
        index = self.current_tool_id
        current = calls[index] if len(calls) > 0 else {}
        if len(calls) == 0:
            return None
        delta: ParsedDelta | None = None
        if len(calls) > index + 1:
            if index >= 0:
                args = current.get("arguments")
                if args:
                    sent = len(self.streamed_args_for_tool[index])
                    rest = json.dumps(args, ensure_ascii=False)[sent:]
                    delta = ParsedDelta(tool_calls=[DeltaToolCall(index, arguments=rest)])
                    self.streamed_args_for_tool[index] += rest
            self.current_tool_id = len(calls) - 1
            self.current_tool_name_sent = False
            self.streamed_args_for_tool.append("")
            return delta
        if not self.current_tool_name_sent:
            name = current.get("name")
            if name:
                if not isinstance(name, str):  # vLLM's delta refuses it
                    raise TypeError(name)
                delta = ParsedDelta.new_call(index, name)
                self.current_tool_name_sent = True
        else:
            args = current.get("arguments")
            if args:
                sent = len(self.streamed_args_for_tool[index])
                cur_json = json.dumps(args, ensure_ascii=False)
                prev = self.prev_tool_call_arr[index].get("arguments")
                piece: str | None = None
                if complete[index]:
                    piece = cur_json[sent:]
                elif prev:
                    prev_json = json.dumps(prev, ensure_ascii=False)
                    if cur_json != prev_json:
                        piece = common_prefix(prev_json, cur_json)[sent:]
                if piece is not None:
                    delta = ParsedDelta(tool_calls=[DeltaToolCall(index, arguments=piece)])
                    self.streamed_args_for_tool[index] += piece
        self.prev_tool_call_arr = calls
        return delta
