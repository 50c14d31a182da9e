"""The GLM-4.5/4.7 output grammar: ``<think>`` reasoning and XML-ish tool calls.

::

    <tool_call>get_weather<arg_key>city</arg_key><arg_value>Paris</arg_value></tool_call>

The name runs to the first ``<arg_key>`` (or the end tag: no arguments);
values are raw text, made JSON strings, then the tool schema's types.  A
call whose name is not one of the request's tools is dropped.
``thinking``/``enable_thinking`` false (either given): no reasoning.
vLLM 0.32's ``vllm/parser/glm47_moe.py`` (its GLM-5.3 rule, reasoning kept
on when the chat template has no thinking switch, is not here: the
tokenizer facts the parsers get carry no chat template).
"""

from __future__ import annotations

import functools
import json
import re

from frontend.parsers.grammar.machine import Ev, Event, Grammar, State
from frontend.parsers.grammar.parser import GrammarParser
from frontend.parsers.tokenizer import ParserTokenizer
from frontend.parsers.types import UNSET, DeltaToolCall, tool_function

THINK_START = "<think>"
THINK_END = "</think>"
TOOL_START = "<tool_call>"
TOOL_END = "</tool_call>"

_ARG_RE = re.compile(
    r"<arg_key>(?P<key>.*?)</arg_key>\s*<arg_value>(?P<value>.*?)</arg_value>", re.DOTALL
)
_PARTIAL_ARG_RE = re.compile(
    r"<arg_key>(?P<key>.*?)</arg_key>\s*<arg_value>(?P<value>.*)$", re.DOTALL
)


def arguments_to_json(raw: str, partial: bool) -> str:
    """``<arg_key>k</arg_key><arg_value>v</arg_value>...`` -> ``{"k": "v", ...}``."""
    params: dict[str, object] = {}
    for m in _ARG_RE.finditer(raw):
        params[m.group("key").strip()] = m.group("value")
    if partial:
        last = _PARTIAL_ARG_RE.search(_ARG_RE.sub("", raw))
        if last and last.group("key").strip():
            params[last.group("key").strip()] = last.group("value")
    return json.dumps(params, ensure_ascii=False)


# Conversation turn markers of a rendered GLM prompt.
TURN_BOUNDARIES = frozenset(("<|system|>", "<|user|>", "<|assistant|>", "<|observation|>"))
_ARG_TAGS = ("ARG_KEY_START", "ARG_KEY_END", "ARG_VALUE_START", "ARG_VALUE_END")


@functools.cache
def glm47_grammar(thinking: bool) -> Grammar:
    S = State
    think = {"THINK_START": THINK_START, "THINK_END": THINK_END} if thinking else {}
    transitions: dict = {}
    if thinking:
        transitions.update(
            {
                # (vLLM's REASONING_START event has no effect on deltas.)
                (S.CONTENT, "THINK_START"): (S.REASONING, ()),
                (S.REASONING, "THINK_END"): (S.CONTENT, (Ev.REASONING_END,)),
                (S.CONTENT, "THINK_END"): (S.CONTENT, ()),
            }
        )
    transitions.update(
        {
            (S.REASONING, "THINK_START"): (S.REASONING, ()),
            (S.REASONING, "TOOL_START"): (S.TOOL_NAME, (Ev.REASONING_END, Ev.TOOL_START)),
            (S.CONTENT, "TOOL_START"): (S.TOOL_NAME, (Ev.TOOL_START,)),
            (S.TOOL_NAME, "ARG_KEY_START"): (S.TOOL_ARGS, (Ev.ARGS,)),
            (S.TOOL_NAME, "TOOL_END"): (S.CONTENT, (Ev.TOOL_END,)),
            (S.TOOL_ARGS, "TOOL_END"): (S.CONTENT, (Ev.TOOL_END,)),
            # The argument tags are part of the raw argument text.
            **{(S.TOOL_ARGS, tag): (S.TOOL_ARGS, (Ev.ARGS,)) for tag in _ARG_TAGS},
        }
    )
    return Grammar(
        name="glm47_moe",
        terminals={
            **think,
            "TOOL_START": TOOL_START,
            "TOOL_END": TOOL_END,
            "ARG_KEY_START": "<arg_key>",
            "ARG_KEY_END": "</arg_key>",
            "ARG_VALUE_START": "<arg_value>",
            "ARG_VALUE_END": "</arg_value>",
        },
        id_terminals={**think, "TOOL_START": TOOL_START, "TOOL_END": TOOL_END},
        transitions=transitions,
        initial_state=S.REASONING if thinking else S.CONTENT,
        wait_for_reasoning=thinking,
        turn_boundary_tokens=TURN_BOUNDARIES,
        arg_converter=arguments_to_json,
        args_json=False,
    )


def always_thinks(tokenizer: ParserTokenizer) -> bool:
    """GLM-5.3's template: always-on reasoning, no thinking switch."""
    template = tokenizer.init_kwargs.get("chat_template")
    markers = ("[gMASK]<sop>", "Reasoning Effort:", "<tool_call>", "<arg_key>", "<arg_value>")
    return (
        isinstance(template, str)
        and all(marker in template for marker in markers)
        and "enable_thinking" not in template
    )


def thinking_enabled(chat_template_kwargs: dict | None) -> bool:
    kwargs = chat_template_kwargs or {}
    thinking, enable = kwargs.get("thinking"), kwargs.get("enable_thinking")
    if thinking is None and enable is None:
        return True
    return bool(thinking) or bool(enable)


class Glm47Parser(GrammarParser):
    """GLM's grammar; thinking off (a chat template kwarg) is all content,
    except under GLM-5.3's template (``ignore_template``: Ling 3 honours it)."""

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
        self._tool_names = {tool_function(t).get("name") for t in tools or ()}

    def _accept_tool_name(self, name: str) -> bool:
        # vLLM's validate_tool_names: with tools given, only their names.
        return bool(name) and (not self._tools or name in self._tool_names)

    def _send_name(
        self, idx: int, deltas: list[DeltaToolCall], name: str | None, arguments: object = UNSET
    ) -> bool:
        return super()._send_name(
            idx, deltas, name.strip() if name is not None else None, arguments
        )

    def _on_tool_end(self, event: Event, deltas: list[DeltaToolCall]) -> None:
        idx = event.tool_index
        if 0 <= idx < len(self._slots):
            self._slots[idx].name = self._slots[idx].name.strip()
        super()._on_tool_end(event, deltas)

    def extract_reasoning(self, text: str) -> tuple[str | None, str | None]:
        if not self.thinking:
            return None, text
        return super().extract_reasoning(text)
