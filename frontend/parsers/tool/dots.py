"""``dots``: rednote's Dots tool calls, XML invokes (or a JSON object) in tags.

::

    text<dots_function_call>
    <invoke name="search">
    <parameter name="query">weather in Shanghai</parameter>
    </invoke>
    </dots_function_call>

    <dots_function_call>{"name": "search", "arguments": {"query": "x"}}</dots_function_call>

vLLM's ``DotsToolParser`` as it is:

* parameter values are text, converted by the type the tool's schema gives
  the parameter (through ``$ref``/``anyOf``...; ``null`` is None; a number
  with an integral value is an int; a boolean is ``true`` or ``1``; an
  unknown type is JSON if it parses); calls to tools the request does not
  have are dropped;
* non-streaming: content is the text before the first block (the text after
  the blocks is dropped), or the whole output when no call is valid;
* streaming sends each block's calls whole when the block closes (name and
  arguments in one piece); a JSON body is sent as soon as it is complete,
  name first; a block without a valid call is sent as content, the
  ``</dots_function_call>`` tag itself never is; a partial opening tag is
  held back (and never sent, as vLLM does not flush it at the end).
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any, ClassVar

from frontend.parsers.text_so_far import TextSoFarToolParser
from frontend.parsers.tool.base import is_complete_json, partial_tag_overlap
from frontend.parsers.types import (
    DeltaToolCall,
    ExtractedToolCalls,
    ParsedDelta,
    ToolCall,
    make_tool_call_id,
    tool_function,
)

START = "<dots_function_call>"
END = "</dots_function_call>"
_BLOCK_RE = re.compile(rf"{re.escape(START)}\s*(.*?)\s*{re.escape(END)}", re.DOTALL)
_INVOKE_RE = re.compile(r"<invoke\s+name\s*=\s*(?P<name>[^>]+)>(?P<body>.*?)</invoke>", re.DOTALL)
_PARAMETER_RE = re.compile(
    r"<parameter\s+name\s*=\s*(?P<name>[^>]+)>(?P<value>.*?)</parameter>", re.DOTALL
)
# What a failed block parse raises (vLLM catches these three).
_BLOCK_ERRORS = (json.JSONDecodeError, TypeError, ValueError)


def _unquote(value: str) -> str:
    value = value.strip()
    if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
        return value[1:-1]
    return value


def _convert(value: str, kind: Any) -> Any:
    """A parameter's text as the schema ``type`` ``kind`` reads it."""
    if value.lower() == "null":
        return None
    if isinstance(kind, list):
        kind = next((item for item in kind if item != "null"), "string")
    kind = str(kind).lower()
    if kind in ("string", "str", "text"):
        return value
    if kind in ("integer", "int"):
        try:
            return int(value)
        except ValueError:
            return value
    if kind in ("number", "float"):
        try:
            number = float(value)
        except ValueError:
            return value
        return int(number) if number.is_integer() else number
    if kind in ("boolean", "bool"):
        return value.lower() in ("true", "1")
    try:
        return json.loads(value)
    except ValueError:
        return value


def _schema_type(schema: Any, defs: dict[str, Any], depth: int = 0) -> Any:
    """The ``type`` of a parameter schema, through local ``$ref``s and the
    first non-null ``anyOf``/``oneOf``/``allOf`` alternative that has one."""
    if not isinstance(schema, dict) or depth > 10:
        return None
    if "type" in schema:
        return schema["type"]
    ref = schema.get("$ref")
    if isinstance(ref, str) and ref.startswith("#/$defs/"):
        return _schema_type(defs.get(ref.rsplit("/", 1)[-1]), defs, depth + 1)
    for keyword in ("anyOf", "oneOf", "allOf"):
        alternatives = schema.get(keyword)
        if not isinstance(alternatives, list):
            continue
        for alternative in alternatives:
            if isinstance(alternative, dict) and alternative.get("type") == "null":
                continue
            found = _schema_type(alternative, defs, depth + 1)
            if found is not None:
                return found
    return None


