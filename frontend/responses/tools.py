"""A Responses request's ``tools`` and ``tool_choice``.

Checked as vLLM 0.32's model validators check them (``check_tool_usage``,
``check_custom_tool_format``), echoed as vLLM dumps them (openai's pydantic
tool types, every field present), and shown to the chat pipeline as chat
tools the way vLLM's ``get_function_tools`` shows them to the model: function
tools as they are, a namespace's functions flattened to ``<ns>__<name>``, a
custom tool as a one-string function shim. Every other tool type (web
search, MCP, file search, ...) is accepted and never reaches a non-Harmony
model, as in vLLM.
"""

from __future__ import annotations

import copy
from typing import Any

from frontend.errors import field_error, invalid, validation_errors

# openai's ``Tool`` union: each type's fields in dump order.
_FUNCTION = (
    "name",
    "parameters",
    "strict",
    "type",
    "allowed_callers",
    "async",
    "defer_loading",
    "description",
    "output_schema",
)
_CUSTOM = ("name", "type", "allowed_callers", "async", "defer_loading", "description", "format")
_NAMESPACED_FUNCTION = (
    "name",
    "type",
    "allowed_callers",
    "async",
    "defer_loading",
    "description",
    "output_schema",
    "parameters",
    "strict",
)
TOOL_FIELDS: dict[str, tuple[str, ...]] = {
    "function": _FUNCTION,
    "file_search": ("type", "vector_store_ids", "filters", "max_num_results", "ranking_options"),
    "computer": ("type",),
    "computer_use_preview": ("display_height", "display_width", "environment", "type"),
    "web_search": (
        "type",
        "external_web_access",
        "filters",
        "search_context_size",
        "user_location",
    ),
    "mcp": (
        "server_label",
        "type",
        "allowed_callers",
        "allowed_tools",
        "authorization",
        "connector_id",
        "defer_loading",
        "headers",
        "require_approval",
        "server_description",
        "server_url",
        "tunnel_id",
    ),
    "code_interpreter": ("container", "type", "allowed_callers"),
    "programmatic_tool_calling": ("type",),
    "image_generation": (
        "type",
        "action",
        "background",
        "complexity",
        "frame_count",
        "frame_duration_ms",
        "input_fidelity",
        "input_image_mask",
        "model",
        "moderation",
        "output_compression",
        "output_format",
        "partial_images",
        "quality",
        "size",
        "svg",
    ),
    "local_shell": ("type",),
    "shell": ("type", "allowed_callers", "environment"),
    "custom": _CUSTOM,
    "namespace": ("description", "name", "tools", "type"),
    "tool_search": ("type", "description", "execution", "parameters"),
    "web_search_preview": ("type", "search_content_types", "search_context_size", "user_location"),
    "apply_patch": ("type", "allowed_callers"),
}
TOOL_FIELDS["web_search_2025_08_26"] = TOOL_FIELDS["web_search"]
TOOL_FIELDS["web_search_preview_2025_03_11"] = TOOL_FIELDS["web_search_preview"]
# Fields without a default, per type (pydantic's "Field required").
_REQUIRED = {
    "function": ("name",),
    "file_search": ("vector_store_ids",),
    "computer_use_preview": ("display_height", "display_width", "environment"),
    "mcp": ("server_label",),
    "code_interpreter": ("container",),
    "custom": ("name",),
    "namespace": ("description", "name", "tools"),
}
# openai's ToolChoice union (besides "none", "auto", "required"): type -> fields.
CHOICE_FIELDS: dict[str, tuple[str, ...]] = {
    "allowed_tools": ("mode", "tools", "type"),
    "function": ("name", "type"),
    "custom": ("name", "type"),
    "mcp": ("server_label", "type", "name"),
    "programmatic_tool_calling": ("type",),
    "apply_patch": ("type",),
    "shell": ("type",),
    **{
        t: ("type",)
        for t in (
            "file_search",
            "web_search_preview",
            "computer",
            "computer_use_preview",
            "computer_use",
            "web_search_preview_2025_03_11",
            "image_generation",
            "code_interpreter",
        )
    },
}
CHOICE_OPTIONS = ("none", "auto", "required")
NAMESPACE_SEPARATOR = "__"
CUSTOM_INPUT_KEY = "input"
# vLLM's custom_tool_parameters(): how a custom tool is shown to the model.
CUSTOM_PARAMETERS = {
    "type": "object",
    "properties": {
        CUSTOM_INPUT_KEY: {
            "type": "string",
            "description": "The freeform text payload for this tool.",
        }
    },
    "required": [CUSTOM_INPUT_KEY],
    "additionalProperties": False,
}
_NOT_FOUND = "Tool choice 'function' not found in 'tools' parameter."


