"""Hunyuan's ``<arg_value>`` texts as the tool schema types them.

vLLM's ``hy_v3`` and ``hy_v4`` tool parsers share these rules (each keeps
its own copy): the parameter's schema gives a set of types (``type``, a
``type`` list, else ``anyOf``/``oneOf``; "null" dropped; aliases and
prefixes such as ``int64`` or ``float32`` normalized), and the raw text
becomes, in this order, a boolean, an integer, a number (a float only with
``.``/``e``/``E``), JSON for any other type, the text itself for a string,
else whatever JSON or a Python literal makes of it.  Schemas of unexpected
shapes raise as vLLM's do (its callers catch it).
"""

from __future__ import annotations

import ast
import json
import warnings
from typing import Any

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
