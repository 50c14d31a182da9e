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

:func:`adjust_chat_request` applies it to a chat request's constraint.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, cast

from frontend.errors import ApiError, invalid
from frontend.parsers.reasoning.base import ReasoningParser
from frontend.parsers.tool.base import ToolParser
from frontend.parsers.types import named_tool, tool_function
from frontend.structured.cohere_tags import cohere_structural_tag
from frontend.structured.request import Constraints
from frontend.structured.rules import grammar_is_likely_lark
from frontend.structured.structural_tag import output_format, structural_tag_json, tools_or_output
from frontend.structured.tool_schema import (
    ToolSchemaError,
    json_schema_from_tools,
    mistral_array_schema,
)
from frontend.structured.xgrammar_compat import xgrammar_error
from protocol.structured import CONSTRAINTS


@dataclass(slots=True)
class RequestAdjustment:
    # False: decode with skip_special_tokens=False whatever the request says.
    skip_special_tokens: bool | None = None
    # False: detokenize without spaces between special tokens (markers made
    # of several special tokens arrive as contiguous text).
    spaces_between_special_tokens: bool | None = None
    # Set as the request's structured output (json), clearing response_format.
    json_schema: dict | None = None
    # Set as the request's structured output (structural_tag, JSON text),
    # clearing response_format.
    structural_tag: str | None = None
    # The tag's format.  Set with ``structural_tag`` None: vLLM joins the tag
    # with the request's own structured output ("auto" with
    # response_format/structured_outputs; see adjust_chat_request).
    structural_tag_model: str | None = None
    # The tools as the tag constrains them (--tool-strict-level parameter pins
    # every tool's arguments, as if it were strict).
    tag_tools: list[dict] | None = None


# --tool-strict-level (vLLM's ToolStrictLevel): the server's floor for tool-call
# structural tags. auto: from tool_choice and each tool's own ``strict``;
# function: every request with tools gets the call envelope; parameter: and
# every tool's arguments, as if ``strict: true``.
STRICT_LEVELS = {"auto": 0, "function": 1, "parameter": 2}


def adjust_request(
    tool_parser: type[ToolParser] | None,
    reasoning_parser: type[ReasoningParser] | None,
    *,
    tools: list[dict] | None,
    tool_choice: Any,
    parallel_tool_calls: bool | None = True,
    has_structured_outputs: bool = False,
    response_format_type: str | None = None,
    structured_outputs_tag: bool = False,
    strict_level: str = "auto",
    token_suffix: str = "",
) -> RequestAdjustment:
    """The adjustment vLLM 0.32 makes (``VLLM_ENFORCE_STRICT_TOOL_CALLING=1``)
    under ``--tool-strict-level`` ``strict_level``.

    ``has_structured_outputs``: the request sets ``structured_outputs``
    (vLLM's extension), ``structured_outputs_tag``: as a structural tag;
    ``response_format_type``: its ``response_format.type``; ``token_suffix``:
    the tool parser's ``structural_tag_suffix``.
    Raises :class:`~frontend.structured.tool_schema.ToolSchemaError` (a 400) for
    tools whose schema cannot be built.
    """
    out = RequestAdjustment()
    if tool_parser is None and reasoning_parser is None:
        return out
    always = tool_parser is not None and tool_parser.always_adjust_request
    if reasoning_parser is None and tool_choice == "none" and not always:
        return out  # vLLM does not call adjust_request then
    if tool_parser is not None and tool_parser.refuses_tool_guarantees:
        _refuse_tool_guarantees(tools, tool_choice, parallel_tool_calls)
    named = named_tool(tool_choice) is not None
    forced = named or tool_choice == "required"
    # Mistral's parsers force "required"/named as a bare JSON array (unless
    # the request brings its own constraint).
    mistral_schema = (
        tools
        and forced
        and not has_structured_outputs
        and response_format_type in (None, "text", "json_object", "json_schema")
    )

    if reasoning_parser is not None:
        if reasoning_parser.keeps_special_tokens:
            out.skip_special_tokens = False
        if reasoning_parser.joins_special_tokens:
            out.spaces_between_special_tokens = False
        if reasoning_parser.mistral_guided_schema and mistral_schema:
            out.json_schema = mistral_array_schema(cast("list[dict]", tools), tool_choice)
    if tool_parser is None:
        return out

    if tools and tool_parser.structural_tag_model is not None and (forced or tool_choice == "auto"):
        auto = tool_choice == "auto"
        any_strict = any(
            isinstance(t.get("function"), dict) and t["function"].get("strict") is True
            for t in tools
        )
        own_output = has_structured_outputs or response_format_type not in (None, "text")
        level = STRICT_LEVELS[strict_level]
        if level == 0 and tool_parser.default_tool_strict_level is not None:
            level = STRICT_LEVELS[tool_parser.default_tool_strict_level]
        if parallel_tool_calls is False and not (auto and own_output):
            level = max(level, 1)  # limiting the calls needs their envelope in the tag
        # A parser may constrain only forced calls (auto then gets no tag).
        tagged = not auto or own_output or tool_parser.structural_tag_for_auto
        if tagged and (not auto or any_strict or level > 0):
            out.structural_tag_model = tool_parser.structural_tag_model
            out.json_schema = None  # the tag replaces any structured output
            out.tag_tools = tools if level < 2 else [_pinned(t) for t in tools]
            if not (auto and own_output):
                out.structural_tag = structural_tag_json(
                    tool_parser.structural_tag_model,
                    out.tag_tools,
                    tool_choice,
                    parallel_tool_calls,
                    token_suffix,
                )

    if tool_parser.mistral_guided_schema:
        if mistral_schema and out.json_schema is None:
            out.json_schema = mistral_array_schema(cast("list[dict]", tools), tool_choice)
    elif (
        tools
        and out.structural_tag_model is None
        and not structured_outputs_tag
        and tool_parser.supports_required_and_named
    ):
        schema = json_schema_from_tools(tool_choice, tools, parallel_tool_calls)
        if schema is not None:
            out.json_schema = schema
    keep = tool_parser.keeps_special_tokens
    if keep == "always" or (keep == "with_tools" and tools and tool_choice != "none"):
        out.skip_special_tokens = False
    if tool_parser.joins_special_tokens:
        out.spaces_between_special_tokens = False
    return out


