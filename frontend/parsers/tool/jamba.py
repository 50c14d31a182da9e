"""``jamba``: AI21 Jamba's JSON list of calls in ``<tool_calls>`` tags.

::

    text<tool_calls>[{"name": "get_weather", "arguments": {"city": "Paris"}}]</tool_calls>

vLLM's ``JambaToolParser`` as it is: content is the text before the tag
(a single space is none); streaming re-parses the partial list on every
step and sends argument differences of the partial JSON; special tokens are
kept when tools are given.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence

from frontend.parsers.json_partial import intermediate_diff, loads_partial_whole
from frontend.parsers.text_so_far import TextSoFarToolParser
from frontend.parsers.tokenizer import ParserTokenizer
from frontend.parsers.tool.base import is_complete_json
from frontend.parsers.types import (
    DeltaToolCall,
    ExtractedToolCalls,
    ParsedDelta,
    ToolCall,
    make_tool_call_id,
)

START = "<tool_calls>"
END = "</tool_calls>"
_CALLS_RE = re.compile(r"<tool_calls>(.*?)</tool_calls>", re.DOTALL)


class JambaToolParser(TextSoFarToolParser):
    keeps_special_tokens = "with_tools"

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.start_id = self.tokenizer.vocab.get(START)
        self.current_tool_id = -1
        self.current_tool_name_sent = False

    @classmethod
    def check_tokenizer(cls, tokenizer: ParserTokenizer) -> None:
        if START not in tokenizer.vocab or END not in tokenizer.vocab:
            raise ValueError(f"the jamba tool parser needs the {START} and {END} tokens")

    def extract(self, text: str) -> ExtractedToolCalls:
        if START not in text:
            return ExtractedToolCalls(False, [], text)
        try:
            calls = []
            for call in json.loads(_CALLS_RE.findall(text)[0]):
                name = call["name"]
                if not isinstance(name, str):  # vLLM's FunctionCall refuses it
                    raise TypeError("tool name must be a string")
                args = json.dumps(call["arguments"], ensure_ascii=False)
                calls.append(ToolCall(name, args, make_tool_call_id()))
        except Exception:
            return ExtractedToolCalls(False, [], text)
        content = text[: text.find(START)]
        return ExtractedToolCalls(True, calls, content if content and content != " " else None)

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
            return ParsedDelta(content=delta_text)
        if self.start_id in delta_ids and len(delta_ids) == 1:
            return None
        try:
            return self._step(current_text, delta_text)
        except Exception:
            return None

    def _step(self, current_text: str, delta_text: str) -> ParsedDelta | None:
        body = current_text.split(START)[-1].split(END)[0]
        calls: list = loads_partial_whole(body, self.current_tool_name_sent)
        current = calls[self.current_tool_id] if len(calls) > 0 else {}
        if len(calls) == 0:
            return None
        index = self.current_tool_id
        delta: ParsedDelta | None = None
        if len(calls) > index + 1:
            if index >= 0:
                diff = current.get("arguments")
                if diff:
                    diff = json.dumps(diff, ensure_ascii=False).replace(
                        self.streamed_args_for_tool[index], ""
                    )
                    delta = ParsedDelta(tool_calls=[DeltaToolCall(index, arguments=diff)])
                    self.streamed_args_for_tool[index] += diff
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
            prev = self.prev_tool_call_arr[index].get("arguments")
            cur = current.get("arguments")
            new_text = delta_text.replace("'", '"')
            if cur and not prev:
                cur_json = json.dumps(cur, ensure_ascii=False)
                start = cur_json.find(new_text)
                if start != -1:
                    piece = cur_json[: start + len(new_text)]
                elif is_complete_json(body):
                    piece = cur_json
                else:
                    return None
                delta = ParsedDelta(tool_calls=[DeltaToolCall(index, arguments=piece)])
                self.streamed_args_for_tool[index] += piece
            elif cur and prev:
                piece = intermediate_diff(
                    json.dumps(cur, ensure_ascii=False), json.dumps(prev, ensure_ascii=False)
                )
                delta = ParsedDelta(tool_calls=[DeltaToolCall(index, arguments=piece)])
                self.streamed_args_for_tool[index] += piece
        self.prev_tool_call_arr = calls
        return delta
