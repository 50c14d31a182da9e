"""The MiniMax M2 output grammar: ``<think>`` reasoning and XML tool calls.

::

    <minimax:tool_call><invoke name="get_weather">
    <parameter name="city">Seattle</parameter>
    </invoke></minimax:tool_call>

Each ``<invoke>`` is one call (its name double-, single- or unquoted); the
``<parameter name="...">`` values are raw text, made JSON strings, then the
tool schema's types.  A call whose name is not one of the request's tools
is dropped.  vLLM 0.32's ``vllm/parser/minimax_m2.py``.
"""

from __future__ import annotations

import functools
import json
import re

from frontend.parsers.grammar.machine import Ev, Grammar, State
from frontend.parsers.grammar.parser import GrammarParser
from frontend.parsers.tokenizer import ParserTokenizer
from frontend.parsers.types import tool_function

TOOL_START = "<minimax:tool_call>"
TOOL_END = "</minimax:tool_call>"
THINK_START = "<think>"
THINK_END = "</think>"

_NAME = r"(?:\"(?P<dq_name>[^\"]*)\"|'(?P<sq_name>[^']*)'|(?P<bare_name>[^>\s]+))"
_PARAM_RE = re.compile(
    r"<\s*parameter\s+name\s*=\s*" + _NAME + r"\s*>(?P<value>.*?)"
    r"(?:<\s*/\s*parameter\s*>|(?=<\s*parameter\s+name\s*=))",
    re.DOTALL,
)
_PARTIAL_PARAM_RE = re.compile(
    r"<\s*parameter\s+name\s*=\s*" + _NAME + r"\s*>(?P<value>.*)$", re.DOTALL
)


def _param_name(m: re.Match[str]) -> str:
    return (m.group("dq_name") or m.group("sq_name") or m.group("bare_name") or "").strip()


def parameters_to_json(raw: str, partial: bool) -> str:
    """``<parameter name="k">v</parameter>...`` -> ``{"k": "v", ...}``."""
    params: dict[str, object] = {}
    for m in _PARAM_RE.finditer(raw):
        name = _param_name(m)
        if name:
            params[name] = m.group("value")
    if partial:
        last = _PARTIAL_PARAM_RE.search(_PARAM_RE.sub("", raw))
        if last and _param_name(last):
            params[_param_name(last)] = last.group("value")
    return json.dumps(params, ensure_ascii=False)


_INVOKES = ("INVOKE_PREFIX_DQ", "INVOKE_PREFIX_SQ", "INVOKE_PREFIX_UNQUOTED")
_NAME_ENDS = ("NAME_END_DQ", "NAME_END_SQ", "NAME_END_UNQUOTED")


@functools.cache
def minimax_m2_grammar() -> Grammar:
    S = State
    transitions: dict = {
        (S.REASONING, "THINK_START"): (S.REASONING, ()),
        (S.REASONING, "THINK_END"): (S.CONTENT, (Ev.REASONING_END,)),
        (S.CONTENT, "THINK_END"): (S.CONTENT, ()),
        (S.REASONING, "TOOL_START"): (S.TOOL_PREAMBLE, (Ev.REASONING_END,)),
        (S.CONTENT, "TOOL_START"): (S.TOOL_PREAMBLE, ()),
        # Parameter tags are part of the raw argument text.
        (S.TOOL_ARGS, "PARAM_START"): (S.TOOL_ARGS, (Ev.ARGS,)),
        (S.TOOL_ARGS, "PARAM_END"): (S.TOOL_ARGS, (Ev.ARGS,)),
        (S.TOOL_PREAMBLE, "TOOL_END"): (S.CONTENT, ()),
        (S.TOOL_BETWEEN, "TOOL_END"): (S.CONTENT, ()),
        (S.CONTENT, "TOOL_END"): (S.CONTENT, ()),
        (S.TOOL_ARGS, "INVOKE_END"): (S.TOOL_BETWEEN, (Ev.TOOL_END,)),
    }
    for state in (S.CONTENT, S.TOOL_PREAMBLE, S.TOOL_BETWEEN):
        for terminal in _INVOKES:
            transitions[(state, terminal)] = (S.TOOL_NAME, (Ev.TOOL_START,))
    for terminal in _NAME_ENDS:
        transitions[(S.TOOL_NAME, terminal)] = (S.TOOL_ARGS, ())
    return Grammar(
        name="minimax_m2",
        terminals={
            "THINK_START": THINK_START,
            "THINK_END": THINK_END,
            "TOOL_START": TOOL_START,
            "PARAM_START": "<parameter name=",
            "PARAM_END": "</parameter>",
            "TOOL_END": TOOL_END,
            "INVOKE_PREFIX_DQ": '<invoke name="',
            "INVOKE_PREFIX_SQ": "<invoke name='",
            "INVOKE_PREFIX_UNQUOTED": "<invoke name=",
            "INVOKE_END": "</invoke>",
            "NAME_END_DQ": '">',
            "NAME_END_SQ": "'>",
            "NAME_END_UNQUOTED": ">",
        },
        id_terminals={
            "THINK_START": THINK_START,
            "THINK_END": THINK_END,
            "TOOL_START": TOOL_START,
            "TOOL_END": TOOL_END,
        },
        transitions=transitions,
        initial_state=S.REASONING,
        wait_for_reasoning=True,
        arg_converter=parameters_to_json,
        args_json=False,
    )


class MinimaxM2Parser(GrammarParser):
    def __init__(
        self,
        tokenizer: ParserTokenizer,
        tools: list[dict] | None = None,
        tool_choice: object = None,
    ) -> None:
        super().__init__(minimax_m2_grammar(), tokenizer, tools, tool_choice)
        self._tool_names = {tool_function(t).get("name") for t in tools or ()}

    def _accept_tool_name(self, name: str) -> bool:
        # vLLM's validate_tool_names: with tools given, only their names.
        return bool(name) and (not self._tools or name in self._tool_names)

    def extract_content_ids(self, token_ids: list[int]) -> list[int]:
        if self._end_id is None:
            return []
        for i in range(len(token_ids) - 1, -1, -1):
            if token_ids[i] == self._end_id:
                return token_ids[i + 1 :]
        return []
