"""The Qwen3 output grammar: ``<think>`` reasoning and XML tool calls.

::

    <think>...</think>
    <tool_call>
    <function=get_weather>
    <parameter=city>
    Paris
    </parameter>
    </function>
    </tool_call>

Parameter values are raw text; they become JSON strings, then the tool
schema's types (numbers, booleans, objects) are applied.  Used by the
``qwen3`` reasoning parser and the ``qwen3_coder``/``qwen3_xml`` tool parsers.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Callable
from dataclasses import dataclass

from frontend.parsers.grammar.machine import Ev, Grammar, State
from frontend.parsers.grammar.parser import GrammarParser
from frontend.parsers.tokenizer import ParserTokenizer

_PARAM_RE = re.compile(
    r"<\s*parameter\s*=\s*([^>]*)>(.*?)(?:<\s*/\s*parameter\s*>|(?=<\s*parameter\s*=))", re.DOTALL
)
_OPEN_PARAM_RE = re.compile(r"<\s*parameter\s*=\s*([^>]+)>(.*)$", re.DOTALL)


def _trim_newlines(value: str) -> str:
    """Drop the one newline the template puts on each side of a value."""
    if value.startswith("\n"):
        value = value[1:]
    if value.endswith("\n"):
        value = value[:-1]
    return value


def parameters_to_json(raw: str, partial: bool) -> str:
    """``<parameter=k>v</parameter>...`` -> ``{"k": "v", ...}`` (values as strings)."""
    params: dict[str, object] = {}
    for m in _PARAM_RE.finditer(raw):
        params[m.group(1)] = _trim_newlines(m.group(2))
    if partial:
        last = _OPEN_PARAM_RE.search(_PARAM_RE.sub("", raw))
        if last and last.group(1):
            params[last.group(1)] = _trim_newlines(last.group(2))
    return json.dumps(params, ensure_ascii=False)


def verbatim_parameters_to_json(raw: str, partial: bool) -> str:
    """MiMo's parameters: the values as they are, newlines kept."""
    params: dict[str, object] = {m.group(1): m.group(2) for m in _PARAM_RE.finditer(raw)}
    if partial:
        last = _OPEN_PARAM_RE.search(_PARAM_RE.sub("", raw))
        if last and last.group(1):
            params[last.group(1)] = last.group(2)
    return json.dumps(params, ensure_ascii=False)


@dataclass(frozen=True)
class Variant:
    """A model on the Qwen3 grammar: its wrapper tokens and a few switches."""

    name: str
    think_start: str = "<think>"
    think_end: str = "</think>"
    tool_start: str = "<tool_call>"
    tool_end: str = "</tool_call>"
    turn_boundary_tokens: frozenset[str] = frozenset(("<|im_start|>", "<|im_end|>"))
    arg_converter: Callable[[str, bool], str] = parameters_to_json
    strip_trailing_reasoning_ws: bool = False
    # The template always opens reasoning; enable_thinking is ignored.
    always_thinking: bool = False


QWEN3 = Variant("qwen3")
# ByteDance Seed-OSS: the same grammar under <seed:...> tokens.
SEED_OSS = Variant(
    "seed_oss",
    think_start="<seed:think>",
    think_end="</seed:think>",
    tool_start="<seed:tool_call>",
    tool_end="</seed:tool_call>",
    turn_boundary_tokens=frozenset(("<seed:bos>", "<seed:eos>")),
)
# Xiaomi MiMo: parameter values verbatim.
MIMO = Variant("mimo", arg_converter=verbatim_parameters_to_json)
# Step-3.5 / Step-3.7: reasoning always on, closed with "\n</think>\n".
STEP3P5 = Variant("step3p5", strip_trailing_reasoning_ws=True, always_thinking=True)
# NVIDIA Nemotron 3 (and IBM Granite 4.2 thinking): trailing reasoning whitespace stripped.
NEMOTRON_V3 = Variant("nemotron_v3", strip_trailing_reasoning_ws=True)


