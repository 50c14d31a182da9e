"""``deepseek_v3``: DeepSeek-V3 / R1 tool calls (and ``deepseek_v31``'s shared code).

::

    text<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>NAME
    ```json
    {"city": "Paris"}
    ```<｜tool▁call▁end｜><｜tool▁calls▁end｜>

vLLM's ``DeepSeekV3ToolParser`` as it is, quirks included: content is the
text before ``<｜tool▁calls▁begin｜>``; arguments are the text between the
fences, not parsed; streaming keys on the marker tokens' ids and streams the
arguments as written (the last piece waits for ``"}``).
:mod:`frontend.parsers.tool.deepseek_v31` changes only the regexes.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import ClassVar

from frontend.parsers.text_so_far import TextSoFarToolParser
from frontend.parsers.tokenizer import ParserTokenizer
from frontend.parsers.types import (
    DeltaToolCall,
    ExtractedToolCalls,
    ParsedDelta,
    ToolCall,
    make_tool_call_id,
)

CALLS_START = "<｜tool▁calls▁begin｜>"
CALLS_END = "<｜tool▁calls▁end｜>"
CALL_START = "<｜tool▁call▁begin｜>"
CALL_END = "<｜tool▁call▁end｜>"


class DeepSeekV3ToolParser(TextSoFarToolParser):
    structural_tag_model: ClassVar[str | None] = "deepseek_r1"
    supports_required_and_named: ClassVar[bool] = False
    label: ClassVar[str] = "DeepSeek-V3 Tool parser could not locate tool call start/end tokens"
    # (type, name, arguments) of each complete call.
    call_re: ClassVar[re.Pattern[str]] = re.compile(
        r"<｜tool▁call▁begin｜>(?P<type>.*)<｜tool▁sep｜>(?P<function_name>.*)\n```json\n"
        r"(?P<function_arguments>.*)\n```<｜tool▁call▁end｜>"
    )
    portion_re: ClassVar[re.Pattern[str]] = re.compile(
        r"(?P<type>.*)<｜tool▁sep｜>(?P<function_name>.*)\n```json\n"
        r"(?P<function_arguments>.*[^\n`])"
    )
    name_re: ClassVar[re.Pattern[str]] = re.compile(
        r"(?P<type>.*)<｜tool▁sep｜>(?P<function_name>.*)\n"
    )

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        vocab = self.tokenizer.vocab
        self.calls_start_id = vocab.get(CALLS_START)
        self.call_start_id = vocab.get(CALL_START)
        self.call_end_id = vocab.get(CALL_END)
        self.current_tool_id = -1
        self.current_tool_name_sent = False

    @classmethod
    def check_tokenizer(cls, tokenizer: ParserTokenizer) -> None:
        if CALLS_START not in tokenizer.vocab or CALLS_END not in tokenizer.vocab:
            raise ValueError(f"{cls.label} in the tokenizer: the parser needs them")

    def _call(self, match: tuple[str, ...]) -> ToolCall:
        kind, name, arguments = match
        if kind != "function":  # vLLM's ToolCall refuses another type
            raise ValueError(kind)
        return ToolCall(name, arguments, make_tool_call_id())

    def _portion(self, portion: str) -> dict | None:
        m = self.portion_re.match(portion)
        if m:
            return {"name": m.group("function_name"), "arguments": m.group("function_arguments")}
        m = self.name_re.match(portion)
        if m:
            return {"name": m.group("function_name"), "arguments": ""}
        return None

    def extract(self, text: str) -> ExtractedToolCalls:
        if CALLS_START not in text:
            return ExtractedToolCalls(False, [], text)
        try:
            calls = [self._call(m) for m in self.call_re.findall(text)]
        except ValueError:
            return ExtractedToolCalls(False, [], text)
        content = text[: text.find(CALLS_START)]
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
        if self.calls_start_id not in current_ids:
            return ParsedDelta(content=delta_text)
        delta_text = delta_text.replace(CALLS_START, "").replace(CALLS_END, "")
        try:
            return self._step(current_text, delta_text, previous_ids, current_ids, delta_ids)
        except Exception:
            return None

    def _step(
        self,
        current_text: str,
        delta_text: str,
        previous_ids: Sequence[int],
        current_ids: Sequence[int],
        delta_ids: Sequence[int],
    ) -> ParsedDelta | None:
        prev_starts = _count(previous_ids, self.call_start_id)
        prev_ends = _count(previous_ids, self.call_end_id)
        cur_starts = _count(current_ids, self.call_start_id)
        cur_ends = _count(current_ids, self.call_end_id)
        portion: str | None = None
        text_portion: str | None = None

        if cur_starts == cur_ends and prev_ends == cur_ends and CALL_END not in delta_text:
            return ParsedDelta(content=delta_text)

        if CALL_END in delta_text:
            full_text = current_text + delta_text
            portion = full_text.split(CALL_START)[-1].split(CALL_END)[0].rstrip()
            delta_text = delta_text.split(CALL_END)[0].rstrip()
            text_portion = delta_text.split(CALL_END)[-1].lstrip()

        if cur_starts > cur_ends and cur_starts > prev_starts:
            portion = current_text.split(CALL_START)[-1] if len(delta_ids) > 1 else None
            text_portion = None
            self.current_tool_id += 1
            self.current_tool_name_sent = False
            self.streamed_args_for_tool.append("")
        elif cur_starts > cur_ends and cur_starts == prev_starts:
            portion = current_text.split(CALL_START)[-1]
            text_portion = None
        elif cur_starts == cur_ends and cur_ends >= prev_ends:
            if not self.prev_tool_call_arr:
                return None
            if self.prev_tool_call_arr[self.current_tool_id].get("arguments"):
                if '"}' not in delta_text:
                    return None
                diff = delta_text[: delta_text.rindex('"}')] + '"}'
                self.streamed_args_for_tool[self.current_tool_id] += diff
                return _arguments(self.current_tool_id, diff)
        else:
            text = delta_text.replace(CALL_START, "").replace(CALL_END, "")
            return ParsedDelta(content=text)

        current_call: dict = {}
        if portion:
            found = self._portion(portion)
            if found is None:
                return None
            current_call = found

        if not self.current_tool_name_sent:
            name = current_call.get("name")
            if not name:
                return None
            self.current_tool_name_sent = True
            return ParsedDelta.new_call(self.current_tool_id, name)

        if portion is None:
            return ParsedDelta(content=delta_text) if text_portion is not None else None

        if len(self.prev_tool_call_arr) <= self.current_tool_id:
            self.prev_tool_call_arr.append({})
        prev_args = self.prev_tool_call_arr[self.current_tool_id].get("arguments")
        cur_args = current_call.get("arguments")
        delta: ParsedDelta | None = None
        if cur_args and not prev_args:
            delta = _arguments(self.current_tool_id, cur_args)
            self.streamed_args_for_tool[self.current_tool_id] = cur_args
        elif cur_args and prev_args:
            if (
                cur_args != prev_args
                and len(cur_args) > len(prev_args)
                and cur_args.startswith(prev_args)
            ):
                piece = cur_args[len(prev_args) :]
                delta = _arguments(self.current_tool_id, piece)
                self.streamed_args_for_tool[self.current_tool_id] = cur_args

        if self.current_tool_id == len(self.prev_tool_call_arr) - 1:
            self.prev_tool_call_arr[self.current_tool_id] = current_call
        else:
            self.prev_tool_call_arr.append(current_call)
        return delta


def _count(ids: Sequence[int], token_id: int | None) -> int:
    return ids.count(token_id) if token_id is not None else 0


def _arguments(index: int, piece: str) -> ParsedDelta:
    return ParsedDelta(tool_calls=[DeltaToolCall(index, arguments=piece)])
