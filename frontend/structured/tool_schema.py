"""The JSON schemas that force a tool call (``tool_choice`` "required" or a named tool).

For parsers that read forced calls as JSON, vLLM constrains such requests
with :func:`json_schema_from_tools`; Mistral's parsers get a bare
``[{"name", "arguments"}]`` array (:func:`mistral_array_schema`).
``tools`` are the request's tool dicts, ``[{"type": "function", "function":
{"name", "description", "parameters", "strict"}}, ...]``.
:mod:`frontend.parsers.forced` reads the output these schemas allow.
"""

from __future__ import annotations

from typing import Any

from frontend.parsers.types import named_tool, tool_function


class ToolSchemaError(ValueError):
    """A tool definition that cannot be turned into a schema (a 400)."""

    def __init__(self, message: str, param: str = "tools") -> None:
        super().__init__(message)
        self.param = param


def _params_or_empty_object(params: Any) -> Any:
    # Empty or missing parameters still constrain arguments to an object.
    return params if params else {"type": "object", "properties": {}}


def json_schema_from_tools(
    tool_choice: Any, tools: list[dict] | None, parallel_tool_calls: bool | None = True
) -> dict | None:
    """The JSON schema that forces a tool call, as vLLM's ``get_json_schema_from_tools``.

    ``tool_choice="required"``: an array of ``{"name", "parameters"}`` objects
    (at most one when ``parallel_tool_calls`` is false); a named tool: that
    tool's parameters schema; ``"auto"``/``"none"``: None.  Tools' ``$defs``
    move to the top level of the array schema.
    """
    if tool_choice in ("none", None) or tools is None:
        return None
    if isinstance(tool_choice, dict):
        name = tool_function(tool_choice).get("name")
        by_name = {tool_function(t).get("name"): t for t in tools}
        if name not in by_name:
            raise ToolSchemaError(f"Tool '{name}' has not been passed in `tools`.", "tool_choice")
        return _params_or_empty_object(tool_function(by_name[name]).get("parameters"))
    if tool_choice != "required":
        return None
    if not tools:
        raise ToolSchemaError(
            "tool_choice requires a function call, but tools contains no "
            "function tool the model can call.",
            "tool_choice",
        )
    variants = []
    all_defs: dict[str, Any] = {}
    for tool in tools:
        function = tool_function(tool)
        name, params = function.get("name"), function.get("parameters")
        if isinstance(params, dict) and "$defs" in params:
            defs = params["$defs"]
            params = {k: v for k, v in params.items() if k != "$defs"}
            if not isinstance(defs, dict):
                raise ToolSchemaError(
                    f"`$defs` in the parameters of tool '{name}' must be an "
                    f"object, got {_py_type_name(defs)}."
                )
            for def_name, def_schema in defs.items():
                if def_name in all_defs and all_defs[def_name] != def_schema:
                    raise ToolSchemaError(
                        f"Tool definition '{def_name}' has multiple schemas, "
                        "which is not supported."
                    )
                all_defs[def_name] = def_schema
            # A parameters object that held only $defs ends up empty, not defaulted.
            parameters = params
        else:
            parameters = _params_or_empty_object(params)
        variants.append(
            {
                "properties": {
                    "name": {"type": "string", "enum": [name]},
                    "parameters": parameters,
                },
                "required": ["name", "parameters"],
            }
        )
    schema: dict[str, Any] = {
        "type": "array",
        "minItems": 1,
        "items": {"type": "object", "anyOf": variants},
    }
    if parallel_tool_calls is False:
        schema["maxItems"] = 1
    if all_defs:
        schema["$defs"] = all_defs
    return schema


def _py_type_name(value: Any) -> str:
    return type(value).__name__


def mistral_array_schema(tools: list[dict], tool_choice: Any) -> dict | None:
    """vLLM's schema for Mistral "required"/named choice in Hugging Face
    tokenizer mode: a bare ``[{"name", "arguments"}]`` array."""
    name = named_tool(tool_choice)
    chosen = [t for t in tools if name is None or (t.get("function") or {}).get("name") == name]
    if not chosen:
        return None  # vLLM logs a warning and adds no schema
    extra = {"maxItems": 1} if name is not None else {}
    any_of = [
        {
            "type": "object",
            "properties": {
                "name": {"type": "string", "enum": [t["function"]["name"]]},
                "arguments": t["function"].get("parameters") or {"type": "object"},
            },
            "required": ["name", "arguments"],
        }
        for t in chosen
    ]
    return {"type": "array", "minItems": 1, **extra, "items": {"type": "object", "anyOf": any_of}}
