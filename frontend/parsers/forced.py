"""Output of a forced tool call (``tool_choice`` "required" or a named tool).

For parsers that support it, vLLM constrains such requests with a JSON
schema (:func:`frontend.structured.tool_schema.json_schema_from_tools`): the output
is then the named tool's arguments, or a JSON array of ``{"name",
"parameters"}`` objects for "required".  This module reads that output,
whole or streamed.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from frontend.errors import lax_bool
from frontend.parsers.types import DeltaToolCall, ParsedDelta, ToolCall, make_tool_call_id


def _optional_bool(value: Any) -> bool:
    """Whether pydantic takes ``value`` for an optional bool field."""
    return value is None or lax_bool(value) is not None


def parse_required(content: str | None) -> list[ToolCall]:
    """The calls of a "required" array; [] when it is not a valid one.

    Each element is vLLM's ``FunctionDefinition``: a string ``name``, an
    object (or null) ``parameters``; arguments are ``parameters`` as JSON.
    """
    try:
        items = json.loads(content or "")
    except (ValueError, RecursionError):
        return []
    if not isinstance(items, list):
        return []
    calls = []
    for item in items:
        if not isinstance(item, dict) or not isinstance(item.get("name"), str):
            return []
        description = item.get("description")
        params = item.get("parameters")
        if description is not None and not isinstance(description, str):
            return []
        if params is not None and not isinstance(params, dict):
            return []
        if not (_optional_bool(item.get("strict")) and _optional_bool(item.get("defer_loading"))):
            return []
        calls.append(ToolCall(item["name"], json.dumps(params, ensure_ascii=False)))
    return calls


def named_stream_delta(
    delta_text: str, function_name: str, name_returned: bool
) -> tuple[ParsedDelta, bool]:
    """A named call streams the output as its arguments; the first piece
    carries the id and the name."""
    if name_returned:
        piece = DeltaToolCall(0, arguments=delta_text)
    else:
        piece = DeltaToolCall(
            0, id=make_tool_call_id(), type="function", name=function_name, arguments=delta_text
        )
    return ParsedDelta(tool_calls=[piece]), True


@dataclass(slots=True)
class _Span:
    """Where one element of the "required" array sits in the text."""

    name: str | None = None
    name_end: int | None = None
    args_start: int | None = None
    args_end: int | None = None

    def ready_at(self, length: int) -> bool:
        return (
            self.name is not None
            and self.name_end is not None
            and self.name_end <= length
            and self.args_start is not None
            and self.args_start < length
        )

    @property
    def ready(self) -> bool:
        return self.name is not None and self.args_start is not None


# Where the scanner is inside one element object.
_KEY, _COLON, _VALUE, _IN_STRING, _IN_CONTAINER, _IN_SCALAR, _AFTER = range(7)


def _scan_required(text: str) -> list[_Span]:
    """The elements of a (partial) "required" array: names once complete,
    and the character span of each ``parameters`` value."""
    spans: list[_Span] = []
    depth = 0  # element objects sit at depth 2
    in_string = escaped = False
    string_start = value_start = 0
    cur: _Span | None = None
    expect = _KEY
    key: str | None = None

    def end_value(pos: int) -> None:
        nonlocal expect
        assert cur is not None
        if key == "parameters":
            cur.args_end = pos
        elif key == "name" and expect == _IN_STRING:
            try:
                cur.name = json.loads(text[value_start:pos])
                cur.name_end = pos
            except ValueError:
                cur.name = None
        expect = _AFTER

    def start_value(pos: int, state: int) -> None:
        nonlocal expect, value_start
        assert cur is not None
        value_start = pos
        if key == "parameters":
            cur.args_start = pos
        expect = state

    for i, ch in enumerate(text):
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
                if depth == 2 and cur is not None:
                    if expect == _KEY:
                        key = text[string_start + 1 : i]
                        expect = _COLON
                    elif expect == _IN_STRING:
                        end_value(i + 1)
            continue
        if ch == '"':
            in_string = True
            string_start = i
            if depth == 2 and cur is not None and expect == _VALUE:
                start_value(i, _IN_STRING)
            continue
        if ch in "{[":
            if depth == 0 and ch != "[":
                return spans
            if depth == 1:
                if ch != "{":
                    return spans
                cur = _Span()
                spans.append(cur)
                expect, key = _KEY, None
            elif depth == 2 and cur is not None and expect == _VALUE:
                start_value(i, _IN_CONTAINER)
            depth += 1
            continue
        if ch in "}]":
            if depth == 2 and cur is not None and expect == _IN_SCALAR:
                end_value(i)
            depth -= 1
            if depth == 2 and cur is not None and expect == _IN_CONTAINER:
                end_value(i + 1)
            elif depth == 1:
                cur = None
            elif depth <= 0:
                return spans
            continue
        if depth != 2 or cur is None:
            continue
        if ch == ":":
            if expect == _COLON:
                expect = _VALUE
        elif ch == ",":
            if expect == _IN_SCALAR:
                end_value(i)
            expect, key = _KEY, None
        elif ch.isspace():
            if expect == _IN_SCALAR:
                end_value(i)
        elif expect == _VALUE:
            start_value(i, _IN_SCALAR)
    return spans


def required_stream_delta(previous_text: str, current_text: str) -> tuple[ParsedDelta | None, bool]:
    """This step's pieces of the "required" array's calls, and whether any
    call has been announced so far.

    A call goes out (id, name and the arguments so far) once its name is
    complete and its ``parameters`` value has started; then new argument
    text only.
    """
    if not current_text:
        return None, False
    spans = _scan_required(current_text)
    sent = len(previous_text)
    pieces: list[DeltaToolCall] = []
    for index, span in enumerate(spans):
        if not span.ready:
            break  # elements come in order
        assert span.args_start is not None
        end = span.args_end if span.args_end is not None else len(current_text)
        if span.ready_at(sent):
            new = current_text[min(end, sent) : end]
            if new:
                pieces.append(DeltaToolCall(index, name=None, arguments=new))
            continue
        pieces.append(
            DeltaToolCall(
                index,
                id=make_tool_call_id(),
                type="function",
                name=span.name,
                arguments=current_text[span.args_start : end],
            )
        )
    announced = any(span.ready for span in spans)
    return (ParsedDelta(tool_calls=pieces) if pieces else None), announced
