"""``llama3_json`` (also ``llama4_json``): Llama 3.x/4 JSON tool calls.

::

    <|python_tag|>{"name": "get_weather", "parameters": {"city": "Paris"}}; {...}

The output is a tool call when it starts with ``{`` (or ``<|python_tag|>``,
which is a special token: with vLLM's default ``skip_special_tokens`` it is
not in the text at all).  ``arguments`` or ``parameters`` hold the arguments.
Non-streaming, every top-level JSON object anywhere in the output is a call
and the rest of the text is dropped; one object that is not a call makes the
whole output content.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence

from frontend.parsers.json_partial import common_prefix, loads_partial
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

BOT = "<|python_tag|>"
_DECODER = json.JSONDecoder()


class Llama3JsonToolParser(TextSoFarToolParser):
    structural_tag_model = "llama"
    supports_required_and_named = False

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._current = -1  # index of the call being streamed
        self._name_sent = False

    @classmethod
    def check_tokenizer(cls, tokenizer: ParserTokenizer) -> None:
        if BOT not in tokenizer.vocab:
            raise ValueError(f"the llama3_json tool parser needs the {BOT} token")

    def extract(self, text: str) -> ExtractedToolCalls:
        if BOT not in text and "{" not in text:
            return ExtractedToolCalls(False, [], text)
        calls = []
        end = -1
        for start in (m.start() for m in re.finditer(r"\{", text)):
            if start <= end:  # inside (or right after) the previous object
                continue
            try:
                obj, length = _DECODER.raw_decode(text[start:])
                end = start + length
                name = obj["name"]
                args = obj["arguments"] if "arguments" in obj else obj["parameters"]
                if not isinstance(name, str):
                    raise TypeError("tool name must be a string")
                calls.append(
                    ToolCall(name, json.dumps(args, ensure_ascii=False), make_tool_call_id())
                )
            except Exception:
                return ExtractedToolCalls(False, [], text)
        if calls:
            return ExtractedToolCalls(True, calls, None)
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
        if not (current_text.startswith(BOT) or current_text.startswith("{")):
            return ParsedDelta(content=delta_text)
        try:
            return self._stream_step(current_text)
        except Exception:
            return None

    def _parse_calls(self, text: str) -> tuple[list, list[bool]]:
        """The calls so far (";"-separated objects), partial ones completed."""
        calls: list = []
        complete: list[bool] = []
        # Until its name is out, a call's partial strings are not used.
        allow_str = self._name_sent
        pos = len(BOT) if text.startswith(BOT) else 0
        while pos < len(text):
            obj, length = loads_partial(text[pos:], allow_str)
            complete.append(is_complete_json(text[pos : pos + length]))
            pos += length + len("; ")
            if "parameters" in obj:
                if "arguments" in obj:
                    raise ValueError("model generated both parameters and arguments")
                obj["arguments"] = obj["parameters"]
            calls.append(obj)
        return calls, complete

    def _stream_step(self, text: str) -> ParsedDelta | None:
        calls, complete = self._parse_calls(text)
        if not calls:
            return None
        current = calls[self._current]
        delta = None
        if len(calls) > self._current + 1:
            # A new call started: first send what JSON completion had
            # withheld from the previous one.
            if self._current >= 0:
                args = current.get("arguments")
                if args:
                    piece = json.dumps(args, ensure_ascii=False)[
                        len(self.streamed_args_for_tool[self._current]) :
                    ]
                    delta = ParsedDelta(tool_calls=[DeltaToolCall(self._current, arguments=piece)])
                    self.streamed_args_for_tool[self._current] += piece
            self._current = len(calls) - 1
            self._name_sent = False
            self.streamed_args_for_tool.append("")
            return delta
        if not self._name_sent:
            name = current.get("name")
            if name:
                delta = ParsedDelta.new_call(self._current, name)
                self._name_sent = True
        else:
            args = current.get("arguments")
            if args:
                sent = len(self.streamed_args_for_tool[self._current])
                args_json = json.dumps(args, ensure_ascii=False)
                previous = self.prev_tool_call_arr[self._current].get("arguments")
                final: str | None = None
                if complete[self._current]:
                    final = args_json[sent:]
                elif previous:
                    previous_json = json.dumps(previous, ensure_ascii=False)
                    if args_json != previous_json:
                        # Only what both parses agree on is final.
                        final = common_prefix(previous_json, args_json)[sent:]
                if final is not None:
                    delta = ParsedDelta(tool_calls=[DeltaToolCall(self._current, arguments=final)])
                    self.streamed_args_for_tool[self._current] += final
        self.prev_tool_call_arr = calls
        return delta