@functools.cache
def qwen3_grammar(thinking: bool, variant: Variant = QWEN3) -> Grammar:
    S = State
    return Grammar(
        name=variant.name,
        terminals={
            "THINK_START": variant.think_start,
            "THINK_END": variant.think_end,
            "TOOL_START": variant.tool_start,
            "TOOL_END": variant.tool_end,
            "FUNC_PREFIX": "<function=",
            "FUNC_END": "</function>",
            "PARAM_START": "<parameter=",
            "PARAM_END": "</parameter>",
            "CLOSE_ANGLE": ">",
        },
        id_terminals={
            "THINK_START": variant.think_start,
            "THINK_END": variant.think_end,
            "TOOL_START": variant.tool_start,
            "TOOL_END": variant.tool_end,
        },
        transitions={
            (S.REASONING, "THINK_START"): (S.REASONING, ()),
            (S.REASONING, "THINK_END"): (S.CONTENT, (Ev.REASONING_END,)),
            # A repeated </think> after reasoning ended is dropped.
            (S.CONTENT, "THINK_END"): (S.CONTENT, ()),
            # A tool call ends reasoning implicitly.
            (S.REASONING, "TOOL_START"): (S.TOOL_PREAMBLE, (Ev.REASONING_END, Ev.TOOL_START)),
            (S.CONTENT, "TOOL_START"): (S.TOOL_PREAMBLE, (Ev.REASONING_END, Ev.TOOL_START)),
            # <function= without <tool_call> still starts a call.
            (S.CONTENT, "FUNC_PREFIX"): (S.TOOL_NAME, (Ev.TOOL_START,)),
            (S.TOOL_PREAMBLE, "TOOL_END"): (S.CONTENT, (Ev.TOOL_END,)),
            (S.TOOL_PREAMBLE, "FUNC_PREFIX"): (S.TOOL_NAME, ()),
            (S.TOOL_NAME, "CLOSE_ANGLE"): (S.TOOL_ARGS, ()),
            (S.TOOL_NAME, "FUNC_END"): (S.TOOL_BETWEEN, (Ev.TOOL_END,)),
            (S.TOOL_ARGS, "FUNC_END"): (S.TOOL_BETWEEN, (Ev.TOOL_END,)),
            # Parameter tags are part of the raw argument text.
            (S.TOOL_ARGS, "PARAM_START"): (S.TOOL_ARGS, (Ev.ARGS,)),
            (S.TOOL_ARGS, "PARAM_END"): (S.TOOL_ARGS, (Ev.ARGS,)),
            (S.TOOL_BETWEEN, "TOOL_END"): (S.CONTENT, ()),
            (S.TOOL_BETWEEN, "TOOL_START"): (S.TOOL_PREAMBLE, (Ev.TOOL_START,)),
            (S.TOOL_BETWEEN, "FUNC_PREFIX"): (S.TOOL_NAME, (Ev.TOOL_START,)),
        },
        initial_state=S.REASONING if thinking else S.CONTENT,
        wait_for_reasoning=thinking,
        arg_converter=variant.arg_converter,
        args_json=False,
        strip_trailing_reasoning_ws=variant.strip_trailing_reasoning_ws,
        turn_boundary_tokens=variant.turn_boundary_tokens,
    )


class Qwen3Parser(GrammarParser):
    """Qwen3's grammar (or a variant's); ``enable_thinking=False`` starts in content."""

    def __init__(
        self,
        tokenizer: ParserTokenizer,
        tools: list[dict] | None = None,
        tool_choice: object = None,
        chat_template_kwargs: dict | None = None,
        variant: Variant = QWEN3,
    ) -> None:
        self.thinking = (chat_template_kwargs or {}).get("enable_thinking", True)
        if variant.always_thinking:
            self.thinking = True
        grammar = qwen3_grammar(bool(self.thinking), variant)
        super().__init__(grammar, tokenizer, tools, tool_choice)

    def extract_reasoning(self, text: str) -> tuple[str | None, str | None]:
        if not self.thinking:
            return None, text
        return super().extract_reasoning(text)
