"""``gigachat3``: GigaChat 3 tool calls (one per output).

::

    text<|message_sep|>function call<|role_sep|>
    {"name": "get_weather", "arguments": {"city": "Paris"}}

(or ``<|function_call|>`` before the JSON).  vLLM's ``GigaChat3ToolParser``
as it is: content is the text before ``<|message_sep|>``/``<|function_call|>``;
the arguments stream as written, without the object's closing brace;
special tokens are kept when tools are given.  A call whose ``name`` is not
a string fails the request, as in vLLM.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence

from frontend.parsers.text_so_far import TextSoFarToolParser
from frontend.parsers.types import (
    DeltaToolCall,
    ExtractedToolCalls,
    ParsedDelta,
    ToolCall,
    make_tool_call_id,
)

_FUNCTION_CALL_RE = re.compile(
    r"(?:function call<\|role_sep\|>\n|<\|function_call\|>)(.*)", re.DOTALL
)
_CONTENT_RE = re.compile(r"^(.*?)(?:<\|message_sep\|>|<\|function_call\|>)", re.DOTALL)
_NAME_RE = re.compile(r'"name"\s*:\s*"([^"]*)"', re.DOTALL)
_ARGS_RE = re.compile(r'"arguments"\s*:\s*(.*)', re.DOTALL)


class GigaChat3ToolParser(TextSoFarToolParser):
    keeps_special_tokens = "with_tools"

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.tool_started = False
        self.tool_name_sent = False
        self.end_content = False

    def extract(self, text: str) -> ExtractedToolCalls:
        call = None
        if text.rstrip().endswith("</s>"):
            text = text[: text.rfind("</s>")]
        m = _FUNCTION_CALL_RE.search(text)
        if m:
            try:
                call = json.loads(m.group(1), strict=False)
            except json.JSONDecodeError:
                return ExtractedToolCalls(False, [], text)
            if not (isinstance(call, dict) and "name" in call and "arguments" in call):
                call = None
            elif not isinstance(call["arguments"], dict):
                call = None
        mc = _CONTENT_RE.search(text)
        content = mc.group(1) if mc else text
        if not call:
            return ExtractedToolCalls(False, [], content or None)
        name = call["name"]
        if not isinstance(name, str):  # vLLM's FunctionCall raises (the request fails)
            raise TypeError("tool name must be a string")
        args = json.dumps(call["arguments"], ensure_ascii=False)
        return ExtractedToolCalls(
            True, [ToolCall(name, args, make_tool_call_id())], content or None
        )

    def extract_streaming(
        self,
        previous_text: str,
        current_text: str,
        delta_text: str,
        previous_ids: Sequence[int],
        current_ids: Sequence[int],
        delta_ids: Sequence[int],
    ) -> ParsedDelta | None:
        content = None
        name = None
        cur_args = None
        m = _FUNCTION_CALL_RE.search(current_text)
        if not self.tool_started:
            mc = _CONTENT_RE.search(delta_text)
            if mc:
                content = mc.group(1)
                self.end_content = True
            elif not self.end_content:
                content = delta_text
            if m:
                self.tool_started = True
            if content:
                return ParsedDelta(content=content)
        if not m:
            return None
        tail = m.group(1).strip()
        name_match = _NAME_RE.search(tail)
        if name_match:
            name = name_match.group(1)
        args_match = _ARGS_RE.search(tail)
        if args_match:
            cur_args = args_match.group(1).strip()
            if cur_args.endswith("</s>"):
                cur_args = cur_args[: -len("</s>")]
            if cur_args.endswith("}"):  # the object's closing brace
                try:
                    candidate = cur_args[:-1].strip()
                    json.loads(candidate, strict=False)
                    cur_args = candidate
                except json.JSONDecodeError:
                    pass
        if not self.prev_tool_call_arr:
            self.prev_tool_call_arr.append({})
        call = self.prev_tool_call_arr[0]
        if not self.tool_name_sent:
            if not name:
                return None
            self.tool_name_sent = True
            call["name"] = name
            return ParsedDelta.new_call(0, name)
        if cur_args is None:
            return None
        prev_args = call.get("arguments_str", "")
        if not prev_args:
            piece = cur_args
        elif cur_args.startswith(prev_args):
            piece = cur_args[len(prev_args) :]
        else:
            return None
        if not piece:
            return None
        call["arguments_str"] = cur_args
        try:
            call["arguments"] = json.loads(cur_args, strict=False)
        except json.JSONDecodeError:
            call["arguments"] = {}
        if not self.streamed_args_for_tool:
            self.streamed_args_for_tool.append("")
        self.streamed_args_for_tool[0] = cur_args
        return ParsedDelta(tool_calls=[DeltaToolCall(0, arguments=piece)])
