"""``poolside_v1``: Poolside's (Laguna) GLM-4 style XML calls.

::

    text<tool_call>get_weather
    <arg_key>city</arg_key><arg_value>Paris</arg_value>
    </tool_call>

vLLM's ``PoolsideV1ToolParser`` as it is.  A value is kept verbatim where the
tool schema types its key ``string``; else it is stripped and read as JSON,
then as a Python literal, else kept as text.  Whole: content is the text
before the first ``<tool_call>`` (None when blank); a value that cannot be
written as JSON (a Python set, say) makes the whole output content.

Streaming works on a buffer of what is not yet consumed: text outside calls
is content (a tail that may begin ``<tool_call>`` held back); a call's name
goes out (with ``"arguments": ""``) at the first newline, ``<arg_key>`` or
``</tool_call>``; a string value streams as it arrives (JSON-escaped, a tail
that may begin ``</arg_value>`` held back), other values whole at their end
tag; a repeated key is dropped; ``</tool_call>`` closes the object.  All
that one step yields is one delta: ``content`` (None when there is none)
and one piece per call.  ``<tool_call></tool_call>`` is skipped.  No
``tool_choice`` "required"/named grammar: they keep special tokens and are
parsed as "auto".
"""

from __future__ import annotations

import ast
import json
import re
import warnings
from collections.abc import Sequence
from typing import Any

from frontend.parsers import json_partial
from frontend.parsers.text_so_far import TextSoFarToolParser
from frontend.parsers.types import (
    DeltaToolCall,
    ExtractedToolCalls,
    ParsedDelta,
    ToolCall,
    make_tool_call_id,
    tool_function,
)

START, END = "<tool_call>", "</tool_call>"
KEY_START, KEY_END = "<arg_key>", "</arg_key>"
VALUE_START, VALUE_END = "<arg_value>", "</arg_value>"
_CALL_RE = re.compile(r"<tool_call>.*?</tool_call>", re.DOTALL)
_DETAIL_RE = re.compile(r"<tool_call>\s*([^\n<]+?)\s*\n?\s*(<arg_key>.*?)?</tool_call>", re.DOTALL)
_ARG_RE = re.compile(r"<arg_key>(.*?)</arg_key>\s*<arg_value>(.*?)</arg_value>", re.DOTALL)


def _deserialize(value: str) -> Any:
    """JSON, else a Python literal, else the text (other errors propagate, as vLLM's)."""
    try:
        return json.loads(value)
    except ValueError:
        pass
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", SyntaxWarning)
            return ast.literal_eval(value)
    except (ValueError, SyntaxError):
        return value


def _escape(text: str) -> str:
    """``text`` as the inside of a JSON string."""
    return json.dumps(text, ensure_ascii=False)[1:-1]


def _held(text: str, tag: str) -> int:
    """vLLM's hold-back: the shortest proper prefix of ``tag`` that ends ``text``."""
    for i in range(1, len(tag)):
        if text.endswith(tag[:i]):
            return i
    return 0


def _completed(prefix: str) -> Any:
    """The streamed arguments so far, closed as partial_json_parser closes them."""
    try:
        head, tail = json_partial.complete(prefix, True)
        return json.loads(head + tail)
    except Exception:
        return None


class _Call:
    """One streamed call's state."""

    __slots__ = ("id", "started", "closed", "keys")

    def __init__(self) -> None:
        self.id = make_tool_call_id()
        self.started = False
        self.closed = False
        self.keys: set[str] = set()


