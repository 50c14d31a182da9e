"""What vLLM's ``adjust_request`` changes in a chat request, for given parsers.

vLLM runs it (after rendering the prompt) when a parser is configured and the
request has a reasoning parser to serve or ``tool_choice != "none"``.  It may

* turn ``skip_special_tokens`` off, so marker tokens stay in the text;
* replace the structured output constraint (and ``response_format``) with a
  JSON schema forcing the tool call, for "required"/named tool choice;
* or, for parsers with a structural tag model (hermes, llama3_json,
  qwen3_coder), constrain tool calls with an xgrammar structural tag instead:
  for "required"/named choice, for "auto" when a tool has ``strict: true``,
  and when ``parallel_tool_calls`` is false.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from frontend.parsers.composite import named_tool
from frontend.parsers.reasoning.base import ReasoningParser
from frontend.parsers.schema import json_schema_from_tools
from frontend.parsers.structural_tag import structural_tag_json
from frontend.parsers.tool.base import ToolParser


@dataclass(slots=True)
class RequestAdjustment:
    # False: decode with skip_special_tokens=False whatever the request says.
    skip_special_tokens: bool | None = None
    # Set as the request's structured output (json), clearing response_format.
    json_schema: dict | None = None
    # Set as the request's structured output (structural_tag, JSON text),
    # clearing response_format.
    structural_tag: str | None = None
    # The tag's format.  Set with ``structural_tag`` None: vLLM would join the
    # tag with the request's own structured output ("auto" with
    # response_format/structured_outputs), which is not reproduced here.
    structural_tag_model: str | None = None


def adjust_request(tool_parser: type[ToolParser] | None,
                   reasoning_parser: type[ReasoningParser] | None, *,
                   tools: list[dict] | None, tool_choice: Any,
                   parallel_tool_calls: bool | None = True,
                   has_structured_outputs: bool = False,
                   response_format_type: str | None = None,
                   structured_outputs_tag: bool = False) -> RequestAdjustment:
    """The adjustment vLLM 0.32 makes (``VLLM_ENFORCE_STRICT_TOOL_CALLING=1``,
    ``--tool-strict-level auto``).

    ``has_structured_outputs``: the request sets ``structured_outputs``
    (vLLM's extension), ``structured_outputs_tag``: as a structural tag;
    ``response_format_type``: its ``response_format.type``.
    Raises :class:`~frontend.parsers.schema.ToolSchemaError` (a 400) for
    tools whose schema cannot be built.
    """
    out = RequestAdjustment()
    if tool_parser is None and reasoning_parser is None:
        return out
    if reasoning_parser is None and tool_choice == "none":
        return out  # vLLM does not call adjust_request then
    named = named_tool(tool_choice) is not None
    forced = named or tool_choice == "required"
    # Mistral's parsers force "required"/named as a bare JSON array (unless
    # the request brings its own constraint).
    mistral_schema = (tools and forced and not has_structured_outputs
                      and response_format_type in (None, "text", "json_object", "json_schema"))

    if reasoning_parser is not None:
        if reasoning_parser.keeps_special_tokens:
            out.skip_special_tokens = False
        if reasoning_parser.mistral_guided_schema and mistral_schema:
            out.json_schema = mistral_array_schema(tools, tool_choice)
    if tool_parser is None:
        return out

    if tools and tool_parser.structural_tag_model is not None and (forced or tool_choice == "auto"):
        auto = tool_choice == "auto"
        any_strict = any(isinstance(t.get("function"), dict)
                         and t["function"].get("strict") is True for t in tools)
        single_call = parallel_tool_calls is False and not (
            auto and (has_structured_outputs or response_format_type not in (None, "text")))
        if not auto or any_strict or single_call:
            out.structural_tag_model = tool_parser.structural_tag_model
            out.json_schema = None  # the tag replaces any structured output
            if not (auto and (has_structured_outputs
                              or response_format_type not in (None, "text"))):
                out.structural_tag = structural_tag_json(
                    tool_parser.structural_tag_model, tools, tool_choice, parallel_tool_calls)

    if tool_parser.mistral_guided_schema:
        if mistral_schema and out.json_schema is None:
            out.json_schema = mistral_array_schema(tools, tool_choice)
    elif (tools and out.structural_tag_model is None and not structured_outputs_tag
          and tool_parser.supports_required_and_named):
        schema = json_schema_from_tools(tool_choice, tools, parallel_tool_calls)
        if schema is not None:
            out.json_schema = schema
    keep = tool_parser.keeps_special_tokens
    if keep == "always" or (keep == "with_tools" and tools and tool_choice != "none"):
        out.skip_special_tokens = False
    return out


def mistral_array_schema(tools: list[dict], tool_choice: Any) -> dict | None:
    """vLLM's schema for Mistral "required"/named choice in Hugging Face
    tokenizer mode: a bare ``[{"name", "arguments"}]`` array."""
    name = named_tool(tool_choice)
    chosen = [t for t in tools if name is None or (t.get("function") or {}).get("name") == name]
    if not chosen:
        return None  # vLLM logs a warning and adds no schema
    extra = {"maxItems": 1} if name is not None else {}
    any_of = [{
        "type": "object",
        "properties": {
            "name": {"type": "string", "enum": [t["function"]["name"]]},
            "arguments": t["function"].get("parameters") or {"type": "object"},
        },
        "required": ["name", "arguments"],
    } for t in chosen]
    return {"type": "array", "minItems": 1, **extra, "items": {"type": "object", "anyOf": any_of}}
