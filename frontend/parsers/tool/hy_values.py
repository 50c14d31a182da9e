"""Hunyuan's ``<arg_value>`` texts as the tool schema types them, and the
arguments object streamed from them.

vLLM's ``hy_v3`` and ``hy_v4`` tool parsers share these rules (each keeps
its own copy): the parameter's schema gives a set of types (``type``, a
``type`` list, else ``anyOf``/``oneOf``; "null" dropped; aliases and
prefixes such as ``int64`` or ``float32`` normalized), and the raw text
becomes, in this order, a boolean, an integer, a number (a float only with
``.``/``e``/``E``), JSON for any other type, the text itself for a string,
else whatever JSON or a Python literal makes of it.  Schemas of unexpected
shapes raise as vLLM's do (its callers catch it).

They stream a call's arguments alike too (:class:`HyArgumentsParser`): a
JSON object of the closed pairs, a string-only value growing in it, its
``}`` at ``</tool_call>``.
"""

from __future__ import annotations

import ast
import json
import re
import warnings
from typing import Any

from frontend.parsers.text_so_far import TextSoFarToolParser
from frontend.parsers.types import tool_function

_TYPE_ALIASES: dict[str, str] = {
    "str": "string",
    "text": "string",
    "varchar": "string",
    "char": "string",
    "enum": "string",
    "bool": "boolean",
    "binary": "boolean",
    "int": "integer",
    "float": "number",
    "double": "number",
    "list": "array",
    "dict": "object",
    "map": "object",
}
_INTEGER_PREFIXES = ("int", "uint", "long", "short", "unsigned")
_NUMBER_PREFIXES = ("num", "float")


def _normalize_type(raw_type: str) -> str:
    exact = _TYPE_ALIASES.get(raw_type)
    if exact is not None:
        return exact
    lower = raw_type.lower()
    if any(lower.startswith(p) for p in _INTEGER_PREFIXES):
        return "integer"
    if any(lower.startswith(p) for p in _NUMBER_PREFIXES):
        return "number"
    return raw_type


def arg_schema(tools: list[dict] | None, function_name: str, key: str) -> dict:
    """The schema of ``key`` in the named tool's parameters ({} when unknown)."""
    for tool in tools or ():
        function = tool_function(tool)
        if function.get("name") == function_name:
            parameters = function.get("parameters")
            if parameters is None:
                return {}
            return parameters.get("properties", {}).get(key, {})
    return {}


def _schema_options(schema: dict) -> list[dict]:
    if "type" in schema:
        declared = schema["type"]
        if isinstance(declared, list):
            return [{"type": t} for t in declared]
        return [schema]
    if "anyOf" in schema:
        return schema["anyOf"]
    if "oneOf" in schema:
        return schema["oneOf"]
    return [{"type": "string"}]


def value_types(schema: dict) -> set[str]:
    """The schema's normalized types, "null" left out."""
    return {_normalize_type(s.get("type", "string")) for s in _schema_options(schema)} - {"null"}


def is_only_string(tools: list[dict] | None, function_name: str, key: str) -> bool:
    """Whether the value is a string whatever it holds (streamed as it grows)."""
    return value_types(arg_schema(tools, function_name, key)) == {"string"}


def _bool(value: str) -> bool | None:
    lower = value.lower()
    if lower == "true":
        return True
    if lower == "false":
        return False
    return None


def _int(value: str) -> int | None:
    try:
        return int(value)
    except (ValueError, TypeError):
        return None


def _number(value: str) -> int | float | None:
    try:
        if "." in value or "e" in value or "E" in value:
            return float(value)
        return int(value)
    except (ValueError, TypeError):
        return None


def _deserialize(value: str) -> Any:
    try:
        return json.loads(value)
    except Exception:
        pass
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", SyntaxWarning)
            return ast.literal_eval(value)
    except Exception:
        pass
    return value


def parse_value(value: str, tools: list[dict] | None, function_name: str, key: str) -> Any:
    """The raw ``<arg_value>`` text as the parameter's schema types it."""
    types = value_types(arg_schema(tools, function_name, key))
    if "boolean" in types and (as_bool := _bool(value)) is not None:
        return as_bool
    if "integer" in types and (as_int := _int(value)) is not None:
        return as_int
    if "number" in types and (as_number := _number(value)) is not None:
        return as_number
    if types - {"string", "boolean", "integer", "number"}:
        try:
            return json.loads(value)
        except ValueError:
            pass
    if "string" in types:
        return value
    return _deserialize(value)


class HyArgumentsParser(TextSoFarToolParser):
    """The streamed arguments of one Hunyuan call.  A subclass sets the
    markers and ``args_re`` (key, value) in ``__init__``, then ``_buffer``
    and :meth:`_reset_call`, and says how an open string value is written."""

    key_start: str
    key_end: str
    value_start: str
    call_end: str
    args_re: re.Pattern[str]
    _buffer: str

    def _reset_call(self) -> None:
        self._name: str | None = None
        self._completed: dict = {}
        self._sent_len = 0

    def _open_value(self, raw: str) -> str:
        """An open string value's text so far, escaped for JSON."""
        raise NotImplementedError

    def _snapshot(self, args_text: str) -> str:
        """The arguments so far as JSON: closed pairs, then an open string
        value without its closing quote."""
        name = self._name or ""
        for key, value in self.args_re.findall(args_text):
            key = key.strip()
            if key not in self._completed:
                self._completed[key] = parse_value(value, self.tools, name, key)
        last_end = 0
        for match in self.args_re.finditer(args_text):
            last_end = match.end()
        tail = args_text[last_end:]
        parts = [
            f"{json.dumps(k, ensure_ascii=False)}: {json.dumps(v, ensure_ascii=False)}"
            for k, v in self._completed.items()
        ]
        key_start = tail.find(self.key_start)
        if key_start != -1:
            key_end = tail.find(self.key_end, key_start + len(self.key_start))
            if key_end != -1:
                key = tail[key_start + len(self.key_start) : key_end].strip()
                is_string = is_only_string(self.tools, name, key)
                value_start = tail.find(self.value_start, key_end)
                if value_start != -1 and is_string:
                    escaped = self._open_value(tail[value_start + len(self.value_start) :])
                    parts.append(f'{json.dumps(key, ensure_ascii=False)}: "{escaped}')
        return "{" + ", ".join(parts) + "}"

    def _arguments_diff(self) -> tuple[str | None, bool]:
        """(the arguments text not sent yet, whether the call closed).  A
        closed call is recorded and the buffer left after its end."""
        buf = self._buffer
        complete = self.call_end in buf
        if complete:
            end = buf.find(self.call_end)
            args_text, remaining = buf[:end], buf[end + len(self.call_end) :]
        else:
            args_text, remaining = buf, ""
        snapshot = self._snapshot(args_text)
        diff: str | None = None
        if complete:
            final = json.dumps(self._completed, ensure_ascii=False)
            if self._sent_len < len(final):
                diff = final[self._sent_len :]
            self.prev_tool_call_arr.append({"name": self._name, "arguments": self._completed})
            self.streamed_args_for_tool.append(final)
            self._reset_call()
            self._buffer = remaining
        else:
            end = len(snapshot) - 1  # the "}" waits for </tool_call>
            if end > self._sent_len:
                diff = snapshot[self._sent_len : end]
                self._sent_len = end
        return diff, complete
