"""The Granite 3.0/3.1 output grammar: a JSON array of calls after a marker.

::

    <|tool_call|>[{"name": "get_weather", "arguments": {"city": "SF"}}]   (3.0: a special token)
    <tool_call>[{"name": "get_weather", "arguments": {"city": "SF"}}]     (3.1: text)

Each element of the array is one call (its name read from the element, its
arguments the ``arguments`` object's text); the array's ``]`` ends the calls
and any text around them is content.  No reasoning.  vLLM 0.32's
``vllm/parser/granite.py``.
"""

from __future__ import annotations

import functools

from frontend.parsers.grammar.machine import Grammar, State
from frontend.parsers.grammar.parser import GrammarParser
from frontend.parsers.tokenizer import ParserTokenizer

TOOL_TOKEN = "<|tool_call|>"
TOOL_STRING = "<tool_call>"
_JSON_WS = " \t\r\n"


def _object_end(raw: str, start: int) -> int | None:
    """The end (exclusive) of the JSON object at ``raw[start]``, None while unterminated."""
    depth, in_string, escape = 0, False, False
    for i in range(start, len(raw)):
        ch = raw[i]
        if escape:
            escape = False
        elif in_string:
            if ch == "\\":
                escape = True
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
        elif ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
            if depth == 0:
                return i + 1
    return None


def member_object(raw: str, key: str) -> str | None:
    """The verbatim text of the top-level member ``key``'s object value in a
    (possibly incomplete) JSON object, possibly unterminated; None before the
    value starts.  Verbatim, so that it only grows as the text does."""
    depth, in_string, escape = 0, False, False
    string_start, last_string = -1, None
    for i, ch in enumerate(raw):
        if escape:
            escape = False
            continue
        if in_string:
            if ch == "\\":
                escape = True
            elif ch == '"':
                in_string = False
                if depth == 1:
                    last_string = raw[string_start + 1 : i]
            continue
        if ch == '"':
            in_string = True
            string_start = i
        elif ch == ":" and depth == 1 and last_string == key:
            start = i + 1
            while start < len(raw) and raw[start] in _JSON_WS:
                start += 1
            if start >= len(raw):
                return None
            if raw[start] != "{":
                raise ValueError(f"member {key!r} must be a JSON object")
            end = _object_end(raw, start)
            return raw[start:] if end is None else raw[start:end]
        elif ch in "{[":
            depth += 1
        elif ch in "}]":
            depth -= 1
    return None


def granite_arguments(raw: str, partial: bool) -> str:
    """An element's ``arguments`` object (``{}`` when it has none)."""
    span = member_object(raw, "arguments")
    if span is None:
        return "" if partial else "{}"
    return span


@functools.cache
def granite_grammar() -> Grammar:
    S = State
    return Grammar(
        name="granite",
        terminals={"TOOL_TOKEN": TOOL_TOKEN, "TOOL_STRING": TOOL_STRING},
        id_terminals={"TOOL_TOKEN": TOOL_TOKEN},
        # The marker only opens the array; each element starts its own call.
        transitions={
            (S.CONTENT, "TOOL_TOKEN"): (S.TOOL_ARGS, ()),
            (S.CONTENT, "TOOL_STRING"): (S.TOOL_ARGS, ()),
        },
        arg_converter=granite_arguments,
        tool_call_body_array=True,
    )


class GraniteParser(GrammarParser):
    def __init__(
        self,
        tokenizer: ParserTokenizer,
        tools: list[dict] | None = None,
        tool_choice: object = None,
    ) -> None:
        super().__init__(granite_grammar(), tokenizer, tools, tool_choice)
