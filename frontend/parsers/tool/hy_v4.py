"""``hy_v4``: Hunyuan V4's tool calls.

::

    text<tool_calls><tool_call>get_weather<arg_key>city</arg_key>
    <arg_value>Paris</arg_value></tool_call></tool_calls>

vLLM's ``HYV4ToolParser`` (its strict extractor) as it is.  The markers
carry the checkpoint's suffix, read from the vocabulary
(``<tool_calls:6124c78e>``); ``<tool_calls>`` and ``</tool_calls>`` must be
tokens.  Values are typed by the tool schema
(:mod:`frontend.parsers.tool.hy_values`).

Whole: one ``<tool_calls>...</tool_calls>`` block of well-formed calls (tags
paired, nothing but pairs after the name, a name in each), else the whole
output is content; the text before the block is content.

Streaming, for tool_choice "auto", starts once the ``<tool_calls>`` token is
among the output's ids; for "required"/named (constrained by the structural
tag, whose markers may come in pieces) once ``<tool_calls>`` shows in the
text, holding back a partial marker meanwhile.  The name goes out at the
first ``<arg_key>`` (or ``</tool_call>``), then the arguments as a JSON
object of the closed pairs (a string-only value streams as it grows), its
``}`` at ``</tool_call>``; further calls already complete in the same delta
follow in it.

Its structural tag (``hy_v4``) constrains only "required"/named calls.
vLLM also reads markers in the text under the tag it ORs with the request's
own constraint ("auto", strict tools) or under a request's own structural
tag; this port reads them as tokens there.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import ClassVar

from frontend.parsers.reasoning.hy_v4 import token_suffix
from frontend.parsers.tokenizer import ParserTokenizer
from frontend.parsers.tool.base import partial_tag_overlap
from frontend.parsers.tool.hy_values import HyArgumentsParser, parse_value
from frontend.parsers.types import (
    DeltaToolCall,
    ExtractedToolCalls,
    ParsedDelta,
    ToolCall,
    make_tool_call_id,
    named_tool,
)


class HYV4ToolParser(HyArgumentsParser):
    structural_tag_model: ClassVar[str | None] = "hy_v4"
    supports_required_and_named: ClassVar[bool] = False
    # vLLM's get_structural_tag returns None for "auto".
    structural_tag_for_auto: ClassVar[bool] = False

    @classmethod
    def structural_tag_suffix(cls, tokenizer: ParserTokenizer) -> str:
        return token_suffix(tokenizer)

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        suffix = token_suffix(self.tokenizer)
        self.calls_start = f"<tool_calls{suffix}>"
        self.calls_end = f"</tool_calls{suffix}>"
        self.call_start = f"<tool_call{suffix}>"
        self.call_end = f"</tool_call{suffix}>"
        self.key_start, self.key_end = f"<arg_key{suffix}>", f"</arg_key{suffix}>"
        self.value_start, self.value_end = f"<arg_value{suffix}>", f"</arg_value{suffix}>"
        self.call_re = re.compile(
            rf"{re.escape(self.call_start)}(.*?){re.escape(self.call_end)}", re.S
        )
        self.args_re = re.compile(
            rf"{re.escape(self.key_start)}(.*?){re.escape(self.key_end)}"
            rf"{re.escape(self.value_start)}(.*?){re.escape(self.value_end)}",
            re.S,
        )
        self.calls_start_id = self.tokenizer.vocab[self.calls_start]
        # vLLM reads the markers from the text when a structural tag
        # constrains the request: "required"/named with tools.
        self.guided = bool(self.tools) and (
            self.tool_choice == "required" or named_tool(self.tool_choice) is not None
        )
        self.current_tool_id = -1
        self._buffer = ""
        self._reset_call()

    @classmethod
    def check_tokenizer(cls, tokenizer: ParserTokenizer) -> None:
        suffix = token_suffix(tokenizer)
        for token in (f"<tool_calls{suffix}>", f"</tool_calls{suffix}>"):
            if token not in tokenizer.vocab:
                raise ValueError(f"the hy_v4 tool parser needs the {token} token")

    # -- whole -------------------------------------------------------------------

    def _strict_calls(self, text: str) -> list[ToolCall]:
        """The block's calls; ValueError for anything malformed."""
        start, end = text.find(self.calls_start), text.find(self.calls_end)
        if start == -1 or end == -1 or end < start:
            raise ValueError("malformed tool block wrapper")
        block = text[start + len(self.calls_start) : end]
        opened = block.count(self.call_start)
        if opened != block.count(self.call_end):
            raise ValueError("malformed tool_call wrapper count")
        bodies = self.call_re.findall(block)
        if opened != len(bodies):
            raise ValueError("malformed tool_call body")
        calls = []
        for body in bodies:
            arg_start = body.find(self.key_start)
            if arg_start == -1:
                name, args = body.strip(), ""
            else:
                name, args = body[:arg_start].strip(), body[arg_start:].strip()
            if not name:
                raise ValueError("empty function name")
            if args.count(self.key_start) != args.count(self.key_end) or args.count(
                self.value_start
            ) != args.count(self.value_end):
                raise ValueError("malformed argument tag count")
            if self.args_re.sub("", args).strip():
                raise ValueError("unparsed argument payload")
            arguments = {
                key: parse_value(value, self.tools, name, key)
                for key, value in self.args_re.findall(args)
            }
            calls.append(ToolCall(name, json.dumps(arguments, ensure_ascii=False)))
        if not calls:
            raise ValueError("no tool calls")
        return calls

    def extract(self, text: str) -> ExtractedToolCalls:
        if self.calls_start not in text:
            return ExtractedToolCalls(False, [], text)
        try:
            calls = self._strict_calls(text)
        except Exception:
            return ExtractedToolCalls(False, [], text)  # vLLM: raw content
        content = text[: text.find(self.calls_start)]
        return ExtractedToolCalls(True, calls, content or None)

    # -- streamed ----------------------------------------------------------------

    def _take_payload(
        self, previous_text: str, current_text: str, delta_text: str, current_ids: Sequence[int]
    ) -> tuple[bool, str | None]:
        """Buffer what follows ``<tool_calls>``: (seen, content before it)."""
        if self.guided:
            pos = current_text.find(self.calls_start)
            if pos == -1:
                safe_end = len(current_text) - partial_tag_overlap(current_text, self.calls_start)
                return False, current_text[len(previous_text) : safe_end] or None
            payload_start = pos + len(self.calls_start)
            sent_payload = max(len(previous_text) - payload_start, 0)
            self._buffer += current_text[payload_start + sent_payload :]
            return True, current_text[len(previous_text) : pos] or None
        if self.calls_start_id not in current_ids:
            return False, delta_text
        if self.calls_start in delta_text:
            parts = delta_text.split(self.calls_start)
            self._buffer += parts[-1]
            return True, parts[0] or None
        self._buffer += delta_text
        return True, None

    def extract_streaming(
        self,
        previous_text: str,
        current_text: str,
        delta_text: str,
        previous_ids: Sequence[int],
        current_ids: Sequence[int],
        delta_ids: Sequence[int],
    ) -> ParsedDelta | None:
        seen, content = self._take_payload(previous_text, current_text, delta_text, current_ids)
        if not seen:
            return None if content is None else ParsedDelta(content=content)
        if self.call_end + self.calls_end in current_text and self.call_end not in self._buffer:
            self._buffer += self.call_end + self.calls_end
        pieces: list[DeltaToolCall] = []
        while True:
            text = self._buffer
            start = text.find(self.call_start)
            if start == -1 and self._name is None:
                keep = partial_tag_overlap(text, self.call_start)
                self._buffer = text[len(text) - keep :] if keep else ""
                break
            new_name: str | None = None
            if self._name is None:
                arg_at = text.find(self.key_start, start)
                end_at = text.find(self.call_end, start)
                if arg_at == -1 and end_at == -1:
                    self._buffer = text[start:]
                    break
                name_end = arg_at if arg_at != -1 else end_at
                new_name = self._name = text[start + len(self.call_start) : name_end].strip()
                self._buffer = text[name_end:]
                self.current_tool_id += 1
                if self.call_end not in self._buffer:
                    pieces.append(self._new_piece(new_name, None))
                    break
            piece = self._stream_arguments(new_name)
            if piece is not None:
                pieces.append(piece)
            # On only after this call closed, with the next one right behind it.
            if self._name is None and self._buffer.startswith(self.call_start):
                continue
            break
        if content is None and not pieces:
            return None
        delta = ParsedDelta(tool_calls=pieces)
        if content is not None:
            delta.content = content
        return delta

    def _new_piece(self, name: str, arguments: str | None) -> DeltaToolCall:
        piece = DeltaToolCall(
            self.current_tool_id, id=make_tool_call_id(), type="function", name=name
        )
        if arguments is not None:
            piece.arguments = arguments
        return piece

    def _open_value(self, raw: str) -> str:
        # Less a partial </arg_value>.
        value = raw[: len(raw) - partial_tag_overlap(raw, self.value_end)]
        return json.dumps(value, ensure_ascii=False)[1:-1]

    def _stream_arguments(self, new_name: str | None) -> DeltaToolCall | None:
        diff, _ = self._arguments_diff()
        if new_name is not None:
            return self._new_piece(new_name, diff or None)
        if diff:
            return DeltaToolCall(self.current_tool_id, arguments=diff)
        return None
