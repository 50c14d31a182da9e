"""Tool schemas: vLLM's JSON schema for forced tool calls, and type coercion.

``tools`` are the request's tool dicts, ``[{"type": "function", "function":
{"name", "description", "parameters", "strict"}}, ...]``.
"""

from __future__ import annotations

import json
import math
from typing import Any


class ToolSchemaError(ValueError):
    """A tool definition that cannot be turned into a schema (a 400)."""

    def __init__(self, message: str, param: str = "tools") -> None:
        super().__init__(message)
        self.param = param


def _function(tool: Any) -> dict[str, Any]:
    function = tool.get("function") if isinstance(tool, dict) else None
    return function if isinstance(function, dict) else {}


def _params_or_empty_object(params: Any) -> Any:
    # Empty or missing parameters still constrain arguments to an object.
    return params if params else {"type": "object", "properties": {}}


def json_schema_from_tools(tool_choice: Any, tools: list[dict] | None,
                           parallel_tool_calls: bool | None = True) -> dict | None:
    """The JSON schema that forces a tool call, as vLLM's ``get_json_schema_from_tools``.

    ``tool_choice="required"``: an array of ``{"name", "parameters"}`` objects
    (at most one when ``parallel_tool_calls`` is false); a named tool: that
    tool's parameters schema; ``"auto"``/``"none"``: None.  Tools' ``$defs``
    move to the top level of the array schema.
    """
    if tool_choice in ("none", None) or tools is None:
        return None
    if isinstance(tool_choice, dict):
        name = _function(tool_choice).get("name")
        by_name = {_function(t).get("name"): t for t in tools}
        if name not in by_name:
            raise ToolSchemaError(f"Tool '{name}' has not been passed in `tools`.", "tool_choice")
        return _params_or_empty_object(_function(by_name[name]).get("parameters"))
    if tool_choice != "required":
        return None
    if not tools:
        raise ToolSchemaError("tool_choice requires a function call, but tools contains no "
                              "function tool the model can call.", "tool_choice")
    variants = []
    all_defs: dict[str, Any] = {}
    for tool in tools:
        function = _function(tool)
        name, params = function.get("name"), function.get("parameters")
        if isinstance(params, dict) and "$defs" in params:
            defs = params["$defs"]
            params = {k: v for k, v in params.items() if k != "$defs"}
            if not isinstance(defs, dict):
                raise ToolSchemaError(f"`$defs` in the parameters of tool '{name}' must be an "
                                      f"object, got {_py_type_name(defs)}.")
            for def_name, def_schema in defs.items():
                if def_name in all_defs and all_defs[def_name] != def_schema:
                    raise ToolSchemaError(f"Tool definition '{def_name}' has multiple schemas, "
                                          "which is not supported.")
                all_defs[def_name] = def_schema
            # A parameters object that held only $defs ends up empty, not defaulted.
            parameters = params
        else:
            parameters = _params_or_empty_object(params)
        variants.append({
            "properties": {"name": {"type": "string", "enum": [name]},
                           "parameters": parameters},
            "required": ["name", "parameters"],
        })
    schema: dict[str, Any] = {"type": "array", "minItems": 1,
                              "items": {"type": "object", "anyOf": variants}}
    if parallel_tool_calls is False:
        schema["maxItems"] = 1
    if all_defs:
        schema["$defs"] = all_defs
    return schema


def _py_type_name(value: Any) -> str:
    return type(value).__name__


def find_tool_properties(tools: list[dict] | None, name: str) -> dict[str, Any]:
    """The named tool's ``parameters.properties`` ({} when unknown)."""
    for tool in tools or ():
        function = _function(tool)
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
    "str": "string", "text": "string", "varchar": "string", "char": "string",
    "enum": "string", "int": "integer", "int32": "integer", "int64": "integer",
    "uint": "integer", "uint32": "integer", "uint64": "integer", "long": "integer",
    "short": "integer", "unsigned": "integer", "float": "number", "float32": "number",
    "float64": "number", "double": "number", "bool": "boolean", "dict": "object",
    "arr": "array", "list": "array", "sequence": "array",
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
