"""``internlm``: InternLM2/2.5 tool calls (one per output).

::

    text<|action_start|><|plugin|>
    {"name": "get_weather", "parameters": {"city": "Paris"}}<|action_end|>

vLLM's ``Internlm2ToolParser`` as it is: one call, ``parameters`` or
``arguments``; special tokens are kept when tools are given.  Its errors
are kept too: a second ``<|action_start|><|plugin|>`` or a body that is not
JSON raises (vLLM fails the request).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from frontend.parsers.json_partial import common_prefix, loads_partial_whole
from frontend.parsers.text_so_far import TextSoFarToolParser
from frontend.parsers.tool.base import is_complete_json
from frontend.parsers.types import (
    DeltaToolCall,
    ExtractedToolCalls,
    ParsedDelta,
    ToolCall,
    make_tool_call_id,
)

START = "<|action_start|>"
PLUGIN = "<|action_start|><|plugin|>"
END = "<|action_end|>"


def _arguments(obj: dict) -> Any:
    if "parameters" in obj:
        return obj.get("parameters")
    if "arguments" in obj:
        return obj.get("arguments")
    return None


class Internlm2ToolParser(TextSoFarToolParser):
    keeps_special_tokens = "with_tools"

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.position = 0
        self.current_tool_id = -1
        self.current_tool_name_sent = False

    def extract(self, text: str) -> ExtractedToolCalls:
        if PLUGIN not in text:
            return ExtractedToolCalls(False, [], text)
        text, action = text.split(PLUGIN)  # (two calls: vLLM's ValueError)
        action = action.split(END)[0]
        obj = json.loads(action[action.find("{") :])
        name = obj["name"]
        if not isinstance(name, str):
            raise TypeError("tool name must be a string")
        args = json.dumps(obj.get("parameters", obj.get("arguments", {})), ensure_ascii=False)
        return ExtractedToolCalls(True, [ToolCall(name, args, make_tool_call_id())], text or None)

    def extract_streaming(
        self,
        previous_text: str,
        current_text: str,
        delta_text: str,
        previous_ids: Sequence[int],
        current_ids: Sequence[int],
        delta_ids: Sequence[int],
    ) -> ParsedDelta | None:
        if START not in current_text:
            self.position = len(current_text)
            return ParsedDelta(content=delta_text)
        if self.current_tool_id > 0:
            return ParsedDelta(content="")
        if PLUGIN not in current_text[self.position :]:
            return None
        text, action = current_text[self.position :].split(PLUGIN)
        if text:
            self.position += len(text)
            return ParsedDelta(content=text)
        action = action.strip().split(END)[0]
        try:
            return self._step(action, delta_text)
        except Exception:
            return None

    def _step(self, action: str, delta_text: str) -> ParsedDelta | None:
        obj = loads_partial_whole(action, self.current_tool_name_sent)
        delta: ParsedDelta | None = None
        index = self.current_tool_id
        if not self.current_tool_name_sent:
            name = obj.get("name")
            if name:
                self.current_tool_id = index = index + 1
                if not isinstance(name, str):  # vLLM's delta refuses it, after counting
                    raise TypeError(name)
                delta = ParsedDelta.new_call(index, name)
                self.current_tool_name_sent = True
                self.streamed_args_for_tool.append("")
        else:
            prev = _arguments(self.prev_tool_call_arr[index])
            cur = _arguments(obj)
            if cur and not prev:
                cur_json = json.dumps(cur, ensure_ascii=False)
                start = cur_json.find(delta_text)
                if start != -1:
                    piece = cur_json[: start + len(delta_text)]
                elif is_complete_json(action):
                    piece = cur_json
                else:
                    return None
                delta = ParsedDelta(tool_calls=[DeltaToolCall(index, arguments=piece)])
                self.streamed_args_for_tool[index] += piece
            elif cur and prev:
                cur_json = json.dumps(cur, ensure_ascii=False)
                prev_json = json.dumps(prev, ensure_ascii=False)
                sent = len(self.streamed_args_for_tool[index])
                if is_complete_json(action):
                    piece = cur_json[sent:]
                elif cur_json != prev_json:
                    piece = common_prefix(prev_json, cur_json)[sent:]
                else:
                    piece = ""
                delta = ParsedDelta(tool_calls=[DeltaToolCall(index, arguments=piece)])
                self.streamed_args_for_tool[index] += piece
        obj["arguments"] = _arguments(obj)
        self.prev_tool_call_arr = [obj]
        return delta
