"""The Kimi K2 output grammar: ``<think>`` reasoning and sectioned tool calls.

::

    <|tool_calls_section_begin|>
    <|tool_call_begin|>functions.get_weather:0<|tool_call_argument_begin|>
    {"city": "Tokyo"}<|tool_call_end|>                  (one line)
    <|tool_calls_section_end|>

The header before ``<|tool_call_argument_begin|>`` is Kimi's own tool call
id (``functions.NAME:N``, the call's id); the name is its part before ``:``
without ``functions.``.  Arguments are JSON, streamed as written.  Text after
the section is dropped.  ``thinking``/``enable_thinking`` false (either
given): no reasoning.  vLLM 0.32's ``vllm/parser/kimi_k2.py``.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Sequence

from frontend.parsers.grammar.machine import Ev, Event, Grammar, State
from frontend.parsers.grammar.parser import GrammarParser
from frontend.parsers.tokenizer import ParserTokenizer
from frontend.parsers.types import UNSET, DeltaToolCall

THINK_START = "<think>"
THINK_END = "</think>"
SECTION_START = "<|tool_calls_section_begin|>"
SECTION_END = "<|tool_calls_section_end|>"
CALL_START = "<|tool_call_begin|>"
CALL_END = "<|tool_call_end|>"
ARG_START = "<|tool_call_argument_begin|>"

_TOOL_ID_RE = re.compile(r"(?P<id>.+:\d+)")


@functools.cache
def kimi_k2_grammar(thinking: bool) -> Grammar:
    S = State
    think = {"THINK_START": THINK_START, "THINK_END": THINK_END} if thinking else {}
    tools = {
        "TOOL_SECTION_START": SECTION_START,
        "TOOL_SECTION_END": SECTION_END,
        "TOOL_START": CALL_START,
        "TOOL_END": CALL_END,
        "ARG_START": ARG_START,
    }
    transitions: dict = {}
    if thinking:
        transitions.update(
            {
                (S.REASONING, "THINK_START"): (S.REASONING, ()),
                (S.REASONING, "THINK_END"): (S.CONTENT, (Ev.REASONING_END,)),
                (S.CONTENT, "THINK_END"): (S.CONTENT, ()),
            }
        )
    transitions.update(
        {
            (S.REASONING, "TOOL_SECTION_START"): (S.TOOL_PREAMBLE, (Ev.REASONING_END,)),
            (S.CONTENT, "TOOL_SECTION_START"): (S.TOOL_PREAMBLE, ()),
            (S.TOOL_PREAMBLE, "TOOL_START"): (S.TOOL_NAME, (Ev.TOOL_START,)),
            (S.TOOL_NAME, "ARG_START"): (S.TOOL_ARGS, ()),
            (S.TOOL_ARGS, "TOOL_END"): (S.TOOL_BETWEEN, (Ev.TOOL_END,)),
            (S.TOOL_ARGS, "TOOL_SECTION_END"): (S.TOOL_PREAMBLE, (Ev.TOOL_END,)),
            (S.TOOL_BETWEEN, "TOOL_START"): (S.TOOL_NAME, (Ev.TOOL_START,)),
            # The parser stays in a tool state after the section: text after
            # the calls is dropped.
            (S.TOOL_PREAMBLE, "TOOL_SECTION_END"): (S.TOOL_PREAMBLE, ()),
            (S.TOOL_BETWEEN, "TOOL_SECTION_END"): (S.TOOL_PREAMBLE, ()),
        }
    )
    return Grammar(
        name="kimi_k2",
        terminals={**think, **tools},
        id_terminals={**think, **tools},
        transitions=transitions,
        initial_state=S.REASONING if thinking else S.CONTENT,
        wait_for_reasoning=thinking,
        strip_trailing_reasoning_ws=True,
        drop_ws_only_content_before_tools=True,
        strip_content_ws_with_tools=False,
    )


def tool_id_and_name(header: str | None) -> tuple[str | None, str | None]:
    """``functions.get_weather:0`` -> (that id, ``get_weather``); (None, None)
    for a header without ``:N``."""
    if header is None:
        return None, None
    m = _TOOL_ID_RE.match(header.strip())
    if not m:
        return None, None
    tool_id = m.group("id").strip()
    return tool_id, tool_id.split(":")[0].removeprefix("functions.")


class KimiK2Parser(GrammarParser):
    def __init__(
        self,
        tokenizer: ParserTokenizer,
        tools: list[dict] | None = None,
        tool_choice: object = None,
        chat_template_kwargs: dict | None = None,
    ) -> None:
        kwargs = chat_template_kwargs or {}
        thinking, enable = kwargs.get("thinking"), kwargs.get("enable_thinking")
        self.thinking = True if thinking is None and enable is None else bool(thinking or enable)
        super().__init__(kimi_k2_grammar(self.thinking), tokenizer, tools, tool_choice)
        self._section_id = tokenizer.vocab.get(SECTION_START)
        # vLLM's _emit_name_delta reads the header; its _handle_tool_end
        # sends the name it already read.
        self._header_names = True

    def _send_name(
        self, idx: int, deltas: list[DeltaToolCall], name: str | None, arguments: object = UNSET
    ) -> bool:
        if self._header_names:
            tool_id, tool_name = tool_id_and_name(name)
            if not tool_name:
                if 0 <= idx < len(self._slots):
                    self._slots[idx].name = ""
                return False
            self._slots[idx].id = tool_id or ""
            name = tool_name
        return super()._send_name(idx, deltas, name, arguments)

    def _on_tool_end(self, event: Event, deltas: list[DeltaToolCall]) -> None:
        idx = event.tool_index
        if 0 <= idx < len(self._slots) and not self._slots[idx].name_sent:
            tool_id, tool_name = tool_id_and_name(self._slots[idx].name)
            if tool_name:
                self._slots[idx].id = tool_id or ""
                self._slots[idx].name = tool_name
        self._header_names = False
        try:
            super()._on_tool_end(event, deltas)
        finally:
            self._header_names = True

    def _on_args(self, event: Event, deltas: list[DeltaToolCall]) -> None:
        # The chunk that sent the name goes out as the first arguments.
        idx = event.tool_index
        sent_before = 0 <= idx < len(self._slots) and self._slots[idx].name_sent
        super()._on_args(event, deltas)
        if event.value and not sent_before and 0 <= idx < len(self._slots):
            if self._slots[idx].name_sent:
                deltas.append(DeltaToolCall(idx, arguments=event.value))

    def _args_json(self, raw: str, name: str) -> str:
        return raw.strip() or "{}"

    def extract_content_ids(self, token_ids: list[int]) -> list[int]:
        if not self.thinking:
            return token_ids
        end_id = self._end_id
        if end_id is not None and end_id in token_ids:
            end = len(token_ids) - 1 - token_ids[::-1].index(end_id)
            return token_ids[end + 1 :]
        section = self._section_id
        if section is not None and section in token_ids:
            return token_ids[len(token_ids) - 1 - token_ids[::-1].index(section) :]
        return []

    def extract_reasoning(self, text: str) -> tuple[str | None, str | None]:
        if not self.thinking:
            return None, text
        return super().extract_reasoning(text)

    def count_reasoning_tokens_once(self, token_ids: Sequence[int]) -> int:
        if not self.thinking:
            return 0
        return super().count_reasoning_tokens_once(token_ids)
