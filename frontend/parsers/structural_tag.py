"""Structural tags that constrain tool calls to a parser's own syntax.

For parsers with a structural tag model, vLLM 0.32 does not force
"required"/named tool choice with a plain JSON schema: it sends the engine an
xgrammar structural tag that allows exactly the parser's call syntax (and,
for "auto", text with calls triggered by the call prefix).  These builders
give the same JSON as vLLM (``json.dumps(tag.model_dump())``) for the
``hermes`` (vLLM's own), ``llama`` and ``qwen_3_coder`` (xgrammar builtin)
formats.  Only the function tools' own ``strict`` pins argument schemas
(``--tool-strict-level auto``); others are constrained to any JSON object.
"""

from __future__ import annotations

import json
from typing import Any

THINK_TOKENS = ["<think>", "</think>"]


def _schema(tool: dict, style: str) -> dict:
    function = tool.get("function") or {}
    strict = function.get("strict") is True
    params = function.get("parameters")
    return {"type": "json_schema",
            "json_schema": params if strict and params is not None else True,
            "style": style, "any_order": False, "max_whitespace_cnt": None, "excludes": []}


def _tag(begin: str, content: dict, end: str) -> dict:
    return {"type": "tag", "begin": begin, "content": content, "end": end}


def _triggered(triggers: list[str], tags: list[dict], at_least_one: bool,
               excludes: list[str]) -> dict:
    return {"type": "triggered_tags", "triggers": triggers, "tags": tags,
            "at_least_one": at_least_one, "stop_after_first": False, "excludes": excludes}


def _separated(tags: list[dict], stop_after_first: bool) -> dict:
    return {"type": "tags_with_separator", "tags": tags, "separator": "",
            "at_least_one": True, "stop_after_first": stop_after_first}


def _hermes(tools: list[dict], choice: str) -> dict:
    start, end = "<tool_call>", "</tool_call>"
    tags = [_tag(begin + tool["function"]["name"] + '", "arguments": ', _schema(tool, "json"),
                 close)
            for tool in tools
            for begin, close in ((start + '\n{"name": "', "}\n" + end),
                                 (start + '{"name": "', "}" + end))]
    if choice == "auto":
        return _triggered([start], tags, False, [])
    return _separated(tags, stop_after_first=choice == "forced")


def _prefixed(tools: list[dict], choice: str, *, prefix: str, suffix: str, end: str,
              trigger: str, style: str) -> dict:
    """llama and qwen_3_coder: one tag per tool, triggered by the call prefix."""
    tags = [_tag(prefix + tool["function"]["name"] + suffix, _schema(tool, style), end)
            for tool in tools]
    if choice == "forced":
        return tags[0]
    return _triggered([trigger], tags, choice == "required", list(THINK_TOKENS))


def _llama(tools: list[dict], choice: str) -> dict:
    return _prefixed(tools, choice, prefix='{"name": "', suffix='", "parameters": ', end="}",
                     trigger='{"name": ', style="json")


def _qwen3_coder(tools: list[dict], choice: str) -> dict:
    return _prefixed(tools, choice, prefix="<tool_call>\n<function=", suffix=">\n",
                     end="\n</function>\n</tool_call>", trigger="<tool_call>\n<function=",
                     style="qwen_xml")


BUILDERS = {"hermes": _hermes, "llama": _llama, "qwen_3_coder": _qwen3_coder}


def structural_tag(model: str, tools: list[dict], tool_choice: Any,
                   parallel_tool_calls: bool | None = True) -> dict:
    """The structural tag vLLM sends for these tools and tool choice."""
    name = None
    if isinstance(tool_choice, dict):
        name = (tool_choice.get("function") or {}).get("name")
    if name is not None:
        tools, choice = [t for t in tools if t["function"]["name"] == name], "forced"
        if len(tools) != 1:
            raise ValueError("Forced tool choice must resolve to exactly one tool.")
    else:
        choice = "required" if tool_choice == "required" else "auto"
    tag = BUILDERS[model](tools, choice)
    if parallel_tool_calls is False and tag["type"] in ("triggered_tags", "tags_with_separator"):
        tag["stop_after_first"] = True
    return {"type": "structural_tag", "format": tag}


def structural_tag_json(model: str, tools: list[dict], tool_choice: Any,
                        parallel_tool_calls: bool | None = True) -> str:
    """As vLLM puts it in ``structured_outputs.structural_tag``."""
    return json.dumps(structural_tag(model, tools, tool_choice, parallel_tool_calls))


def output_format(kind: str, spec: Any) -> dict | None:
    """A request's own constraint as an xgrammar format (vLLM's
    ``structured_outputs_to_format``; ``grammar`` is EBNF); None for a
    structural tag, which this frontend does not rebuild."""
    if kind == "json_object":
        return _json_format({"type": "object"})
    if kind == "json":
        return _json_format(json.loads(spec) if isinstance(spec, str) else spec)
    if kind == "regex":
        return {"type": "regex", "pattern": spec}
    if kind == "choice":
        return {"type": "or",
                "elements": [{"type": "const_string", "value": value} for value in spec]}
    if kind == "grammar":
        return {"type": "grammar", "grammar": spec}
    return None


def _json_format(schema: Any) -> dict:
    return {"type": "json_schema", "json_schema": schema, "style": "json", "any_order": False,
            "max_whitespace_cnt": None, "excludes": []}


def tools_or_output(model: str, tools: list[dict], parallel_tool_calls: bool | None,
                    output: dict) -> str:
    """tool_choice="auto" with strict tools and the request's own constraint:
    vLLM allows either a tool call (its "required" tag) or the constrained
    output, as ``structured_outputs.structural_tag`` text."""
    calls = structural_tag(model, tools, "required", parallel_tool_calls)["format"]
    return json.dumps({"type": "structural_tag",
                       "format": {"type": "or", "elements": [calls, output]}})
