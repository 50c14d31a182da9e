"""The DeepSeek V4 / V4.1 output grammar: ``<think>`` reasoning and DSML tool
calls.

::

    <think>...</think>
    <｜DSML｜tool_calls>
    <｜DSML｜invoke name="get_weather">
    <｜DSML｜parameter name="city" string="true">Paris</｜DSML｜parameter>
    </｜DSML｜invoke>
    </｜DSML｜tool_calls>

V4.1 spells the DSML tags with a space (``<｜DSML｜ calls>``, ...).  Reasoning
is on unless ``thinking``/``enable_thinking`` is given false, or
``reasoning_effort`` is ``"none"``; a ``<think>`` in content opens it, a tool
block ends it.  Arguments are DeepSeek V3.2's DSML parameters
(:mod:`frontend.parsers.grammar.deepseek_v32`), in each version's spelling.
vLLM 0.32's ``vllm/parser/deepseek_v4.py`` and ``deepseek_v41.py``.
"""

from __future__ import annotations

import functools

from frontend.parsers.grammar.deepseek_v32 import (
    PARAM_RES,
    DsmlArgumentsParser,
    dsml_arguments,
    param_patterns,
)
from frontend.parsers.grammar.machine import Ev, Grammar, State
from frontend.parsers.tokenizer import ParserTokenizer

_DSML = "｜DSML｜"
V4_TAGS: dict[str, str | tuple[str, ...]] = {
    "TOOL_START": (f"<{_DSML}tool_calls>", f"<{_DSML}toolcalls>", f"<{_DSML}tool>"),
    "TOOL_END": f"</{_DSML}tool_calls>",
    "INVOKE_PREFIX": f'<{_DSML}invoke name="',
    "INVOKE_END": f"</{_DSML}invoke>",
    "PARAM_START": f"<{_DSML}parameter",
    "PARAM_CLOSE": f"</{_DSML}parameter>",
}
V41_TAGS: dict[str, str | tuple[str, ...]] = {
    "TOOL_START": f"<{_DSML} calls>",
    "TOOL_END": f"</{_DSML} calls>",
    "INVOKE_PREFIX": f'<{_DSML} invoke name="',
    "INVOKE_END": f"</{_DSML} invoke>",
    "PARAM_START": f"<{_DSML} parameter",
    "PARAM_CLOSE": f"</{_DSML} parameter>",
}

_V41_PARAM_RES = param_patterns(f"<{_DSML} parameter", f"</{_DSML} parameter>")


def _first(spelled: str | tuple[str, ...]) -> str:
    return spelled if isinstance(spelled, str) else spelled[0]


@functools.cache
def deepseek_v4_grammar(thinking: bool, v41: bool = False) -> Grammar:
    S = State
    tags = V41_TAGS if v41 else V4_TAGS
    return Grammar(
        name="deepseek_v41" if v41 else "deepseek_v4",
        terminals={
            "THINK_START": "<think>",
            "THINK_END": "</think>",
            **tags,
            "INVOKE_NAME_END": '">',
        },
        id_terminals={
            "THINK_START": "<think>",
            "THINK_END": "</think>",
            "TOOL_START": _first(tags["TOOL_START"]),
            "TOOL_END": _first(tags["TOOL_END"]),
        },
        transitions={
            (S.CONTENT, "THINK_START"): (S.REASONING, ()),
            (S.CONTENT, "THINK_END"): (S.CONTENT, ()),
            (S.REASONING, "THINK_START"): (S.REASONING, ()),
            (S.REASONING, "THINK_END"): (S.CONTENT, (Ev.REASONING_END,)),
            (S.REASONING, "TOOL_START"): (S.TOOL_PREAMBLE, (Ev.REASONING_END,)),
            (S.CONTENT, "TOOL_START"): (S.TOOL_PREAMBLE, ()),
            (S.TOOL_PREAMBLE, "INVOKE_PREFIX"): (S.TOOL_NAME, (Ev.TOOL_START,)),
            (S.CONTENT, "INVOKE_PREFIX"): (S.TOOL_NAME, (Ev.TOOL_START,)),
            (S.TOOL_NAME, "INVOKE_NAME_END"): (S.TOOL_ARGS, ()),
            (S.TOOL_ARGS, "INVOKE_END"): (S.TOOL_BETWEEN, (Ev.TOOL_END,)),
            (S.TOOL_ARGS, "TOOL_END"): (S.TOOL_BETWEEN, (Ev.TOOL_END,)),
            (S.TOOL_BETWEEN, "INVOKE_PREFIX"): (S.TOOL_NAME, (Ev.TOOL_START,)),
            # A tool block ends the turn: text after it is dropped.
            (S.TOOL_BETWEEN, "TOOL_END"): (S.TOOL_BETWEEN, ()),
            (S.TOOL_BETWEEN, "TOOL_START"): (S.TOOL_PREAMBLE, ()),
        },
        initial_state=S.REASONING if thinking else S.CONTENT,
        wait_for_reasoning=thinking,
        arg_converter=functools.partial(
            dsml_arguments, param_res=_V41_PARAM_RES if v41 else PARAM_RES
        ),
        arg_structural_chars=frozenset(">"),
        args_json=False,
        strip_content_ws_with_tools=False,
    )


def thinking_enabled(chat_template_kwargs: dict | None) -> bool:
    kwargs = chat_template_kwargs or {}
    thinking = bool(kwargs.get("thinking") or kwargs.get("enable_thinking"))
    if "thinking" not in kwargs and "enable_thinking" not in kwargs:
        thinking = True
    return thinking and kwargs.get("reasoning_effort") != "none"


class DeepSeekV4Parser(DsmlArgumentsParser):
    v41 = False

    def __init__(
        self,
        tokenizer: ParserTokenizer,
        tools: list[dict] | None = None,
        tool_choice: object = None,
        chat_template_kwargs: dict | None = None,
    ) -> None:
        grammar = deepseek_v4_grammar(thinking_enabled(chat_template_kwargs), self.v41)
        super().__init__(grammar, tokenizer, tools, tool_choice)


class DeepSeekV41Parser(DeepSeekV4Parser):
    v41 = True
