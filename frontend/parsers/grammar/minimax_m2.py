"""The MiniMax-M2 output grammar: reasoning up to ``</think>`` (the template
opens it) and ``<minimax:tool_call>`` blocks of ``<invoke>`` calls.

::

    ...reasoning...</think>
    <minimax:tool_call>
    <invoke name="get_weather">
    <parameter name="city">Paris</parameter>
    </invoke>
    </minimax:tool_call>

Used by the ``minimax_m2`` reasoning parser.
"""

from __future__ import annotations

import functools
import json
import re

from frontend.parsers.grammar.machine import Ev, Grammar, State
from frontend.parsers.grammar.parser import GrammarParser
from frontend.parsers.tokenizer import ParserTokenizer

THINK_END = "</think>"
_NAME = r"(?:\"(?P<dq_name>[^\"]*)\"|'(?P<sq_name>[^']*)'|(?P<bare_name>[^>\s]+))"
_PARAM_RE = re.compile(
    r"<\s*parameter\s+name\s*=\s*" + _NAME + r"\s*>(?P<value>.*?)"
    r"(?:<\s*/\s*parameter\s*>|(?=<\s*parameter\s+name\s*=))",
    re.DOTALL,
)
_OPEN_PARAM_RE = re.compile(
    r"<\s*parameter\s+name\s*=\s*" + _NAME + r"\s*>(?P<value>.*)$", re.DOTALL
)


def _name(match: re.Match[str]) -> str:
    return (
        match.group("dq_name") or match.group("sq_name") or match.group("bare_name") or ""
    ).strip()


def parameters_to_json(raw: str, partial: bool) -> str:
    """``<parameter name="k">v</parameter>...`` -> ``{"k": "v"}`` (values verbatim)."""
    params: dict[str, object] = {}
    for m in _PARAM_RE.finditer(raw):
        if _name(m):
            params[_name(m)] = m.group("value")
    if partial:
        last = _OPEN_PARAM_RE.search(_PARAM_RE.sub("", raw))
        if last and _name(last):
            params[_name(last)] = last.group("value")
    return json.dumps(params, ensure_ascii=False)


@functools.cache
def minimax_m2_grammar() -> Grammar:
    S = State
    invoke = ("INVOKE_PREFIX_DQ", "INVOKE_PREFIX_SQ", "INVOKE_PREFIX_UNQUOTED")
    return Grammar(
        name="minimax_m2",
        terminals={
            "THINK_START": "<think>",
            "THINK_END": THINK_END,
            "TOOL_START": "<minimax:tool_call>",
            "PARAM_START": "<parameter name=",
            "PARAM_END": "</parameter>",
            "TOOL_END": "</minimax:tool_call>",
            "INVOKE_PREFIX_DQ": '<invoke name="',
            "INVOKE_PREFIX_SQ": "<invoke name='",
            "INVOKE_PREFIX_UNQUOTED": "<invoke name=",
            "INVOKE_END": "</invoke>",
            "NAME_END_DQ": '">',
            "NAME_END_SQ": "'>",
            "NAME_END_UNQUOTED": ">",
        },
        id_terminals={
            "THINK_START": "<think>",
            "THINK_END": THINK_END,
            "TOOL_START": "<minimax:tool_call>",
            "TOOL_END": "</minimax:tool_call>",
        },
        transitions={
            (S.REASONING, "THINK_START"): (S.REASONING, ()),
            (S.REASONING, "THINK_END"): (S.CONTENT, (Ev.REASONING_END,)),
            (S.CONTENT, "THINK_END"): (S.CONTENT, ()),
            (S.REASONING, "TOOL_START"): (S.TOOL_PREAMBLE, (Ev.REASONING_END,)),
            (S.CONTENT, "TOOL_START"): (S.TOOL_PREAMBLE, ()),
            (S.TOOL_ARGS, "PARAM_START"): (S.TOOL_ARGS, (Ev.ARGS,)),
            (S.TOOL_ARGS, "PARAM_END"): (S.TOOL_ARGS, (Ev.ARGS,)),
            (S.TOOL_PREAMBLE, "TOOL_END"): (S.CONTENT, ()),
            (S.TOOL_BETWEEN, "TOOL_END"): (S.CONTENT, ()),
            (S.CONTENT, "TOOL_END"): (S.CONTENT, ()),
            (S.TOOL_ARGS, "INVOKE_END"): (S.TOOL_BETWEEN, (Ev.TOOL_END,)),
            **{
                (state, terminal): (S.TOOL_NAME, (Ev.TOOL_START,))
                for state in (S.CONTENT, S.TOOL_PREAMBLE, S.TOOL_BETWEEN)
                for terminal in invoke
            },
            **{
                (S.TOOL_NAME, terminal): (S.TOOL_ARGS, ())
                for terminal in ("NAME_END_DQ", "NAME_END_SQ", "NAME_END_UNQUOTED")
            },
        },
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
        chat_template_kwargs: dict | None = None,
    ) -> None:
        super().__init__(minimax_m2_grammar(), tokenizer, tools, tool_choice)
        self._think_end_id = tokenizer.vocab.get(THINK_END)

    def extract_content_ids(self, token_ids: list[int]) -> list[int]:
        """After the last ``</think>``; none without one."""
        if self._think_end_id is None or self._think_end_id not in token_ids:
            return []
        at = len(token_ids) - 1 - token_ids[::-1].index(self._think_end_id)
        return token_ids[at + 1 :]
