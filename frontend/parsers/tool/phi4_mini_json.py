"""``phi4_mini_json``: Phi-4-mini's ``functools[...]`` JSON tool calls.

::

    functools[{"name": "get_weather", "arguments": {"city": "Paris"}}]

vLLM's ``Phi4MiniJsonToolParser``: the first ``functools[...]`` (up to the
first ``]``) is a JSON list of calls (``arguments`` or ``parameters``); the
content is dropped when it is there, and a list that is not JSON gives no
calls but still no content.  Nothing is streamed.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence

from frontend.parsers.text_so_far import TextSoFarToolParser
from frontend.parsers.types import ExtractedToolCalls, ParsedDelta, ToolCall, make_tool_call_id

_CALLS_RE = re.compile(r"functools\[(.*?)\]", re.DOTALL)


class Phi4MiniJsonToolParser(TextSoFarToolParser):
    def extract(self, text: str) -> ExtractedToolCalls:
        m = _CALLS_RE.search(text)
        if not m:
            return ExtractedToolCalls(False, [], text)
        try:
            calls: list = []
            try:
                calls = json.loads("[" + m.group(1) + "]")
            except ValueError:
                pass
            tool_calls = []
            for call in calls:
                name = call["name"]
                if not isinstance(name, str):  # vLLM's FunctionCall refuses it
                    raise TypeError(name)
                args = call["arguments"] if "arguments" in call else call["parameters"]
                tool_calls.append(
                    ToolCall(name, json.dumps(args, ensure_ascii=False), make_tool_call_id())
                )
        except Exception:
            return ExtractedToolCalls(False, [], text)
        return ExtractedToolCalls(True, tool_calls, None)

    def extract_streaming(
        self,
        previous_text: str,
        current_text: str,
        delta_text: str,
        previous_ids: Sequence[int],
        current_ids: Sequence[int],
        delta_ids: Sequence[int],
    ) -> ParsedDelta | None:
        return None
