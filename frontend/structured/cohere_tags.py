"""Cohere Command's structural tags (vLLM 0.32's ``CohereCommandParser``).

For Cohere2 architectures vLLM folds a request's tools and JSON schema into
one ``triggered_tags`` structural tag: the JSON schema inside
``<|START_RESPONSE|>`` (and ``<|START_TEXT|>`` for the MoE and vision
models), the tool calls inside ``<|START_ACTION|>``.  vLLM writes the tool
calls' content as xgrammar EBNF (``Grammar.from_json_schema`` of each tool,
which needs xgrammar, hence torch); here it is the JSON schema of the same
language, which the engine's xgrammar compiles alike: a non-empty array of
``{tool_call_id, tool_name, parameters}`` objects, one ``anyOf`` branch per
tool.  Differences: vLLM's grammar also allows whitespace before ``[`` and
after ``]``, and a tool's ``$defs`` are hoisted to the array, renamed.
"""

from __future__ import annotations

import json
from typing import Any

_ACTION = ("<|START_ACTION|>", "<|END_ACTION|>")
_RESPONSE = ("<|START_RESPONSE|>", "<|END_RESPONSE|>")
_TEXT = ("<|START_TEXT|>", "<|END_TEXT|>")

# vLLM's MODEL_TO_TAG_STYLE: the JSON wrappers per architecture (tools: _ACTION).
JSON_TAGS: dict[str, tuple[tuple[str, str], ...]] = {
    "Cohere2ForCausalLM": (_RESPONSE,),
    "Cohere2VisionForConditionalGeneration": (_RESPONSE, _TEXT),
    "Cohere2MoeForCausalLM": (_RESPONSE, _TEXT),
}


def cohere_structural_tag(
    architecture: str, response_format: Any, structured_outputs: dict | None, tools: Any
) -> str | None:
    """The ``structured_outputs.structural_tag`` vLLM sets, or None where it
    leaves the request's constraint as it is.  Raises ValueError (vLLM's) for
    an architecture without Cohere tags."""
    so = structured_outputs or {}
    rf_type = response_format.get("type") if isinstance(response_format, dict) else None
    if so.get("structural_tag") or rf_type == "structural_tag":
        return None
    schema = _response_format_schema(response_format, rf_type)
    if schema is None:
        schema = _structured_outputs_schema(so)
    if schema is None and not tools:
        return None
    if architecture not in JSON_TAGS:
        raise ValueError(
            "Failed to build structural_tag guided decoding constraints from "
            "this request's JSON schema and/or tools. The configured model "
            f"architecture ({architecture!r}) does not support Cohere "
            "command structural tags, or the schema cannot be expressed in "
            "that format."
        )
    tags = []
    if schema is not None:
        tags += [
            _tag(pair, {"type": "json_schema", "json_schema": schema})
            for pair in JSON_TAGS[architecture]
        ]
    if tools:
        tags.append(_tag(_ACTION, {"type": "json_schema", "json_schema": tool_calls_schema(tools)}))
    return json.dumps(
        {
            "type": "structural_tag",
            "format": {
                "type": "triggered_tags",
                "triggers": [tag["begin"] for tag in tags],
                "tags": tags,
            },
        }
    )


def _tag(pair: tuple[str, str], content: dict) -> dict:
    return {"begin": pair[0], "content": content, "end": pair[1]}


def tool_calls_schema(tools: list[dict]) -> dict:
    """vLLM's ``collect_tool_schema`` language as one JSON schema."""
    branches, defs = [], {}
    for tool in tools:
        function: dict = (tool.get("function") or {}) if tool.get("type") == "function" else tool
        name = function["name"]
        params = function.get("parameters")
        params = dict(params) if isinstance(params, dict) else {}
        for key in ("$defs", "definitions"):
            for def_name, definition in (params.pop(key, None) or {}).items():
                defs[f"{name}.{def_name}"] = _renamed_refs(definition, name)
        branches.append(
            {
                "type": "object",
                "properties": {
                    "tool_call_id": {"type": "string", "pattern": "^[0-9]+$"},
                    "tool_name": {"type": "string", "const": name},
                    "parameters": _renamed_refs(params, name),
                },
            }
        )
    schema: dict[str, Any] = {"type": "array", "minItems": 1, "items": {"anyOf": branches}}
    if defs:
        schema["$defs"] = defs
    return schema


def _renamed_refs(value: Any, tool: str) -> Any:
    """``#/$defs/X`` (or ``#/definitions/X``) of a tool as ``#/$defs/tool.X``."""
    if isinstance(value, list):
        return [_renamed_refs(item, tool) for item in value]
    if not isinstance(value, dict):
        return value
    out = {k: _renamed_refs(v, tool) for k, v in value.items()}
    ref = value.get("$ref")
    if isinstance(ref, str):
        for prefix in ("#/$defs/", "#/definitions/"):
            if ref.startswith(prefix):
                out["$ref"] = f"#/$defs/{tool}.{ref[len(prefix) :]}"
    return out


def _response_format_schema(response_format: Any, rf_type: str | None) -> dict | None:
    if rf_type == "json_object":
        return {"type": "object"}
    if rf_type != "json_schema":
        return None
    field = response_format.get("json_schema")
    return _unwrapped(field.get("schema")) if isinstance(field, dict) else None


def _structured_outputs_schema(so: dict) -> dict | None:
    if so.get("json_object"):
        return {"type": "object"}
    body = so.get("json")
    if isinstance(body, str):
        body = json.loads(body)
    if not isinstance(body, dict):
        return None
    for key in ("schema", "json_schema"):
        schema = _unwrapped(body.get(key))
        if schema is not None:
            return schema or body
    return body


def _unwrapped(candidate: Any) -> dict | None:
    """vLLM's ``_unwrap_nested_schema``: a dict (or its JSON text), or the
    dict its own ``schema`` key holds."""
    if isinstance(candidate, str):
        try:
            candidate = json.loads(candidate)
        except json.JSONDecodeError:
            return None
    if not isinstance(candidate, dict):
        return None
    nested = candidate.get("schema")
    return nested if isinstance(nested, dict) else candidate
