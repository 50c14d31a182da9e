"""``ernie45``: ERNIE 4.5 JSON tool calls in ``<tool_call>`` tags.

::

    text
    <tool_call>
    {"name": "get_weather", "arguments": {"city": "Paris"}}
    </tool_call>

vLLM's ``Ernie45ToolParser`` as it is: content is the text before the
first call (trailing newlines dropped); text after a call is dropped while
streaming; a call streams whole once its end tag arrives; ``<response>``
markup is stripped from streamed content.
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

START = "<tool_call>"
END = "</tool_call>"
RESPONSE_START = "<response>"
RESPONSE_END = "</response>"
_CALL_RE = re.compile(r"<tool_call>\s*(?P<json>\{.*?\})\s*</tool_call>", re.DOTALL)


class Ernie45ToolParser(TextSoFarToolParser):
    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        vocab = self.tokenizer.vocab
        self.current_tool_id = -1
        self.response_start_id = vocab.get(RESPONSE_START)
        self.response_end_id = vocab.get(RESPONSE_END)
        self.newline_id = vocab.get("<0x0A>")
        self.marker_ids = [vocab.get("</think>"), self.response_start_id, self.response_end_id]
        self._buffer = ""

    def extract(self, text: str) -> ExtractedToolCalls:
        if START not in text:
            return ExtractedToolCalls(False, [], text)
        try:
            calls = []
            for body in _CALL_RE.findall(text):
                obj = json.loads(body)
                name = obj.get("name", "")
                if not isinstance(name, str):  # vLLM's FunctionCall refuses it
                    raise TypeError("tool name must be a string")
                args = json.dumps(obj.get("arguments", {}), ensure_ascii=False)
                calls.append(ToolCall(name, args, make_tool_call_id()))
        except Exception:
            return ExtractedToolCalls(False, [], text)
        content = text[: text.find(START)].rstrip("\n")
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
        self._buffer += delta_text
        text = self._buffer
        start = text.find(START)
        if start == -1:
            return ParsedDelta(content=self._content(text, previous_ids, delta_ids) or None)
        end = text.find(END)
        if end == -1:
            self._buffer = text[start:]
            return ParsedDelta(content=text[:start].rstrip("\n") or None)
        if self.current_tool_id == -1:
            self.current_tool_id = 0
            self.prev_tool_call_arr = []
            self.streamed_args_for_tool = []
        while len(self.prev_tool_call_arr) <= self.current_tool_id:
            self.prev_tool_call_arr.append({})
        while len(self.streamed_args_for_tool) <= self.current_tool_id:
            self.streamed_args_for_tool.append("")
        extracted = self.extract(text[: end + len(END)])
        if not extracted.tool_calls:
            return None
        call = extracted.tool_calls[0]
        index = self.current_tool_id
        self.prev_tool_call_arr[index] = {
            "name": call.name,
            "arguments": json.loads(call.arguments),
        }
        self.streamed_args_for_tool[index] = call.arguments
        delta = ParsedDelta(
            content=extracted.content,
            tool_calls=[
                DeltaToolCall(
                    index, id=call.id, type="function", name=call.name, arguments=call.arguments
                )
            ],
        )
        self.current_tool_id += 1
        self._buffer = text[end + len(END) :]
        return delta

    def _content(self, text: str, previous_ids: Sequence[int], delta_ids: Sequence[int]) -> str:
        self._buffer = ""
        if self.current_tool_id > 0:
            text = ""
        if self.current_tool_id == -1 and all(t == self.newline_id for t in previous_ids):
            text = text.strip("\n")
        content = text
        if self.response_start_id in delta_ids:
            content = content.lstrip("\n")
            content = content[content.find(RESPONSE_START) + len(RESPONSE_START) :]
            response_end = content.rfind(RESPONSE_END)
            if response_end != -1:
                content = content[:response_end]
        elif self.response_end_id in delta_ids:
            content = content[: content.rfind(RESPONSE_END)]
        if (
            previous_ids
            and previous_ids[-1] in self.marker_ids
            and delta_ids
            and delta_ids[0] == self.newline_id
        ):
            content = content.lstrip("\n")
        return content