def _refuse_tool_guarantees(
    tools: list[dict] | None, tool_choice: Any, parallel_tool_calls: bool | None
) -> None:
    """vLLM's hf parser: a 400 for a guarantee no grammar of its format enforces."""
    if not tools or tool_choice == "none":
        return
    if any(t.get("strict") or tool_function(t).get("strict") for t in tools):
        guarantee, param = "strict tools", "tools"
    elif tool_choice == "required":
        guarantee, param = "required tool choice", "tool_choice"
    elif named_tool(tool_choice) is not None:
        guarantee, param = "named tool choice", "tool_choice"
    elif parallel_tool_calls is False:
        guarantee, param = "parallel_tool_calls=False", "parallel_tool_calls"
    else:
        return
    raise ToolSchemaError(
        f"response_template parsing cannot guarantee {guarantee} "
        "without a format-compatible structural grammar",
        param,
    )


def _pinned(tool: dict) -> dict:
    """The tool with ``strict: true`` (a copy: the request's tools stay as sent)."""
    if not isinstance(tool.get("function"), dict):
        return tool
    return {**tool, "function": {**tool["function"], "strict": True}}


def adjust_chat_request(
    tool_parser: type[ToolParser] | None,
    reasoning_parser: type[ReasoningParser] | None,
    *,
    tools: list[dict] | None,
    tool_choice: Any,
    parallel_tool_calls: bool | None,
    response_format: Any,
    structured_outputs: Any,
    constraints: Constraints,
    strict_level: str = "auto",
    token_suffix: str = "",
    architecture: str = "",
) -> tuple[Constraints, bool | None, bool | None]:
    """:func:`adjust_request` for a chat request: its grammar constraint after
    the adjustment, and the ``skip_special_tokens`` and
    ``spaces_between_special_tokens`` it forces (None: the request's own).
    Raises ApiError (400) where vLLM refuses the tools.  ``architecture``: the
    model's (vLLM's ``ModelConfig.architecture``), for Cohere's tags."""
    so_fields = constraints.structured_outputs or {}
    rf_type = response_format.get("type") if isinstance(response_format, dict) else None
    try:
        adjustment = adjust_request(
            tool_parser,
            reasoning_parser,
            tools=tools,
            tool_choice=tool_choice,
            parallel_tool_calls=parallel_tool_calls,
            has_structured_outputs=structured_outputs is not None,
            response_format_type=rf_type,
            structured_outputs_tag=so_fields.get("structural_tag") is not None,
            strict_level=strict_level,
            token_suffix=token_suffix,
        )
    except ToolSchemaError as e:
        raise invalid(str(e), e.param) from None
    cohere_tag = None
    cohere = any(
        p is not None and p.cohere_structural_tags for p in (tool_parser, reasoning_parser)
    )
    if cohere and (reasoning_parser is not None or tool_choice != "none"):  # adjust_request runs
        try:
            cohere_tag = cohere_structural_tag(architecture, response_format, so_fields, tools)
        except ValueError as e:
            raise ApiError(str(e), 400) from None
    if cohere_tag is not None:
        constraints = Constraints({"structural_tag": cohere_tag}, None)
    elif adjustment.structural_tag is not None:
        constraints = Constraints({"structural_tag": adjustment.structural_tag}, None)
    elif adjustment.structural_tag_model is not None:
        constraints = _tools_or_output(
            adjustment.structural_tag_model,
            adjustment.tag_tools or [],
            parallel_tool_calls,
            constraints,
            token_suffix,
        )
    elif adjustment.json_schema is not None:
        constraints = Constraints({"json": adjustment.json_schema}, None)
    return (
        constraints,
        adjustment.skip_special_tokens,
        adjustment.spaces_between_special_tokens,
    )


def _tools_or_output(
    model: str,
    tools: list[dict],
    parallel_tool_calls: bool | None,
    constraints: Constraints,
    token_suffix: str = "",
) -> Constraints:
    """ "auto" with strict tools and the request's own constraint: vLLM lets the
    model either call a tool or write the constrained output, when xgrammar
    can compile that constraint (else the constraint alone applies)."""
    values = {**(constraints.structured_outputs or {}), **(constraints.override or {})}
    kind = next((k for k in CONSTRAINTS if values.get(k) is not None), None)
    if kind is None:
        return constraints  # no constraint after all: resolve() reports it
    spec = values[kind]
    if spec and xgrammar_error(kind, spec) is not None:
        return constraints
    lark = kind == "grammar" and grammar_is_likely_lark(spec)
    output = None if lark else output_format(kind, spec)
    if output is None:  # vLLM converts these with xgrammar, which needs torch
        what = "Lark grammar" if lark else kind
        raise ApiError(
            f'tool_choice="auto" with `strict` tools and a {what} constraint at '
            "once is not supported by this frontend; drop `strict`, or use a "
            "JSON schema, regex, choice or EBNF grammar",
            param="tools",
        )
    return Constraints(
        {
            "structural_tag": tools_or_output(
                model, tools, parallel_tool_calls, output, token_suffix
            )
        },
        None,
    )