# ---------------------------------------------------------------------------- model validators


def check_tool_usage(body: dict[str, Any]) -> None:
    """vLLM's ``check_tool_usage``: without tools, "auto" (the default) and
    "none" become "none" in the body (echoed so); a named choice is resolved
    to the flat ``<namespace>__<name>`` of a namespaced tool."""
    tools = body.get("tools")
    tool_choice = body.get("tool_choice", "auto")
    has_tools = tools is not None and _length(tools) > 0
    named = isinstance(tool_choice, dict) and tool_choice.get("type") in ("function", "custom")
    if not has_tools:
        if _is_option(tool_choice, ("auto", "none")):
            body["tool_choice"] = "none"
        elif _is_option(tool_choice, ("required",)):
            raise invalid(
                "Tool choice 'required' must be specified with 'tools' parameter.", "tool_choice"
            )
        elif named:
            raise invalid(_NOT_FOUND, "tool_choice")
    elif named and tools is not None:
        name = tool_choice.get("name")
        if not name:
            raise invalid(_NOT_FOUND, "tool_choice")
        resolved = _resolve_named(name, tools)
        if resolved != name:
            body["tool_choice"] = {**tool_choice, "name": resolved}


def _length(value: Any) -> int:
    try:
        return len(value)
    except TypeError:
        return 1


def _is_option(value: Any, options: tuple[str, ...]) -> bool:
    return isinstance(value, str) and value in options


def _resolve_named(name: Any, tools: Any) -> Any:
    """vLLM's ``_resolve_named_tool_choice``."""
    exact: set[str] = set()
    local: dict[str, list[str]] = {}
    for tool in tools if isinstance(tools, list) else ():
        if not isinstance(tool, dict):
            continue
        if tool.get("type") == "namespace":
            namespace, inner = tool.get("name"), tool.get("tools")
            if not isinstance(inner, list) or not isinstance(namespace, str):
                return name
            for item in inner:
                local_name = item.get("name") if isinstance(item, dict) else None
                if isinstance(local_name, str):
                    flat = f"{namespace}{NAMESPACE_SEPARATOR}{local_name}"
                    exact.add(flat)
                    local.setdefault(local_name, []).append(flat)
        elif isinstance(tool.get("name"), str):
            exact.add(tool["name"])
    if name in exact:
        return name
    candidates = local.get(name, []) if isinstance(name, str) else []
    if len(candidates) == 1:
        return candidates[0]
    if len(candidates) > 1:
        raise invalid(
            f"Tool choice '{name}' is ambiguous: it is defined in more than one namespace "
            f"({', '.join(candidates)}). Select it by its full '<namespace>__<name>' name.",
            "tool_choice",
        )
    raise invalid(_NOT_FOUND, "tool_choice")


def check_custom_tool_format(body: dict[str, Any]) -> None:
    """vLLM's ``check_custom_tool_format``: grammar-format custom tools are refused."""
    tools = body.get("tools")
    for tool in tools if isinstance(tools, list) else ():
        fmt = tool.get("format") if isinstance(tool, dict) else None
        if tool.get("type") == "custom" and isinstance(fmt, dict) and fmt.get("type") == "grammar":
            raise invalid(
                "Custom tools with a grammar format are not supported; only free-form "
                "text custom tools are accepted.",
                "tools",
            )


# ---------------------------------------------------------------------------- field validation


def echo_tools(tools: Any) -> list[dict[str, Any]]:
    """``tools`` validated (type known, required fields there) and dumped as
    vLLM echoes it: each type's fields in openai's order, nulls included."""
    if tools is None:
        return []
    if not isinstance(tools, list):
        raise validation_errors([field_error("list_type", ("body", "tools"), tools)])
    return [_echo_tool(tool, ("body", "tools", i)) for i, tool in enumerate(tools)]