class DotsToolParser(TextSoFarToolParser):
    supports_required_and_named: ClassVar[bool] = False

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._buffer = ""
        self.current_tool_id = -1
        self.current_tool_name_sent = False
        self._names = {tool_function(tool).get("name") for tool in self.tools}

    def _schema(self, name: str) -> tuple[dict[str, Any], dict[str, Any]]:
        """(properties, $defs) of the first tool called ``name``."""
        for tool in self.tools:
            function = tool_function(tool)
            if function.get("name") != name:
                continue
            schema = function.get("parameters")
            if not isinstance(schema, dict):
                break
            properties, defs = schema.get("properties", {}), schema.get("$defs", {})
            return (
                properties if isinstance(properties, dict) else {},
                defs if isinstance(defs, dict) else {},
            )
        return {}, {}

    def _invoke(self, match: re.Match[str]) -> dict[str, Any]:
        name = _unquote(match.group("name"))
        properties, defs = self._schema(name)
        arguments: dict[str, Any] = {}
        for parameter in _PARAMETER_RE.finditer(match.group("body")):
            key = _unquote(parameter.group("name"))
            kind: Any = "string"
            if key in properties:
                kind = _schema_type(properties[key], defs) or "string"
            arguments[key] = _convert(parameter.group("value").strip(), kind)
        return {"name": name, "arguments": arguments}

    def _block(self, body: str) -> list[dict[str, Any]]:
        """The calls of one block's body; raises one of ``_BLOCK_ERRORS``."""
        body = body.strip()
        if body.startswith("<invoke"):
            return [self._invoke(m) for m in _INVOKE_RE.finditer(body)]
        parsed = json.loads(body)
        if not isinstance(parsed, dict):
            raise TypeError("Dots JSON tool call must be an object")
        return [parsed]

    def _valid(self, parsed: dict[str, Any]) -> tuple[str, dict[str, Any]] | None:
        """(name, arguments) of a call to a known tool with object arguments."""
        name = parsed.get("name")
        if not isinstance(name, str) or name not in self._names:
            return None
        arguments = parsed.get("arguments", parsed.get("parameters", {})) or {}
        if not isinstance(arguments, dict):
            return None
        return name, arguments

    def extract(self, text: str) -> ExtractedToolCalls:
        start = text.find(START)
        if start == -1:
            return ExtractedToolCalls(False, [], text)
        calls = []
        for block in _BLOCK_RE.finditer(text):
            try:
                parsed_calls = self._block(block.group(1))
            except _BLOCK_ERRORS:
                continue  # vLLM logs it and goes on with the next block
            for parsed in parsed_calls:
                valid = self._valid(parsed)
                if valid is not None:
                    args = json.dumps(valid[1], ensure_ascii=False)
                    calls.append(ToolCall(valid[0], args, make_tool_call_id()))
        if not calls:
            return ExtractedToolCalls(False, [], text)
        return ExtractedToolCalls(True, calls, text[:start].strip() or None)

    def _new_call(self, name: str, arguments: dict[str, Any], sent: str) -> DeltaToolCall:
        """Open call ``current_tool_id + 1`` with ``sent`` as its arguments."""
        self.current_tool_id += 1
        self.prev_tool_call_arr.append({"name": name, "arguments": arguments})
        self.streamed_args_for_tool.append(sent)
        return DeltaToolCall(
            self.current_tool_id, id=make_tool_call_id(), type="function", name=name, arguments=sent
        )

    def _stream_json_body(self, pieces: list[DeltaToolCall]) -> None:
        """An open block whose body is already a complete JSON call: send it."""
        body = self._buffer[len(START) :].strip()
        if not body or not is_complete_json(body):
            return
        parsed = json.loads(body)
        if not isinstance(parsed, dict):
            return
        valid = self._valid(parsed)
        if valid is None:
            return
        name, arguments = valid
        serialized = json.dumps(arguments, ensure_ascii=False)
        if not self.current_tool_name_sent:
            pieces.append(self._new_call(name, arguments, ""))
            self.current_tool_name_sent = True
        streamed = self.streamed_args_for_tool[self.current_tool_id]
        if serialized.startswith(streamed) and serialized != streamed:
            pieces.append(
                DeltaToolCall(self.current_tool_id, arguments=serialized[len(streamed) :])
            )
            self.streamed_args_for_tool[self.current_tool_id] = serialized

    def _close_block(self, body: str, text: list[str], pieces: list[DeltaToolCall]) -> None:
        """A block just closed: send its calls (the rest of one already begun)."""
        try:
            parsed_calls = self._block(body)
            if not parsed_calls:
                raise ValueError("Dots tool-call block contains no invoke")
        except _BLOCK_ERRORS:
            text.append(body.strip())
            return
        begun = self.current_tool_name_sent
        valid = [v for v in map(self._valid, parsed_calls) if v is not None]
        if begun and valid:
            name, arguments = valid.pop(0)
            serialized = json.dumps(arguments, ensure_ascii=False)
            index = self.current_tool_id
            streamed = self.streamed_args_for_tool[index]
            if serialized.startswith(streamed) and serialized != streamed:
                pieces.append(DeltaToolCall(index, arguments=serialized[len(streamed) :]))
            self.prev_tool_call_arr[index] = {"name": name, "arguments": arguments}
            self.streamed_args_for_tool[index] = serialized
        for name, arguments in valid:
            pieces.append(
                self._new_call(name, arguments, json.dumps(arguments, ensure_ascii=False))
            )
        if not valid and not begun:
            text.append(body.strip())

    def extract_streaming(
        self,
        previous_text: str,
        current_text: str,
        delta_text: str,
        previous_ids: Sequence[int],
        current_ids: Sequence[int],
        delta_ids: Sequence[int],
    ) -> ParsedDelta | None:
        if not previous_text:
            # vLLM starts over while no text has come yet.
            self._buffer = ""
            self.prev_tool_call_arr = []
            self.current_tool_id = -1
            self.current_tool_name_sent = False
            self.streamed_args_for_tool = []
        self._buffer += delta_text
        text: list[str] = []
        pieces: list[DeltaToolCall] = []
        while self._buffer:
            start = self._buffer.find(START)
            if start == -1:
                held = partial_tag_overlap(self._buffer, START)
                cut = len(self._buffer) - held
                text.append(self._buffer[:cut])
                self._buffer = self._buffer[cut:]
                # Only on this path does vLLM drop stray end tags.
                text = [part.replace(END, "") for part in text]
                break
            if start > 0:
                text.append(self._buffer[:start])
                self._buffer = self._buffer[start:]
            end = self._buffer.find(END, len(START))
            if end == -1:
                self._stream_json_body(pieces)
                break
            body = self._buffer[len(START) : end]
            self._buffer = self._buffer[end + len(END) :]
            self._close_block(body, text, pieces)
            self.current_tool_name_sent = False
        content = "".join(text)
        if not content and not pieces:
            return None
        return ParsedDelta(content=content or None, tool_calls=pieces)
