"""The GLM-4.5/4.7 output grammar (also Ling3's): ``<think>`` reasoning and
XML-like tool calls.

::

    <think>...</think>
    <tool_call>get_weather<arg_key>city</arg_key><arg_value>Paris</arg_value></tool_call>

Reasoning is on unless ``thinking`` or ``enable_thinking`` is given and both
are false; thinking off drops the ``<think>`` terminals altogether.  With
thinking on, a ``<think>`` in content opens reasoning again and a
``<tool_call>`` ends it.  Used by the ``glm45``/``glm47`` and ``ling3``
reasoning parsers.
"""

from __future__ import annotations

import functools
import json
import re

from frontend.parsers.grammar.machine import Ev, Grammar, State
from frontend.parsers.grammar.parser import GrammarParser
from frontend.parsers.tokenizer import ParserTokenizer

THINK_START, THINK_END = "<think>", "</think>"
TURN_BOUNDARIES = frozenset(("<|system|>", "<|user|>", "<|assistant|>", "<|observation|>"))

_ARG_RE = re.compile(
    r"<arg_key>(?P<key>.*?)</arg_key>\s*<arg_value>(?P<value>.*?)</arg_value>", re.DOTALL
)
_OPEN_ARG_RE = re.compile(r"<arg_key>(?P<key>.*?)</arg_key>\s*<arg_value>(?P<value>.*)$", re.DOTALL)


def arguments_to_json(raw: str, partial: bool) -> str:
    """``<arg_key>k</arg_key><arg_value>v</arg_value>...`` -> ``{"k": "v", ...}``."""
    params: dict[str, object] = {}
    for m in _ARG_RE.finditer(raw):
        params[m.group("key").strip()] = m.group("value")
    if partial:
        last = _OPEN_ARG_RE.search(_ARG_RE.sub("", raw))
        if last and last.group("key").strip():
            params[last.group("key").strip()] = last.group("value")
    return json.dumps(params, ensure_ascii=False)


@functools.cache
def glm47_grammar(thinking: bool) -> Grammar:
    S = State
    think = {"THINK_START": THINK_START, "THINK_END": THINK_END} if thinking else {}
    reasoning_transitions = (
        {
            (S.CONTENT, "THINK_START"): (S.REASONING, ()),
            (S.REASONING, "THINK_END"): (S.CONTENT, (Ev.REASONING_END,)),
            (S.CONTENT, "THINK_END"): (S.CONTENT, ()),
        }
        if thinking
        else {}
    )
    args = {
        (S.TOOL_ARGS, terminal): (S.TOOL_ARGS, (Ev.ARGS,))
        for terminal in ("ARG_KEY_START", "ARG_KEY_END", "ARG_VALUE_START", "ARG_VALUE_END")
    }
    return Grammar(
        name="glm47_moe",
        terminals={
            **think,
            "TOOL_START": "<tool_call>",
            "TOOL_END": "</tool_call>",
            "ARG_KEY_START": "<arg_key>",
            "ARG_KEY_END": "</arg_key>",
            "ARG_VALUE_START": "<arg_value>",
            "ARG_VALUE_END": "</arg_value>",
        },
        id_terminals={**think, "TOOL_START": "<tool_call>", "TOOL_END": "</tool_call>"},
        transitions={
            **reasoning_transitions,
            (S.REASONING, "THINK_START"): (S.REASONING, ()),
            (S.REASONING, "TOOL_START"): (S.TOOL_NAME, (Ev.REASONING_END, Ev.TOOL_START)),
            (S.CONTENT, "TOOL_START"): (S.TOOL_NAME, (Ev.TOOL_START,)),
            (S.TOOL_NAME, "ARG_KEY_START"): (S.TOOL_ARGS, (Ev.ARGS,)),
            (S.TOOL_NAME, "TOOL_END"): (S.CONTENT, (Ev.TOOL_END,)),
            (S.TOOL_ARGS, "TOOL_END"): (S.CONTENT, (Ev.TOOL_END,)),
            **args,
        },
        initial_state=S.REASONING if thinking else S.CONTENT,
        # vLLM's default: reasoning is awaited when the grammar starts in it.
        wait_for_reasoning=thinking,
        arg_converter=arguments_to_json,
        args_json=False,
        turn_boundary_tokens=TURN_BOUNDARIES,
    )


def always_thinks(tokenizer: ParserTokenizer) -> bool:
    """GLM-5.3's template: always-on reasoning, no thinking switch."""
    template = tokenizer.init_kwargs.get("chat_template")
    return (
        isinstance(template, str)
        and all(
            marker in template
            for marker in (
                "[gMASK]<sop>",
                "Reasoning Effort:",
                "<tool_call>",
                "<arg_key>",
                "<arg_value>",
            )
        )
        and "enable_thinking" not in template
    )


def thinking_enabled(chat_template_kwargs: dict | None) -> bool:
    kwargs = chat_template_kwargs or {}
    thinking, enable = kwargs.get("thinking"), kwargs.get("enable_thinking")
    if thinking is None and enable is None:
        return True
    return bool(thinking) or bool(enable)


class Glm47Parser(GrammarParser):
    """GLM's grammar; thinking off (a chat template kwarg) is all content."""

    def __init__(
        self,
        tokenizer: ParserTokenizer,
        tools: list[dict] | None = None,
        tool_choice: object = None,
        chat_template_kwargs: dict | None = None,
        *,
        ignore_template: bool = False,
    ) -> None:
        kwargs = dict(chat_template_kwargs or {})
        turned_off = kwargs.get("thinking") is False or kwargs.get("enable_thinking") is False
        if turned_off and not ignore_template and always_thinks(tokenizer):
            kwargs.pop("thinking", None)
            kwargs.pop("enable_thinking", None)
        self.thinking = thinking_enabled(kwargs)
        super().__init__(glm47_grammar(self.thinking), tokenizer, tools, tool_choice)

    def extract_reasoning(self, text: str) -> tuple[str | None, str | None]:
        if not self.thinking:
            return None, text
        return super().extract_reasoning(text)