def _echo_tool(tool: Any, loc: tuple, fields: dict | None = None) -> dict[str, Any]:
    table = fields or TOOL_FIELDS
    top = fields is None  # pydantic's loc names the union's first member
    if not isinstance(tool, dict):
        raise validation_errors([field_error("model_attributes_type", loc, tool)])
    kind = tool.get("type")
    order = table.get(kind) if isinstance(kind, str) else None
    if order is None:
        allowed = tuple(table)
        expected = ", ".join(f"'{t}'" for t in allowed[:-1]) + f" or '{allowed[-1]}'"
        at = (*loc, "FunctionTool", "type") if top else (*loc, "type")
        error = (
            field_error("missing", at, tool)
            if "type" not in tool
            else field_error("literal_error", at, kind, {"expected": expected})
        )
        raise validation_errors([error])
    for name in _REQUIRED.get(str(kind), ()):
        if name not in tool:
            raise validation_errors([field_error("missing", (*loc, name), tool)])
    for name in ("name", "description"):
        value = tool.get(name)
        if value is not None and not isinstance(value, str):
            raise validation_errors([field_error("string_type", (*loc, name), value)])
    for name in ("parameters", "output_schema"):
        value = tool.get(name)
        if value is not None and not isinstance(value, dict):
            raise validation_errors([field_error("dict_type", (*loc, name), value)])
    out = {name: copy.deepcopy(tool.get(name)) for name in order}
    if kind == "namespace":
        inner = tool.get("tools")
        if not isinstance(inner, list):
            raise validation_errors([field_error("list_type", (*loc, "tools"), inner)])
        nested = {"function": _NAMESPACED_FUNCTION, "custom": _CUSTOM}
        out["tools"] = [_echo_tool(t, (*loc, "tools", j), nested) for j, t in enumerate(inner)]
    return out


def echo_tool_choice(tool_choice: Any) -> Any:
    """``tool_choice`` validated and dumped (openai's ToolChoice union)."""
    if isinstance(tool_choice, str):
        if tool_choice not in CHOICE_OPTIONS:
            raise validation_errors(
                [
                    field_error(
                        "literal_error",
                        ("body", "tool_choice", "literal['none','auto','required']"),
                        tool_choice,
                        {"expected": "'none', 'auto' or 'required'"},
                    )
                ]
            )
        return tool_choice
    if not isinstance(tool_choice, dict) or tool_choice.get("type") not in CHOICE_FIELDS:
        raise validation_errors(
            [field_error("model_attributes_type", ("body", "tool_choice"), tool_choice)]
        )
    order = CHOICE_FIELDS[tool_choice["type"]]
    return {name: copy.deepcopy(tool_choice.get(name)) for name in order}


# ---------------------------------------------------------------------------- the chat view


def chat_tools(tools: list[dict[str, Any]]) -> list[dict[str, Any]] | None:
    """The function tools the model is shown (vLLM's get_function_tools), as
    chat tools; None when there are none."""
    out: list[dict[str, Any]] = []
    for tool in tools:
        kind = tool["type"]
        if kind == "function":
            out.append(_chat_function(tool["name"], tool))
        elif kind == "custom":
            out.append(
                _chat_function(
                    tool["name"],
                    {"description": tool.get("description"), "parameters": CUSTOM_PARAMETERS},
                )
            )
        elif kind == "namespace":
            out.extend(
                _chat_function(f"{tool['name']}{NAMESPACE_SEPARATOR}{inner['name']}", inner)
                for inner in tool["tools"]
                if inner["type"] == "function"
            )
    return out or None


def _chat_function(name: str, tool: dict[str, Any]) -> dict[str, Any]:
    function: dict[str, Any] = {
        "name": name,
        "description": tool.get("description"),
        "parameters": tool.get("parameters"),
    }
    for key in ("strict", "defer_loading"):
        if tool.get(key) is not None:
            function[key] = tool[key]
    return {"type": "function", "function": function}


def parser_tool_choice(tool_choice: Any) -> Any:
    """The tool_choice the output parser reads: chat's named shape for a named
    function or custom tool; other shapes (allowed_tools, hosted tools) are
    neither auto, required nor named, as for vLLM's parser."""
    if isinstance(tool_choice, dict) and tool_choice.get("type") in ("function", "custom"):
        return {"type": "function", "function": {"name": tool_choice.get("name")}}
    return tool_choice


def call_names(tools: list[dict[str, Any]]) -> dict[str, tuple[str, str | None]]:
    """Flat model-facing name -> (local name, namespace) for namespaced functions."""
    names: dict[str, tuple[str, str | None]] = {}
    for tool in tools:
        if tool["type"] == "namespace":
            for inner in tool["tools"]:
                if inner["type"] == "function":
                    flat = f"{tool['name']}{NAMESPACE_SEPARATOR}{inner['name']}"
                    names[flat] = (inner["name"], tool["name"])
    return names


def custom_names(tools: list[dict[str, Any]]) -> frozenset[str]:
    return frozenset(tool["name"] for tool in tools if tool["type"] == "custom")
