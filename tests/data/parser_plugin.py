"""A user's parser plugin, as ``--tool-parser-plugin`` / ``--reasoning-parser-plugin``
load it (tests/test_parser_plugins.py): ``CALL name {json}`` tool calls and
``[[plan]]...[[/plan]]`` reasoning."""

from __future__ import annotations

import json
import re

from frontend.parsers.plugins import ReasoningParserManager, ToolParserManager
from frontend.parsers.text_so_far import TextSoFarReasoningParser, TextSoFarToolParser
from frontend.parsers.types import (
    DeltaToolCall,
    ExtractedToolCalls,
    ParsedDelta,
    ToolCall,
    make_tool_call_id,
)

CALL = re.compile(r"CALL (\w+) (\{.*\})", re.DOTALL)
START, END = "[[plan]]", "[[/plan]]"


def held(text, marker):
    """``text`` without a trailing part of ``marker``: it may be the marker's start."""
    for k in range(len(marker) - 1, 0, -1):
        if text.endswith(marker[:k]):
            return text[:-k]
    return text


@ToolParserManager.register_module(["call_line", "call_line_alias"])
class CallLineToolParser(TextSoFarToolParser):
    def extract(self, text):
        m = CALL.search(text)
        if m is None:
            return ExtractedToolCalls(False, [], text)
        return ExtractedToolCalls(True, [ToolCall(m[1], m[2], make_tool_call_id())],
                                  text[: m.start()] or None)

    def extract_streaming(self, previous_text, current_text, delta_text, previous_ids,
                          current_ids, delta_ids):
        if "CALL " not in current_text:
            new = held(current_text, "CALL ")[len(held(previous_text, "CALL ")):]
            return ParsedDelta(content=new) if new else None
        m = CALL.search(current_text)
        if m is None or CALL.search(previous_text):
            return None  # the call is not whole yet, or was sent
        try:
            json.loads(m[2])
        except ValueError:
            return None
        delta = ParsedDelta.new_call(0, m[1])
        delta.tool_calls.append(DeltaToolCall(0, arguments=m[2]))
        return delta


@ReasoningParserManager.register_module("plan_brackets")
class PlanReasoningParser(TextSoFarReasoningParser):
    closed = False

    def extract(self, text):
        reasoning, end, content = text.removeprefix(START).partition(END)
        return reasoning, (content or None) if end else None

    def _visible(self, text):
        """(reasoning, content) so far, a partial end marker held back."""
        if START.startswith(text):
            return "", None
        reasoning, content = self.extract(text)
        return (reasoning if END in text else held(reasoning, END)), content

    def extract_streaming(self, previous_text, current_text, delta_text, previous_ids,
                          current_ids, delta_ids):
        reasoning, content = self._visible(current_text)
        was_reasoning, was_content = self._visible(previous_text)
        self.closed = END in current_text
        delta = ParsedDelta()
        if len(reasoning) > len(was_reasoning):
            delta.reasoning = reasoning[len(was_reasoning):]
        if content and len(content) > len(was_content or ""):
            delta.content = content[len(was_content or ""):]
        return delta if delta.to_dict() else None

    def is_reasoning_end(self, token_ids):
        return False  # no prompt ends the reasoning

    def is_reasoning_end_streaming(self, token_ids, delta_ids):
        return self.closed

    def extract_content_ids(self, token_ids):
        return list(token_ids) if self.closed else []
