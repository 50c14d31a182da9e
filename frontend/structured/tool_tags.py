"""Tool calls' structural tags: one builder per ``structural_tag_model``.

A tool parser's ``structural_tag_model`` names a key of :data:`BUILDERS`:
``builder(tools, choice)`` -> the tag's ``format`` as vLLM 0.32 dumps it
(xgrammar's builtin templates, or those vLLM registers), key order
included; ``choice`` is "auto", "required" or "forced" (a named tool, the
only one in ``tools``).  :func:`frontend.structured.structural_tag.structural_tag`
selects the tools and applies ``parallel_tool_calls``.  Only the function
tools' own ``strict`` pins argument schemas (``--tool-strict-level auto``);
others are constrained to any JSON object.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

THINK_TOKENS = ["<think>", "</think>"]


def _schema(tool: dict, style: str) -> dict:
    function = tool.get("function") or {}
    strict = function.get("strict") is True
    params = function.get("parameters")
    return {
        "type": "json_schema",
        "json_schema": params if strict and params is not None else True,
        "style": style,
        "any_order": False,
        "max_whitespace_cnt": None,
        "excludes": [],
    }


def _json_schema(schema: Any) -> dict:
    return {
        "type": "json_schema",
        "json_schema": schema,
        "style": "json",
        "any_order": False,
        "max_whitespace_cnt": None,
        "excludes": [],
    }


def _tag(begin: str, content: dict, end: str) -> dict:
    return {"type": "tag", "begin": begin, "content": content, "end": end}


def _triggered(
    triggers: list[str], tags: list[dict], at_least_one: bool, excludes: list[str]
) -> dict:
    return {
        "type": "triggered_tags",
        "triggers": triggers,
        "tags": tags,
        "at_least_one": at_least_one,
        "stop_after_first": False,
        "excludes": excludes,
    }


def _separated(tags: list[dict], stop_after_first: bool) -> dict:
    return {
        "type": "tags_with_separator",
        "tags": tags,
        "separator": "",
        "at_least_one": True,
        "stop_after_first": stop_after_first,
    }


def _hermes(tools: list[dict], choice: str) -> dict:
    return _hermes_style(tools, choice, "<tool_call>", "</tool_call>")


def _longcat(tools: list[dict], choice: str) -> dict:
    return _hermes_style(tools, choice, "<longcat_tool_call>", "</longcat_tool_call>")


def _hermes_style(tools: list[dict], choice: str, start: str, end: str) -> dict:
    tags = [
        _tag(begin + tool["function"]["name"] + '", "arguments": ', _schema(tool, "json"), close)
        for tool in tools
        for begin, close in (
            (start + '\n{"name": "', "}\n" + end),
            (start + '{"name": "', "}" + end),
        )
    ]
    if choice == "auto":
        return _triggered([start], tags, False, [])
    return _separated(tags, stop_after_first=choice == "forced")


def _prefixed(
    tools: list[dict],
    choice: str,
    *,
    prefix: str,
    suffix: str,
    end: str,
    trigger: str,
    style: str,
    excludes: tuple[str, ...] = tuple(THINK_TOKENS),
) -> dict:
    """llama, qwen_3_coder, mimo: one tag per tool, triggered by the call prefix."""
    tags = [
        _tag(prefix + tool["function"]["name"] + suffix, _schema(tool, style), end)
        for tool in tools
    ]
    if choice == "forced":
        return tags[0]
    return _triggered([trigger], tags, choice == "required", list(excludes))


def _mimo(tools: list[dict], choice: str) -> dict:
    return _prefixed(
        tools,
        choice,
        prefix="<tool_call><function=",
        suffix=">",
        end="</function></tool_call>",
        trigger="<tool_call>",
        style="qwen_xml",
        excludes=(*THINK_TOKENS, "</tool_call>", "<function="),
    )


def _llama(tools: list[dict], choice: str) -> dict:
    return _prefixed(
        tools,
        choice,
        prefix='{"name": "',
        suffix='", "parameters": ',
        end="}",
        trigger='{"name": ',
        style="json",
    )


def _qwen3_coder(tools: list[dict], choice: str) -> dict:
    return _prefixed(
        tools,
        choice,
        prefix="<tool_call>\n<function=",
        suffix=">\n",
        end="\n</function>\n</tool_call>",
        trigger="<tool_call>\n<function=",
        style="qwen_xml",
    )


_DS_CALLS = ("<｜tool▁calls▁begin｜>", "<｜tool▁calls▁end｜>")
_DS_CALL = ("<｜tool▁call▁begin｜>", "<｜tool▁call▁end｜>")
_DS_SEP = "<｜tool▁sep｜>"


def _deepseek(tools: list[dict], choice: str, begin: str, end: str, separator: str) -> dict:
    """deepseek_r1 and deepseek_v3_1 (xgrammar's builtins): the calls inside
    the calls markers; ``begin`` has ``{name}``."""
    tags = [
        _tag(
            _DS_CALL[0] + begin.format(name=tool["function"]["name"]),
            _schema(tool, "json"),
            end + _DS_CALL[1],
        )
        for tool in tools
    ]
    if choice == "forced":
        tag = tags[0]
        return _tag(_DS_CALLS[0] + tag["begin"], tag["content"], tag["end"] + _DS_CALLS[1])
    calls = _tag(
        _DS_CALLS[0],
        {
            "type": "tags_with_separator",
            "tags": tags,
            "separator": separator,
            "at_least_one": True,
            "stop_after_first": False,
        },
        _DS_CALLS[1],
    )
    if choice == "required":
        return calls
    return _triggered([_DS_CALLS[0]], [calls], False, list(THINK_TOKENS))


def _deepseek_r1(tools: list[dict], choice: str) -> dict:
    return _deepseek(tools, choice, "function" + _DS_SEP + "{name}\n```json\n", "\n```", "\n")


def _deepseek_v3_1(tools: list[dict], choice: str) -> dict:
    return _deepseek(tools, choice, "{name}" + _DS_SEP, "", "")


_KIMI_SECTION = ("<|tool_calls_section_begin|>", "<|tool_calls_section_end|>")
_KIMI_CALL = "<|tool_call_begin|>"


def _kimi(tools: list[dict], choice: str) -> dict:
    """xgrammar's kimi: ``functions.NAME:N`` headers in the calls section."""
    tags = [
        _tag(
            _KIMI_CALL + "functions." + tool["function"]["name"] + ":",
            {
                "type": "sequence",
                "elements": [
                    {"type": "regex", "pattern": "\\d+"},
                    {"type": "const_string", "value": "<|tool_call_argument_begin|>"},
                    _schema(tool, "json"),
                ],
            },
            "<|tool_call_end|>",
        )
        for tool in tools
    ]
    calls: dict = {
        "type": "tags_with_separator",
        "tags": tags,
        "separator": "",
        "at_least_one": True,
        "stop_after_first": False,
    }
    if choice == "auto":
        section = _tag(_KIMI_SECTION[0], calls, _KIMI_SECTION[1])
        return _triggered([_KIMI_SECTION[0]], [section], False, [*THINK_TOKENS, _KIMI_CALL])
    return {
        "type": "sequence",
        "elements": [
            {"type": "const_string", "value": _KIMI_SECTION[0]},
            tags[0] if choice == "forced" else calls,
            {"type": "const_string", "value": _KIMI_SECTION[1]},
        ],
    }


def _invoke_blocks(
    tools: list[dict], choice: str, *, invoke: str, end: str, style: str, block: tuple[str, str]
) -> dict:
    """minimax and deepseek_v3_2: ``<invoke name="NAME">`` calls in one block;
    ``block`` is (its begin, its end), the trigger its begin without the newline."""
    tags = [
        _tag(invoke + tool["function"]["name"] + '">\n', _schema(tool, style), end)
        for tool in tools
    ]
    calls = _separated(tags, stop_after_first=choice == "forced")
    if choice == "auto":
        wrapped = _tag(block[0], calls, block[1])
        return _triggered([block[0].rstrip("\n")], [wrapped], False, list(THINK_TOKENS))
    return {"type": "sequence", "elements": [calls, {"type": "const_string", "value": block[1]}]}


def _minimax(tools: list[dict], choice: str) -> dict:
    """vLLM's minimax."""
    tag = _invoke_blocks(
        tools,
        choice,
        invoke='<invoke name="',
        end="</invoke>\n",
        style="minimax_xml",
        block=("<minimax:tool_call>\n", "</minimax:tool_call>"),
    )
    if choice != "auto":
        tag["elements"].insert(0, {"type": "const_string", "value": "\n<minimax:tool_call>\n"})
    return tag


def _dsml(tools: list[dict], choice: str, *, calls: str, invoke: str, style: str) -> dict:
    """xgrammar's DSML formats (DeepSeek V3.2, V4, V4.1); a forced call is its
    tag alone."""
    begin = f"<｜DSML｜{calls}>\n"
    tag = _invoke_blocks(
        tools,
        choice,
        invoke=f'<｜DSML｜{invoke} name="',
        end=f"</｜DSML｜{invoke}>\n",
        style=style,
        block=(begin, f"</｜DSML｜{calls}>"),
    )
    if choice != "auto":
        if choice == "forced":
            tag["elements"][0] = tag["elements"][0]["tags"][0]
        tag["elements"].insert(0, {"type": "const_string", "value": "\n\n" + begin})
    return tag


def _deepseek_v3_2(tools: list[dict], choice: str) -> dict:
    return _dsml(tools, choice, calls="function_calls", invoke="invoke", style="deepseek_xml")


def _deepseek_v4(tools: list[dict], choice: str) -> dict:
    return _dsml(tools, choice, calls="tool_calls", invoke="invoke", style="deepseek_xml")


def _deepseek_v4_1(tools: list[dict], choice: str) -> dict:
    return _dsml(tools, choice, calls=" calls", invoke=" invoke", style="deepseek_v4_1_xml")


_GLM_CONTROL = [
    "<think>",
    "</think>",
    "<tool_call>",
    "</tool_call>",
    "<arg_key>",
    "</arg_key>",
    "<arg_value>",
    "</arg_value>",
]
# Free text may start a call: the trigger is not excluded.
_GLM_TEXT = [t for t in _GLM_CONTROL if t != "<tool_call>"]


def _glm_any_text() -> dict:
    return {
        "type": "any_text",
        "excludes": list(_GLM_CONTROL),
        "max_tokens": None,
        "max_chars": None,
    }


def _glm_or(formats: list[dict]) -> dict:
    return formats[0] if len(formats) == 1 else {"type": "or", "elements": formats}


def _glm_value(prop: dict) -> dict:
    """One argument value's format: the enum, else its basic JSON type(s)."""
    if "enum" in prop:
        return _glm_or(
            [
                {"type": "const_string", "value": v if isinstance(v, str) else json.dumps(v)}
                for v in prop["enum"]
            ]
        )
    kind = prop.get("type")
    if isinstance(kind, list):
        formats = [_glm_value({"type": t}) for t in kind if t != "string"]
        if "string" in kind:
            formats.append(_glm_any_text())
        return _glm_or(formats)
    if kind in (None, "string"):
        return _glm_any_text()
    return {
        "type": "json_schema",
        "json_schema": {"type": kind},
        "style": "json",
        "any_order": False,
        "max_whitespace_cnt": None,
        "excludes": [],
    }


def _glm_shallow(tool: dict) -> dict:
    """A non-strict tool: its keys and their values' basic types."""
    function = tool["function"]
    params = function.get("parameters") or {}
    properties = params.get("properties")
    begin, end = "<tool_call>" + function["name"], "</tool_call>"
    if (
        not isinstance(properties, dict)
        or not properties
        or params.get("additionalProperties") is True
        or any(k in params for k in ("$ref", "allOf", "anyOf", "oneOf", "patternProperties"))
    ):
        return _tag(begin, {**_schema(tool, "glm_xml"), "json_schema": True}, end)
    pairs = [
        {
            "type": "sequence",
            "elements": [
                {"type": "const_string", "value": f"<arg_key>{key}</arg_key><arg_value>"},
                _glm_value(prop),
                {"type": "const_string", "value": "</arg_value>"},
            ],
        }
        for key, prop in properties.items()
    ]
    return _tag(begin, {"type": "star", "content": _glm_or(pairs)}, end)


def _glm_4_7(tools: list[dict], choice: str) -> dict:
    """vLLM's glm_4_7: xgrammar's builtin when every tool is strict, else
    shallow tags for the non-strict ones."""
    strict = [(tool.get("function") or {}).get("strict") is True for tool in tools]
    if tools and all(strict):
        tags = [
            _tag("<tool_call>" + t["function"]["name"], _schema(t, "glm_xml"), "</tool_call>")
            for t in tools
        ]
        if choice == "forced":
            return tags[0]
        return _triggered(["<tool_call>"], tags, choice == "required", list(_GLM_TEXT))
    tags = [
        _tag("<tool_call>" + t["function"]["name"], _schema(t, "glm_xml"), "</tool_call>")
        if is_strict
        else _glm_shallow(t)
        for t, is_strict in zip(tools, strict)
    ]
    if choice == "auto":
        return _triggered(["<tool_call>"], tags, False, list(_GLM_TEXT))
    return _separated(tags, stop_after_first=choice == "forced")


_PLAMO = "<|plamo:{}:plamo|>".format


def _plamo3(tools: list[dict], choice: str) -> dict:
    """vLLM's plamo3: the tool requests block, each request's name and JSON arguments."""
    requests = [
        _tag(
            _PLAMO("begin_tool_request")
            + _PLAMO("begin_tool_name")
            + tool["function"]["name"]
            + _PLAMO("end_tool_name")
            + _PLAMO("begin_tool_arguments")
            + "<|plamo:constrain|>json<|plamo:msg|>",
            _schema(tool, "json"),
            _PLAMO("end_tool_arguments") + _PLAMO("end_tool_request"),
        )
        for tool in tools
    ]
    end = _PLAMO("end_tool_requests")
    block = {
        **_tag(
            _PLAMO("begin_tool_requests"),
            _separated(requests, stop_after_first=choice == "forced"),
            "",
        ),
        "end": [end, end + "<|plamo:tag|>"],
    }
    if choice == "auto":
        return _triggered([_PLAMO("begin_tool_requests")], [block], False, [])
    return block


def _hy_v4(tools: list[dict], choice: str, token_suffix: str = "") -> dict:
    """vLLM's hy_v4: each call's name and argument keys (the required ones in
    order, then any optional ones), values free text; the markers carry the
    checkpoint's suffix."""

    def marker(name: str) -> str:
        return f"<{name}{token_suffix}>"

    def const(value: str) -> dict:
        return {"type": "const_string", "value": value}

    def any_text() -> dict:
        return {"type": "any_text", "excludes": [], "max_tokens": None, "max_chars": None}

    def pair(key: str) -> dict:
        return {
            "type": "sequence",
            "elements": [
                const(marker("arg_key")),
                const(key),
                const(marker("/arg_key")),
                const(marker("arg_value")),
                any_text(),
                const(marker("/arg_value")),
            ],
        }

    def call(tool: dict) -> dict:
        function = tool["function"]
        params = function.get("parameters")
        params = params if isinstance(params, dict) else {}
        properties = params.get("properties") or {}
        required = params.get("required") or []
        keys = [k for k in properties if k in set(required)]
        keys += [k for k in required if k not in properties]
        optional = [pair(k) for k in properties if k not in set(required)]
        elements = [pair(k) for k in keys]
        if optional:
            content = optional[0] if len(optional) == 1 else {"type": "or", "elements": optional}
            elements.append({"type": "star", "content": content})
        body = {"type": "sequence", "elements": elements} if elements else any_text()
        return _tag(marker("tool_call") + function["name"], body, marker("/tool_call"))

    calls = _separated([call(t) for t in tools], stop_after_first=choice == "forced")
    if choice == "auto":
        block = _tag(marker("tool_calls"), calls, marker("/tool_calls"))
        return _triggered([marker("tool_calls")], [block], False, [])
    return {
        "type": "sequence",
        "elements": [const(marker("tool_calls")), calls, const(marker("/tool_calls"))],
    }


K3_OPEN, K3_CLOSE, K3_SEP = "<|open|>", "<|close|>", "<|sep|>"
K3_ARG_CLOSE = f"{K3_CLOSE}argument{K3_SEP}"
# JSON schema type -> the XTML type= value (integer is a number there).
_K3_TYPES = {
    "string": "string",
    "integer": "number",
    "number": "number",
    "boolean": "boolean",
    "null": "null",
    "object": "object",
    "array": "array",
}
# One raw string character: anything but the "<|" that begins a marker.
_K3_STRING_ATOM = r"(?:[^<]|<[^|])"


def _k3_attr(value: str) -> str:
    return str(value).replace("&", "&amp;").replace('"', "&quot;")


def _k3_any_text(excludes: list[str]) -> dict:
    return {"type": "any_text", "excludes": excludes, "max_tokens": None, "max_chars": None}


def _k3_string_value(prop: dict) -> dict:
    """A raw string value: its enum/const, else its length bound, else any text."""
    values = prop.get("enum")
    if values is None and isinstance(prop.get("const"), str):
        values = [prop["const"]]
    if (
        isinstance(values, list)
        and values
        and len(values) <= 256
        and all(isinstance(v, str) for v in values)
        and not any("<|" in v for v in values)
    ):
        return _glm_or([{"type": "const_string", "value": v} for v in values])
    max_len, min_len = prop.get("maxLength"), prop.get("minLength", 0)
    if isinstance(max_len, int) and 0 <= max_len <= 4096:
        if not isinstance(min_len, int) or min_len < 0 or min_len > max_len:
            min_len = 0
        return {"type": "regex", "pattern": _K3_STRING_ATOM + f"{{{min_len},{max_len}}}"}
    return _k3_any_text([K3_CLOSE])


def _k3_argument(key: str, prop: Any, defs: dict) -> dict:
    """One ``argument`` tag; any attributes and a raw value for an untyped property."""
    prop = prop if isinstance(prop, dict) else {}
    kind = prop.get("type")
    xtml = _K3_TYPES.get(kind) if isinstance(kind, str) else None
    if xtml is None:
        return _tag(
            K3_OPEN + "argument ",
            {
                "type": "sequence",
                "elements": [
                    {"type": "regex", "pattern": r"[^<]*<\|sep\|>"},
                    _k3_any_text([K3_CLOSE]),
                ],
            },
            K3_ARG_CLOSE,
        )
    begin = f'{K3_OPEN}argument key="{_k3_attr(key)}" type="{xtml}"{K3_SEP}'
    if xtml == "string":
        return _tag(begin, _k3_string_value(prop), K3_ARG_CLOSE)
    # The root's $defs go along: the property's references point there.
    embedded = {**prop, **{k: v for k, v in defs.items() if k not in prop}}
    return _tag(begin, _json_schema(embedded), K3_ARG_CLOSE)


def _k3_call(tool: dict) -> dict:
    function = tool["function"]
    params = function.get("parameters") if function.get("strict") is True else None
    props = params.get("properties") if isinstance(params, dict) else None
    if not isinstance(params, dict) or not isinstance(props, dict) or not props:
        arguments = {"type": "star", "content": _k3_argument("", None, {})}
    else:
        defs = {k: params[k] for k in ("$defs", "definitions") if isinstance(params.get(k), dict)}
        inner = _glm_or([_k3_argument(key, prop, defs) for key, prop in props.items()])
        required = params.get("required")
        plus = isinstance(required, list) and required
        arguments = {"type": "plus" if plus else "star", "content": inner}
    return _tag(
        f'{K3_OPEN}call tool="{_k3_attr(function["name"])}" index="',
        {
            "type": "sequence",
            "elements": [
                {"type": "regex", "pattern": "[0-9]+"},
                {"type": "const_string", "value": f'"{K3_SEP}'},
                arguments,
            ],
        },
        f"{K3_CLOSE}call{K3_SEP}",
    )


def _kimi_k3(tools: list[dict], choice: str) -> dict:
    """vLLM's kimi_k3: the response channel (its opener optional), then the
    tools channel (optional for "auto"), then an optional message closer."""
    response = [
        {
            "type": "optional",
            "content": {"type": "const_string", "value": f"{K3_OPEN}response{K3_SEP}"},
        },
        _tag(
            "", _k3_any_text([K3_OPEN, K3_CLOSE, "<|end_of_msg|>"]), f"{K3_CLOSE}response{K3_SEP}"
        ),
    ]
    trailer = {
        "type": "optional",
        "content": {"type": "const_string", "value": f"{K3_CLOSE}message{K3_SEP}"},
    }
    if not tools:
        return {"type": "sequence", "elements": [*response, trailer]}
    channel = _tag(
        f"{K3_OPEN}tools{K3_SEP}",
        {
            "type": "tags_with_separator",
            "tags": [_k3_call(t) for t in (tools[:1] if choice == "forced" else tools)],
            "separator": "",
            "at_least_one": True,
            "stop_after_first": False,
        },
        f"{K3_CLOSE}tools{K3_SEP}",
    )
    if choice == "auto":
        channel = {"type": "optional", "content": channel}
    return {"type": "sequence", "elements": [*response, channel, trailer]}


# A tool parser's ``structural_tag_model`` -> the builder of its tags.
BUILDERS: dict[str, Callable[..., dict]] = {
    "deepseek_r1": _deepseek_r1,
    "deepseek_v3_1": _deepseek_v3_1,
    "deepseek_v3_2": _deepseek_v3_2,
    "deepseek_v4": _deepseek_v4,
    "deepseek_v4_1": _deepseek_v4_1,
    "glm_4_7": _glm_4_7,
    "hermes": _hermes,
    "hy_v4": _hy_v4,
    "kimi": _kimi,
    "kimi_k3": _kimi_k3,
    "llama": _llama,
    "longcat": _longcat,
    "mimo": _mimo,
    "minimax": _minimax,
    "plamo3": _plamo3,
    "qwen_3_coder": _qwen3_coder,
}

# Formats that repeat tool calls: parallel_tool_calls=false stops each after
# its first call (vLLM's limit_to_single_tool_call, at any depth).
_CALL_LISTS = ("triggered_tags", "token_triggered_tags", "tags_with_separator")


def single_call(node: Any) -> None:
    """Stop every call list in ``node`` after its first call, in place."""
    if isinstance(node, dict):
        if node.get("type") in _CALL_LISTS:
            node["stop_after_first"] = True
        for value in node.values():
            single_call(value)
    elif isinstance(node, list):
        for item in node:
            single_call(item)
