"""The MiniMax M3 output grammar: XML-style calls, every tag behind a namespace marker.

::

    ]<]minimax[>[<tool_call>
    ]<]minimax[>[<invoke name="create_order">
    ]<]minimax[>[<user_id>42]<]minimax[>[</user_id>
    ]<]minimax[>[<items>]<]minimax[>[<item>]<]minimax[>[<sku>b-1]<]minimax[>[</sku>]<]minimax[>[</item>]<]minimax[>[</items>
    ]<]minimax[>[</invoke>
    ]<]minimax[>[</tool_call>

Each ``<invoke>`` is one call; its parameters are elements named after the
argument, and nest: an element with child elements is an object, or an
array where its schema says so (the chat template writes list items as
``<item>``); a repeated name collects into a list.  Leaf text is typed by the
schema.  The arguments are sent once the ``<invoke>`` closes (the converted
values are not prefix-stable while elements arrive).  Text after the calls
is dropped.  Reasoning is the ``minimax_m3`` reasoning parser's (not a
grammar).  vLLM 0.32's ``vllm/parser/minimax_m3.py``.
"""

from __future__ import annotations

import functools
import json
from typing import Any

from frontend.parsers.arguments import coerce_to_types, find_tool_properties, schema_types
from frontend.parsers.grammar.machine import Ev, Grammar, State
from frontend.parsers.grammar.parser import GrammarParser
from frontend.parsers.tokenizer import ParserTokenizer

NAMESPACE = "]<]minimax[>["
ELEMENT_START = f"{NAMESPACE}<"
ELEMENT_END_START = f"{NAMESPACE}</"
MIXED_TEXT_FIELD = "$text"
MAX_ELEMENT_DEPTH = 128
_INVOKE_PREFIXES = ("INVOKE_PREFIX_DQ", "INVOKE_PREFIX_SQ", "INVOKE_PREFIX_UNQUOTED")
_NAME_ENDS = ("NAME_END_DQ", "NAME_END_SQ", "NAME_END_UNQUOTED")

# An element's value: its text, or its (name, value) children in order.
Element = str | list[tuple[str, "Element"]]


def _parse_element(text: str, pos: int, depth: int) -> tuple[str, Element, int] | None:
    """The element starting at ``pos``: (name, value, end); None if malformed."""
    if depth > MAX_ELEMENT_DEPTH:
        return None
    name_start = pos + len(ELEMENT_START)
    name_end = text.find(">", name_start)
    if name_end <= name_start:
        return None
    name = text[name_start:name_end]
    if name.startswith("/") or not name.strip():
        return None
    close_tag = f"{ELEMENT_END_START}{name}>"
    pos = name_end + 1
    text_parts: list[str] = []
    children: list[tuple[str, Element]] = []
    while True:
        marker = text.find(NAMESPACE, pos)
        if marker < 0:
            return None
        text_parts.append(text[pos:marker])
        if text.startswith(close_tag, marker):
            pos = marker + len(close_tag)
            break
        if not text.startswith(ELEMENT_START, marker):
            return None
        child = _parse_element(text, marker, depth + 1)
        if child is None:
            return None
        child_name, child_value, pos = child
        children.append((child_name, child_value))
    body = "".join(text_parts)
    if not children:
        return name, body, pos
    if body.strip():
        # Mixed text goes under a reserved field no child uses.
        field = MIXED_TEXT_FIELD
        while any(child_name == field for child_name, _ in children):
            field = "$" + field
        children.append((field, body))
    return name, children, pos


def parse_invoke_params(raw: str) -> list[tuple[str, Element]]:
    """An ``<invoke>`` body's parameter elements, up to the first malformed or
    unterminated one."""
    params: list[tuple[str, Element]] = []
    pos = 0
    while True:
        while pos < len(raw) and raw[pos].isspace():
            pos += 1
        if not raw.startswith(ELEMENT_START, pos):
            return params
        element = _parse_element(raw, pos, depth=1)
        if element is None:
            return params
        name, value, pos = element
        params.append((name, value))


def _container_schema(schema: dict[str, Any]) -> tuple[str, dict[str, Any]] | None:
    """The first ``array`` or ``object`` alternative of ``schema``."""
    types = schema.get("type")
    for kind in ("array", "object"):
        if types == kind or (isinstance(types, list) and kind in types):
            return kind, schema
    if types is None:
        if "items" in schema:
            return "array", schema
        if "properties" in schema or "additionalProperties" in schema:
            return "object", schema
    for choice_field in ("anyOf", "oneOf"):
        for choice in schema.get(choice_field) or ():
            if isinstance(choice, dict) and (found := _container_schema(choice)):
                return found
    return None