class PoolsideV1ToolParser(TextSoFarToolParser):
    supports_required_and_named = False
    keeps_special_tokens = "with_tools"

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.current_tool_id = -1
        self.current_tool_name_sent = False
        self.buffer = ""
        self.calls: list[_Call] = []
        self.in_call = False
        self.name: str | None = None
        self.pending_key: str | None = None
        self.in_string = False

    def _is_string(self, tool_name: str, key: str) -> bool:
        for tool in self.tools:
            function = tool_function(tool) or tool
            if function.get("name") != tool_name:
                continue
            params = function.get("parameters")
            if params is None:
                return False
            return params.get("properties", {}).get(key, {}).get("type", None) == "string"
        return False

    def extract(self, text: str) -> ExtractedToolCalls:
        calls = []
        try:
            for block in _CALL_RE.findall(text):
                detail = _DETAIL_RE.search(block)
                if not detail:
                    continue
                name = detail.group(1).strip()
                pairs = _ARG_RE.findall(detail.group(2)) if detail.group(2) else []
                args: dict[str, Any] = {}
                for key, value in pairs:
                    key = key.strip()
                    # String values verbatim: whitespace matters (code, files).
                    args[key] = value if self._is_string(name, key) else _deserialize(value.strip())
                calls.append(ToolCall(name, json.dumps(args, ensure_ascii=False)))
        except Exception:
            return ExtractedToolCalls(False, [], text)
        if not calls:
            return ExtractedToolCalls(False, [], text)
        content = text[: text.find(START)]
        return ExtractedToolCalls(True, calls, content if content.strip() else None)

    # -- streaming -------------------------------------------------------------

    def extract_streaming(
        self,
        previous_text: str,
        current_text: str,
        delta_text: str,
        previous_ids: Sequence[int],
        current_ids: Sequence[int],
        delta_ids: Sequence[int],
    ) -> ParsedDelta | None:
        if not self.tools or self.tool_choice == "none":
            return ParsedDelta(content=delta_text) if delta_text else None
        self.buffer += delta_text
        pieces: dict[int, DeltaToolCall] = {}
        content: str | None = None
        while True:
            if not self.in_call:
                start = self.buffer.find(START)
                if start == -1:
                    keep = _held(self.buffer, START)
                    out = self.buffer[: len(self.buffer) - keep]
                    self.buffer = self.buffer[len(self.buffer) - keep :]
                    if out:
                        content = (content or "") + out
                    break
                if start > 0:
                    content = (content or "") + self.buffer[:start]
                self.buffer = self.buffer[start + len(START) :]
                self._begin_call()
                continue
            if not self.current_tool_name_sent:
                if not self._read_name(pieces):
                    break
                continue
            if self.in_string:
                if not self._read_string(pieces):
                    break
                continue
            if self.pending_key is not None:
                if not self._read_value(pieces):
                    break
                continue
            if not self._read_key_or_end(pieces):
                break
        if content is None and not pieces:
            return None
        return ParsedDelta(content=content, tool_calls=list(pieces.values()))

    def _read_name(self, pieces: dict[int, DeltaToolCall]) -> bool:
        found = [
            i
            for i in (self.buffer.find("\n"), self.buffer.find(KEY_START), self.buffer.find(END))
            if i != -1
        ]
        if not found:
            return False
        cut = min(found)
        name = self.buffer[:cut].strip()
        if name == "" and self.buffer.find(END) == cut:
            # <tool_call></tool_call>: no call at all.
            self.buffer = self.buffer[cut + len(END) :]
            self._end_call()
            self._drop_call()
            return True
        self.buffer = self.buffer[cut + 1 :] if self.buffer[cut] == "\n" else self.buffer[cut:]
        self.name = name
        self.current_tool_name_sent = True
        index = self.current_tool_id
        self.prev_tool_call_arr[index] = {"name": name, "arguments": {}}
        piece = self._piece(pieces)
        piece.id, piece.type, piece.name = self.calls[index].id, "function", name
        if not piece.arguments:
            piece.arguments = ""
        return True

    def _read_string(self, pieces: dict[int, DeltaToolCall]) -> bool:
        end = self.buffer.find(VALUE_END)
        if end != -1:
            raw = self.buffer[:end]
            self.buffer = self.buffer[end + len(VALUE_END) :]
            self.in_string = False
            self.pending_key = None
            self._send_args(pieces, _escape(raw) + '"')
            return True
        safe = len(self.buffer) - _held(self.buffer, VALUE_END)
        if safe > 0:
            escaped = _escape(self.buffer[:safe])
            self.buffer = self.buffer[safe:]
            if escaped:
                self._send_args(pieces, escaped)
        return False

    def _read_value(self, pieces: dict[int, DeltaToolCall]) -> bool:
        at = self.buffer.find(VALUE_START)
        if at == -1:
            return False
        self.buffer = self.buffer[at:]
        key = (self.pending_key or "").strip()
        call = self.calls[self.current_tool_id]
        assert self.name is not None
        if self._is_string(self.name, key):
            self.buffer = self.buffer[len(VALUE_START) :]
            if key in call.keys:
                self.pending_key = None  # a repeated key: its value is skipped
                return True
            call.keys.add(key)
            self.in_string = True
            self._send_args(pieces, self._key_piece(call, key) + '"')
            return True
        end = self.buffer.find(VALUE_END)
        if end == -1:
            return False
        raw = self.buffer[len(VALUE_START) : end].strip()
        self.buffer = self.buffer[end + len(VALUE_END) :]
        self.pending_key = None
        if key and key not in call.keys:
            # Only non-string values get here: always deserialized.
            value = json.dumps(_deserialize(raw), ensure_ascii=False)
            call.keys.add(key)
            self._send_args(pieces, self._key_piece(call, key) + value)
        return True

    def _read_key_or_end(self, pieces: dict[int, DeltaToolCall]) -> bool:
        end = self.buffer.find(END)
        key_at = self.buffer.find(KEY_START)
        if end != -1 and (key_at == -1 or end < key_at):
            self.buffer = self.buffer[end + len(END) :]
            index = self.current_tool_id
            call = self.calls[index]
            piece = None
            if not call.closed:
                call.closed = True
                piece = "}" if call.started else "{}"
                if call.started:
                    self.streamed_args_for_tool[index] += piece
                else:
                    self.streamed_args_for_tool[index] = piece
            if self.name:
                try:
                    args = json.loads(self.streamed_args_for_tool[index])
                    self.prev_tool_call_arr[index] = {"name": self.name, "arguments": args}
                except ValueError:
                    pass
            self._end_call()
            if piece:
                self._update_args(pieces, piece)
            return True
        if key_at == -1:
            return False
        self.buffer = self.buffer[key_at:]
        key_end = self.buffer.find(KEY_END)
        if key_end == -1:
            return False
        self.pending_key = self.buffer[len(KEY_START) : key_end]
        self.buffer = self.buffer[key_end + len(KEY_END) :]
        return True

    # -- per-call state ------------------------------------------------------------

    def _begin_call(self) -> None:
        self.current_tool_id += 1
        self.calls.append(_Call())
        self.streamed_args_for_tool.append("")
        self.prev_tool_call_arr.append({})
        self.current_tool_name_sent = False
        self._end_call()
        self.in_call = True

    def _end_call(self) -> None:
        self.in_call = False
        self.name = None
        self.pending_key = None
        self.in_string = False

    def _drop_call(self) -> None:
        self.calls.pop()
        self.streamed_args_for_tool.pop()
        self.prev_tool_call_arr.pop()
        self.current_tool_id -= 1

    def _key_piece(self, call: _Call, key: str) -> str:
        """The text that opens ``key``: ``{"key": `` first, ``, "key": `` after."""
        opener = ", " if call.started else "{"
        call.started = True
        return opener + json.dumps(key, ensure_ascii=False) + ": "

    def _piece(self, pieces: dict[int, DeltaToolCall]) -> DeltaToolCall:
        index = self.current_tool_id
        if index not in pieces:
            pieces[index] = DeltaToolCall(index)
        return pieces[index]

    def _send_args(self, pieces: dict[int, DeltaToolCall], fragment: str) -> None:
        self.streamed_args_for_tool[self.current_tool_id] += fragment
        self._update_args(pieces, fragment)

    def _update_args(self, pieces: dict[int, DeltaToolCall], fragment: str) -> None:
        index = self.current_tool_id
        args = _completed(self.streamed_args_for_tool[index])
        if args is not None:
            self.prev_tool_call_arr[index]["arguments"] = args
        piece = self._piece(pieces)
        piece.arguments = (piece.arguments or "") + fragment
