"""``functiongemma``: FunctionGemma's calls.

::

    text<start_function_call>call:get_weather{city:<escape>Paris<escape>}<end_function_call>

vLLM's ``FunctionGemmaToolParser`` as it is.  Only ``key:<escape>value<escape>``
arguments are read (a value is JSON if it parses, else the string); others
(``days:3``) are dropped.  An unclosed call runs to the end of the output and
swallows any call after it.  Whole: content is the stripped text before the
first call (None when empty).

Streaming holds back a delta's tail that may begin a marker and sends it
with the next delta; vLLM then reads ``previous_text + held-back delta``
as the text so far, so held-back text counts twice there (kept: it decides
what is sent).  A call's name goes out at its ``{``, its arguments as the
JSON of the complete ``<escape>`` pairs grows, the rest at its end marker;
text while a call is open is dropped, and held-back text at the end is never
sent.  Special tokens are kept when tools are given.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any

from frontend.parsers.text_so_far import TextSoFarToolParser
from frontend.parsers.types import DeltaToolCall, ExtractedToolCalls, ParsedDelta, ToolCall

START = "<start_function_call>"
END = "<end_function_call>"
_CALL_RE = re.compile(
    r"<start_function_call>call:(\w+)\{(.*?)\}<end_function_call>"
    r"|<start_function_call>call:(\w+)\{(.*)",
    re.DOTALL,
)
_ARG_RE = re.compile(r"(\w+):<escape>(.*?)<escape>", re.DOTALL)


def _parse_arguments(text: str) -> dict[str, Any]:
    arguments: dict[str, Any] = {}
    for key, value in _ARG_RE.findall(text):
        try:
            arguments[key] = json.loads(value)
        except ValueError:
            arguments[key] = value
    return arguments


def _held_tail(text: str) -> int:
    """How much of ``text``'s end may begin a marker (vLLM's order: the start
    marker's prefixes first, shortest first)."""
    if text.endswith(START) or text.endswith(END):
        return 0
    for tag in (START, END):
        for i in range(1, len(tag)):
            if text.endswith(tag[:i]):
                return i
    return 0


class FunctionGemmaToolParser(TextSoFarToolParser):
    keeps_special_tokens = "with_tools"

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.current_tool_id = -1
        self.current_tool_name_sent = False
        self.held = ""

    def extract(self, text: str) -> ExtractedToolCalls:
        if START not in text:
            return ExtractedToolCalls(False, [], text)
        calls = []
        for closed_name, closed_args, open_name, open_args in _CALL_RE.findall(text):
            name = closed_name or open_name
            if not name:
                continue
            args = _parse_arguments(closed_args or open_args)
            calls.append(ToolCall(name, json.dumps(args, ensure_ascii=False)))
        if not calls:
            return ExtractedToolCalls(False, [], text)
        start = text.find(START)
        content = text[:start].strip() if start > 0 else None
        return ExtractedToolCalls(True, calls, content or None)

    def _hold_back(self, delta_text: str) -> str:
        combined = self.held + delta_text
        keep = _held_tail(combined)
        self.held = combined[len(combined) - keep :] if keep else ""
        return combined[: len(combined) - keep]

    def extract_streaming(
        self,
        previous_text: str,
        current_text: str,
        delta_text: str,
        previous_ids: Sequence[int],
        current_ids: Sequence[int],
        delta_ids: Sequence[int],
    ) -> ParsedDelta | None:
        delta_text = self._hold_back(delta_text)
        current_text = previous_text + delta_text  # vLLM's, see the module doc
        if START not in current_text:
            return ParsedDelta(content=delta_text) if delta_text else None
        try:
            return self._in_calls(previous_text, current_text, delta_text)
        except Exception:  # vLLM logs and sends nothing for the step
            return None

    def _args_delta(self, args: dict[str, Any]) -> ParsedDelta | None:
        """The arguments' JSON past what was sent, if it is longer."""
        index = self.current_tool_id
        text = json.dumps(args, ensure_ascii=False)
        sent = self.streamed_args_for_tool[index]
        if len(text) <= len(sent):
            return None
        self.streamed_args_for_tool[index] = text
        return ParsedDelta(tool_calls=[DeltaToolCall(index, arguments=text[len(sent) :])])

    def _in_calls(
        self, previous_text: str, current_text: str, delta_text: str
    ) -> ParsedDelta | None:
        starts, ends = current_text.count(START), current_text.count(END)
        if starts > previous_text.count(START) and starts > ends:
            self.current_tool_id += 1
            self.current_tool_name_sent = False
            self.streamed_args_for_tool.append("")
            self.prev_tool_call_arr.append({})
            return None
        if starts > ends:
            call = current_text[current_text.rfind(START) + len(START) :]
            if not call.startswith("call:") or "{" not in call[5:]:
                return None
            name, args_text = call[5:].split("{", 1)
            index = self.current_tool_id
            if not self.current_tool_name_sent and name:
                self.current_tool_name_sent = True
                self.prev_tool_call_arr[index] = {"name": name, "arguments": {}}
                return ParsedDelta.new_call(index, name)
            if self.current_tool_name_sent and args_text:
                args = _parse_arguments(args_text)
                if args:
                    delta = self._args_delta(args)
                    if delta is not None:
                        self.prev_tool_call_arr[index]["arguments"] = args
                    return delta
            return None
        if ends > previous_text.count(END):
            index = self.current_tool_id
            if not 0 <= index < len(self.prev_tool_call_arr):
                return None
            args = {}
            matches = _CALL_RE.findall(current_text)
            if index < len(matches) and matches[index][0]:
                args = _parse_arguments(matches[index][1])
                self.prev_tool_call_arr[index]["arguments"] = args
            return self._args_delta(args) if args else None
        return ParsedDelta(content=delta_text) if delta_text else None