def _convert_element(value: Element, schema: Any) -> Any:
    if not isinstance(schema, dict):
        schema = None
    container = _container_schema(schema) if schema is not None else None
    if isinstance(value, str):
        if schema is None:
            return value
        types = schema_types(schema)
        # The template writes an empty list or dict as an empty element.
        if container is not None and "string" not in types and not value.strip():
            return [] if container[0] == "array" else {}
        return coerce_to_types(value, types)
    if container is not None and container[0] == "array":
        items = container[1].get("items")
        return [_convert_element(child, items) for _, child in value]
    return _convert_object(value, container[1] if container is not None else None)


def _convert_object(
    elements: list[tuple[str, Element]], schema: dict[str, Any] | None
) -> dict[str, Any]:
    """Named elements -> an object; a repeated name collects into a list."""
    properties = (schema or {}).get("properties") or {}
    additional = (schema or {}).get("additionalProperties")
    result: dict[str, Any] = {}
    repeated: set[str] = set()
    for name, element in elements:
        converted = _convert_element(element, properties.get(name, additional))
        if name not in result:
            result[name] = converted
        elif name in repeated:
            result[name].append(converted)
        else:
            result[name] = [result[name], converted]
            repeated.add(name)
    return result


def minimax_m3_arguments(raw: str, partial: bool, properties: dict | None = None) -> str:
    """An ``<invoke>`` body -> its arguments' JSON text, typed by ``properties``."""
    arguments = _convert_object(parse_invoke_params(raw), {"properties": properties or {}})
    return json.dumps(arguments, ensure_ascii=False)


@functools.cache
def minimax_m3_grammar() -> Grammar:
    S = State
    return Grammar(
        name="minimax_m3",
        terminals={
            "TOOL_START": f"{NAMESPACE}<tool_call>",
            "TOOL_END": f"{NAMESPACE}</tool_call>",
            "INVOKE_PREFIX_DQ": f'{NAMESPACE}<invoke name="',
            "INVOKE_PREFIX_SQ": f"{NAMESPACE}<invoke name='",
            "INVOKE_PREFIX_UNQUOTED": f"{NAMESPACE}<invoke name=",
            "INVOKE_END": f"{NAMESPACE}</invoke>",
            "NAME_END_DQ": '">',
            "NAME_END_SQ": "'>",
            "NAME_END_UNQUOTED": ">",
        },
        id_terminals={},
        transitions={
            (S.CONTENT, "TOOL_START"): (S.TOOL_PREAMBLE, ()),
            **{
                (state, prefix): (S.TOOL_NAME, (Ev.TOOL_START,))
                for state in (S.TOOL_PREAMBLE, S.TOOL_BETWEEN)
                for prefix in _INVOKE_PREFIXES
            },
            **{(S.TOOL_NAME, end): (S.TOOL_ARGS, ()) for end in _NAME_ENDS},
            # Nested parameter elements are argument text; only </invoke> ends the call.
            (S.TOOL_ARGS, "INVOKE_END"): (S.TOOL_BETWEEN, (Ev.TOOL_END,)),
            # The tool block ends the message: text after it is dropped.
            (S.TOOL_PREAMBLE, "TOOL_END"): (S.TOOL_BETWEEN, ()),
            (S.TOOL_BETWEEN, "TOOL_END"): (S.TOOL_BETWEEN, ()),
        },
        arg_converter=minimax_m3_arguments,
        stream_arg_deltas=False,
        args_json=False,
        strip_content_ws_with_tools=False,
    )


class MinimaxM3Parser(GrammarParser):
    def __init__(
        self,
        tokenizer: ParserTokenizer,
        tools: list[dict] | None = None,
        tool_choice: object = None,
    ) -> None:
        super().__init__(minimax_m3_grammar(), tokenizer, tools, tool_choice)

    def _convert_args(self, raw: str, partial: bool) -> str:
        name = next((s.name for s in self._slots if s.args == raw), "")
        properties = find_tool_properties(self._tools, name.strip())
        return minimax_m3_arguments(raw, partial, properties)
