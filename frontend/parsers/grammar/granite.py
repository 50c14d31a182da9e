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

from frontend.parsers.grammar.json_member import member_arguments
from frontend.parsers.grammar.machine import Grammar, State
from frontend.parsers.grammar.parser import GrammarParser
from frontend.parsers.tokenizer import ParserTokenizer

TOOL_TOKEN = "<|tool_call|>"
TOOL_STRING = "<tool_call>"


def granite_arguments(raw: str, partial: bool) -> str:
    """An element's ``arguments`` object (``{}`` when it has none)."""
    return member_arguments(raw, "arguments", partial)


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
