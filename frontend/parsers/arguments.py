"""Tool call arguments as the tool's schema types them.

Grammars whose arguments are raw text (Qwen3's XML parameters) give string
values; vLLM converts each to the first type of the parameter's schema it
parses as (:func:`coerce_arguments`), and streams only the part of the
converted JSON that can no longer change (:func:`stable_prefix`).
"""

from __future__ import annotations

import json
import math
from typing import Any

from frontend.parsers.types import tool_function


def find_tool_properties(tools: list[dict] | None, name: str) -> dict[str, Any]:
    """The named tool's ``parameters.properties`` ({} when unknown)."""
    for tool in tools or ():
        function = tool_function(tool)
        if function.get("name") == name:
            params = function.get("parameters") or {}
            properties = params.get("properties", {}) if isinstance(params, dict) else {}
            return properties if isinstance(properties, dict) else {}
    return {}


def schema_types(schema: Any) -> list[str]:
    """Every JSON type a schema allows (from type, enum, anyOf/oneOf/allOf)."""
    if not isinstance(schema, dict):
        return ["string"]
    types: set[str] = set()
    declared = schema.get("type")
    if isinstance(declared, str):
        types.add(declared)
    elif isinstance(declared, list):
        types.update(t for t in declared if isinstance(t, str))
    enum = schema.get("enum")
    if isinstance(enum, list):
        types.update(_json_type(value) for value in enum)
    for key in ("anyOf", "oneOf", "allOf"):
        choices = schema.get(key)
        if isinstance(choices, list):
            for choice in choices:
                types.update(schema_types(choice))
    types.discard("")
    return list(types) if types else ["string"]


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    if isinstance(value, dict):
        return "object"
    return ""


_TYPE_ALIASES = {
    "str": "string",
    "text": "string",
    "varchar": "string",
    "char": "string",
    "enum": "string",
    "int": "integer",
    "int32": "integer",
    "int64": "integer",
    "uint": "integer",
    "uint32": "integer",
    "uint64": "integer",
    "long": "integer",
    "short": "integer",
    "unsigned": "integer",
    "float": "number",
    "float32": "number",
    "float64": "number",
    "double": "number",
    "bool": "boolean",
    "dict": "object",
    "arr": "array",
    "list": "array",
    "sequence": "array",
}
_TYPE_PRIORITY = ("null", "integer", "number", "boolean", "object", "array", "string")


def _is_finite_json(value: Any) -> bool:
    try:
        json.dumps(value, allow_nan=False)
    except (ValueError, TypeError):
        return False
    return True


def coerce_to_types(value: str, types: list[str]) -> Any:
    """A raw string value as the first schema type it parses as (vLLM's order)."""
    wanted = {_TYPE_ALIASES.get(t.strip().lower(), t.strip().lower()) for t in types}
    for kind in _TYPE_PRIORITY:
        if kind not in wanted:
            continue
        if kind == "null":
            if value.lower() == "null":
                return None
        elif kind == "string":
            return value
        elif kind == "integer":
            try:
                return int(value)
            except ValueError:
                pass
        elif kind == "number":
            try:
                number = float(value)
            except ValueError:
                continue
            if math.isfinite(number):
                return number if number != int(number) else int(number)
        elif kind == "boolean":
            lowered = value.lower().strip()
            if lowered in ("true", "1"):
                return True
            if lowered in ("false", "0"):
                return False
        else:  # object, array
            try:
                parsed = json.loads(value)
            except ValueError:
                continue
            if _is_finite_json(parsed):
                return parsed
    try:
        parsed = json.loads(value)
    except ValueError:
        return value
    return parsed if _is_finite_json(parsed) else value


def _coerce_value(value: object, schema: dict) -> tuple[object, bool]:
    if isinstance(value, str):
        coerced = coerce_to_types(value, schema_types(schema))
        return (coerced, True) if coerced is not value else (value, False)
    if isinstance(value, dict):
        nested = schema.get("properties")
        if isinstance(nested, dict):
            return value, coerce_arguments(value, nested)
        return value, False
    if isinstance(value, list):
        items = schema.get("items")
        if not isinstance(items, dict):
            return value, False
        changed = False
        for i, item in enumerate(value):
            coerced, item_changed = _coerce_value(item, items)
            if item_changed:
                value[i] = coerced
                changed = True
        return value, changed
    coerced = coerce_to_types(json.dumps(value, ensure_ascii=False), schema_types(schema))
    if type(coerced) is not type(value) or coerced != value:
        return coerced, True
    return value, False


def coerce_arguments(args: dict, properties: dict) -> bool:
    """Convert ``args`` values in place to their ``properties``' schema types;
    whether any changed."""
    changed = False
    for key, value in args.items():
        prop = properties.get(key)
        if not isinstance(prop, dict):
            continue
        coerced, value_changed = _coerce_value(value, prop)
        if value_changed:
            args[key] = coerced
            changed = True
    return changed


def streamable_string_keys(properties: dict) -> set[str] | None:
    """Keys whose values stay strings (safe to stream before they close)."""
    if not properties:
        return None
    return {key for key, schema in properties.items() if set(schema_types(schema)) == {"string"}}


def stable_prefix(json_str: str, string_keys: set[str] | None) -> str:
    """The prefix of a converted-arguments JSON object that cannot change.

    Everything up to the last top-level value is stable; that value too if it
    is an unterminated string of a string-typed key (streamed as it grows).
    """
    last_colon = -1
    last_key: str | None = None
    pending_key: str | None = None
    in_string = escape = False
    string_start = -1
    depth = 0
    for i, c in enumerate(json_str):
        if escape:
            escape = False
        elif in_string:
            if c == "\\":
                escape = True
            elif c == '"':
                in_string = False
                if depth == 1 and string_start >= 0:
                    pending_key = json_str[string_start + 1 : i]
        elif c == '"':
            in_string = True
            string_start = i
        elif c in "{[":
            depth += 1
        elif c in "}]":
            depth -= 1
        elif c == ":" and depth == 1:
            last_colon = i
            last_key = pending_key
            pending_key = None
    if last_colon < 0:
        return ""
    end = last_colon + 1
    while end < len(json_str) and json_str[end] in " \t\n\r":
        end += 1
    if end >= len(json_str) or json_str[end] != '"':
        return json_str[:end]
    if string_keys is not None and last_key not in string_keys:
        return json_str[:end]
    escape = False
    for i in range(end + 1, len(json_str)):
        c = json_str[i]
        if escape:
            escape = False
        elif c == "\\":
            escape = True
        elif c == '"':
            return json_str[:i]
    return json_str
