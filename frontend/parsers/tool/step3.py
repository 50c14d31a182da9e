"""``step3``: Step-3's steptml tool calls.

::

    text<｜tool_calls_begin｜><｜tool_call_begin｜>function<｜tool_sep｜>
    <steptml:invoke name="get_weather">
    <steptml:parameter name="city">Paris</steptml:parameter>
    </steptml:invoke><｜tool_call_end｜><｜tool_calls_end｜>

vLLM's ``Step3ToolParser`` as it is: parameter values are text, cast by the
tool schema's ``type`` (integer, number, boolean, null; strings stripped);
content is the text around the block (non-streaming: stripped); streaming
sends each call's name, then its arguments whole at its end tag; special
tokens are kept when tools are given.
"""

from __future__ import annotations

import contextlib
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
    tool_function,
)

CALLS_BEGIN = "<｜tool_calls_begin｜>"
CALLS_END = "<｜tool_calls_end｜>"
CALL_BEGIN = "<｜tool_call_begin｜>"
CALL_END = "<｜tool_call_end｜>"
SEP = "<｜tool_sep｜>"
_INVOKE_RE = re.compile(r'<steptml:invoke name="([^"]+)">')
_PARAM_RE = re.compile(r'<steptml:parameter name="([^"]+)">([^<]*)</steptml:parameter>')


def _parse_invoke(text: str) -> tuple[str | None, dict[str, Any] | None]:
    m = _INVOKE_RE.search(text)
    if not m:
        return None, None
    return m.group(1), {name: value.strip() for name, value in _PARAM_RE.findall(text)}


class Step3ToolParser(TextSoFarToolParser):
    keeps_special_tokens = "with_tools"

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.position = 0
        self.block_started = False
        self.block_finished = False
        self.current_tool_id = -1
        self.current_tool_name_sent = False

    def _cast(self, name: str, params: dict[str, Any]) -> dict[str, Any]:
        for tool in self.tools:
            function = tool_function(tool)
            if function.get("name") != name:
                continue
            properties = (function.get("parameters") or {}).get("properties", {})
            for key, value in params.items():
                if not isinstance(value, str):
                    continue
                kind = properties.get(key, {}).get("type")
                if kind == "string":
                    params[key] = value.strip()
                elif kind == "integer":
                    with contextlib.suppress(ValueError):
                        params[key] = int(value)
                elif kind == "number":
                    with contextlib.suppress(ValueError):
                        params[key] = float(value)
                elif kind == "boolean":
                    lower = value.lower()
                    params[key] = lower == "true" if lower in ("true", "false") else value
                elif kind == "null":
                    params[key] = None if value.lower() == "null" else value
            break
        return params

    def extract(self, text: str) -> ExtractedToolCalls:
        if CALLS_BEGIN not in text:
            return ExtractedToolCalls(False, [], text)
        before, rest = text.split(CALLS_BEGIN, 1)
        if CALLS_END not in rest:
            return ExtractedToolCalls(False, [], text)
        block, after = rest.split(CALLS_END, 1)
        content = (before + after).strip()
        calls = []
        for part in block.split(CALL_BEGIN):
            if not part or CALL_END not in part:
                continue
            body = part.split(CALL_END, 1)[0]
            if SEP not in body:
                continue
            kind, invoke = body.split(SEP, 1)
            if kind.strip() != "function":
                continue
            name, params = _parse_invoke(invoke)
            if name and params is not None:
                args = json.dumps(self._cast(name, params), ensure_ascii=False)
                calls.append(ToolCall(name, args, make_tool_call_id()))
        if calls:
            return ExtractedToolCalls(True, calls, content or None)
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
        while True:
            if self.position >= len(current_text):
                return None
            rest = current_text[self.position :]
            if self.block_finished:
                self.position = len(current_text)
                return ParsedDelta(content=rest)
            if not self.block_started:
                if rest.startswith(CALLS_BEGIN):
                    self.position += len(CALLS_BEGIN)
                    self.block_started = True
                    continue
                start = rest.find(CALLS_BEGIN)
                if start == -1:
                    if CALLS_BEGIN.startswith(rest.strip()) and rest:
                        return None  # maybe the start of the block
                    self.position = len(current_text)
                    return ParsedDelta(content=rest)
                self.position += start
                return ParsedDelta(content=rest[:start])
            stripped = rest.lstrip()
            self.position += len(rest) - len(stripped)
            rest = stripped
            if rest.startswith(CALLS_END):
                self.position += len(CALLS_END)
                self.block_finished = True
                self.current_tool_id = -1
                continue
            calls = self.prev_tool_call_arr
            index = self.current_tool_id
            if index == -1 or calls[index].get("finished"):
                if rest.startswith(CALL_BEGIN):
                    self.position += len(CALL_BEGIN)
                    self.current_tool_id = index = 0 if index == -1 else index + 1
                    self.current_tool_name_sent = False
                    while len(calls) <= index:
                        calls.append({})
                    calls[index]["finished"] = False
                    continue
                if CALL_BEGIN.startswith(rest):
                    return None
            if index == -1 or calls[index].get("finished", False):
                return None
            end = rest.find(CALL_END)
            body = rest if end == -1 else rest[:end]
            if end == -1 and CALL_END.startswith(body):
                return None
            name, params = _parse_invoke(body)
            if not name:
                return None
            params = params or {}
            call: dict[str, Any] = {"name": name, "parameters": params}
            if not self.current_tool_name_sent:
                self.current_tool_name_sent = True
                calls[index].update(call)
                return ParsedDelta.new_call(index, name)
            calls[index].update(call)
            if end != -1:
                self.position += end + len(CALL_END)
                calls[index]["finished"] = True
                args = self._cast(name, params)
                if args:
                    piece = json.dumps(args, ensure_ascii=False)
                    return ParsedDelta(tool_calls=[DeltaToolCall(index, arguments=piece)])
            return None
