"""``hy_v3``: Hunyuan V3's tool calls.

::

    text<tool_calls><tool_call>get_weather<tool_sep>
    <arg_key>city</arg_key><arg_value>Paris</arg_value></tool_call></tool_calls>

vLLM's ``HYV3ToolParser`` as it is.  The markers carry the tokenizer
config's ``token_suffix`` (``<tool_calls:hy>``); ``<tool_calls>`` and
``</tool_calls>`` must be tokens.  Values are typed by the tool schema
(:mod:`frontend.parsers.tool.hy_values`).  Whole: every call (a last one
without ``</tool_call>`` too); the text before ``<tool_calls>`` is content.
Streaming starts once the ``<tool_calls>`` token is among the output's ids:
the name at ``<tool_sep>``, then the arguments as a JSON object built from
the closed pairs (a string-only value streams as it grows), its ``}`` at
``</tool_call>``; calls complete in the buffer after that go out whole in
the same delta.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence

from frontend.parsers.tokenizer import ParserTokenizer
from frontend.parsers.tool.hy_values import HyArgumentsParser, parse_value
from frontend.parsers.types import (
    DeltaToolCall,
    ExtractedToolCalls,
    ParsedDelta,
    ToolCall,
    make_tool_call_id,
)


def _suffix(tokenizer: ParserTokenizer) -> str:
    return tokenizer.init_kwargs.get("token_suffix") or ""


class HYV3ToolParser(HyArgumentsParser):
    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        suffix = _suffix(self.tokenizer)
        self.calls_start = f"<tool_calls{suffix}>"
        self.calls_end = f"</tool_calls{suffix}>"
        self.call_start = f"<tool_call{suffix}>"
        self.call_end = f"</tool_call{suffix}>"
        self.sep = f"<tool_sep{suffix}>"
        self.key_start, self.key_end = f"<arg_key{suffix}>", f"</arg_key{suffix}>"
        self.value_start, self.value_end = f"<arg_value{suffix}>", f"</arg_value{suffix}>"
        # vLLM interpolates the markers unescaped: they are patterns.
        self.call_re = re.compile(rf"{self.call_start}(.*?){self.sep}(.*?){self.call_end}", re.S)
        self.call_portion_re = re.compile(rf"{self.call_start}(.*?){self.sep}(.*)", re.S)
        self.args_re = re.compile(
            rf"{self.key_start}(.*?){self.key_end}\s*{self.value_start}(.*?){self.value_end}",
            re.S,
        )
        self.calls_start_id = self.tokenizer.vocab[self.calls_start]
        self.current_tool_id = -1
        self._buffer = ""
        self._reset_call()

    @classmethod
    def check_tokenizer(cls, tokenizer: ParserTokenizer) -> None:
        suffix = _suffix(tokenizer)
        for token in (f"<tool_calls{suffix}>", f"</tool_calls{suffix}>"):
            if token not in tokenizer.vocab:
                raise ValueError(f"the hy_v3 tool parser needs the {token} token")

    # -- whole -------------------------------------------------------------------

    def _calls(self, text: str) -> list[ToolCall]:
        try:
            found = self.call_re.findall(text)
            if found:
                remaining = text.split(self.call_end)[-1]
                found += self.call_portion_re.findall(remaining)
            else:
                found = self.call_portion_re.findall(text)
            calls = []
            for name, args in found:
                name = name.strip()
                arguments = {
                    key: parse_value(value, self.tools, name, key)
                    for key, value in self.args_re.findall(args.strip())
                }
                calls.append(ToolCall(name, json.dumps(arguments, ensure_ascii=False)))
            return calls
        except Exception:
            return []  # vLLM logs it and finds no call

    def extract(self, text: str) -> ExtractedToolCalls:
        if self.calls_start not in text:
            return ExtractedToolCalls(False, [], text)
        calls = self._calls(text)
        content = text[: text.find(self.calls_start)]
        return ExtractedToolCalls(True, calls, content or None)

    # -- streamed ----------------------------------------------------------------

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
        content: str | None = None
        if self.calls_start in delta_text:
            parts = delta_text.split(self.calls_start)
            self._buffer += parts[-1]
            content = parts[0] or None
        else:
            self._buffer += delta_text
        if self.call_end + self.calls_end in current_text and self.call_end not in self._buffer:
            self._buffer += self.call_end + self.calls_end
        text = self._buffer
        start = text.find(self.call_start)
        if start == -1 and self._name is None:
            if content is not None:
                return ParsedDelta(content=content)
            self._buffer = ""
            return None
        name_delta: ParsedDelta | None = None
        if self._name is None:
            sep = text.find(self.sep)
            if sep == -1:
                self._buffer = text[start:]
                return None if content is None else ParsedDelta(content=content)
            self._name = text[start + len(self.call_start) : sep].strip()
            self._buffer = text[sep + len(self.sep) :]
            self.current_tool_id += 1
            name_delta = ParsedDelta.new_call(self.current_tool_id, self._name)
            name_delta.content = content  # None included, as vLLM sets it
            if self.call_end not in self._buffer:
                return name_delta
        return self._stream_arguments(name_delta)

    def _open_value(self, raw: str) -> str:
        # vLLM's hy_v3 escapes these five only (hy_v4 the whole of JSON's set).
        return (
            raw.replace("\\", "\\\\")
            .replace('"', '\\"')
            .replace("\n", "\\n")
            .replace("\r", "\\r")
            .replace("\t", "\\t")
        )

    def _stream_arguments(self, name_delta: ParsedDelta | None) -> ParsedDelta | None:
        diff, complete = self._arguments_diff()
        delta: ParsedDelta | None
        if name_delta is not None:
            delta = name_delta
            if diff:
                delta.tool_calls[0].arguments = diff
        elif diff:
            delta = ParsedDelta(tool_calls=[DeltaToolCall(self.current_tool_id, arguments=diff)])
        else:
            delta = None
        extra = self._drain_calls() if complete else []
        if extra:
            if delta is None:
                return ParsedDelta(tool_calls=extra)
            delta.tool_calls.extend(extra)
        return delta

    def _drain_calls(self) -> list[DeltaToolCall]:
        """Calls already complete in the buffer, each whole."""
        pieces: list[DeltaToolCall] = []
        while (start := self._buffer.find(self.call_start)) != -1:
            end = self._buffer.find(self.call_end, start)
            if end == -1:
                break
            end += len(self.call_end)
            block, self._buffer = self._buffer[start:end], self._buffer[end:]
            for call in self._calls(block):
                self.current_tool_id += 1
                self.prev_tool_call_arr.append(
                    {"name": call.name, "arguments": json.loads(call.arguments)}
                )
                self.streamed_args_for_tool.append(call.arguments)
                pieces.append(
                    DeltaToolCall(
                        self.current_tool_id,
                        id=make_tool_call_id(),
                        type="function",
                        name=call.name,
                        arguments=call.arguments,
                    )
                )
        return pieces
