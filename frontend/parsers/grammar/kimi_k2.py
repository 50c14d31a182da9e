"""The Kimi K2 output grammar: ``<think>`` reasoning and sectioned tool calls.

::

    <think>...</think>
    <|tool_calls_section_begin|>
    <|tool_call_begin|>functions.get_weather:0
    <|tool_call_argument_begin|>{"city": "Tokyo"}<|tool_call_end|>
    <|tool_calls_section_end|>

Reasoning is on unless ``thinking`` or ``enable_thinking`` is given and both
are false (then the grammar has no ``<think>`` terminals); ``</think>`` or
the tool section ends it.  Used by the ``kimi_k2`` reasoning parser (the tool
side's call ids and names, ``functions.NAME:N``, are not here yet).
"""

from __future__ import annotations

import functools

from frontend.parsers.grammar.glm47 import thinking_enabled
from frontend.parsers.grammar.machine import Ev, Grammar, State
from frontend.parsers.grammar.parser import GrammarParser
from frontend.parsers.tokenizer import ParserTokenizer

THINK_START, THINK_END = "<think>", "</think>"
SECTION_START = "<|tool_calls_section_begin|>"
SECTION_END = "<|tool_calls_section_end|>"


@functools.cache
def kimi_k2_grammar(thinking: bool) -> Grammar:
    S = State
    think = {"THINK_START": THINK_START, "THINK_END": THINK_END} if thinking else {}
    reasoning_transitions = (
        {
            (S.REASONING, "THINK_START"): (S.REASONING, ()),
            (S.REASONING, "THINK_END"): (S.CONTENT, (Ev.REASONING_END,)),
            (S.CONTENT, "THINK_END"): (S.CONTENT, ()),
        }
        if thinking
        else {}
    )
    terminals = {
        **think,
        "TOOL_SECTION_START": SECTION_START,
        "TOOL_SECTION_END": SECTION_END,
        "TOOL_START": "<|tool_call_begin|>",
        "TOOL_END": "<|tool_call_end|>",
        "ARG_START": "<|tool_call_argument_begin|>",
    }
    return Grammar(
        name="kimi_k2",
        terminals=terminals,
        id_terminals=dict(terminals),
        transitions={
            **reasoning_transitions,
            (S.REASONING, "TOOL_SECTION_START"): (S.TOOL_PREAMBLE, (Ev.REASONING_END,)),
            (S.CONTENT, "TOOL_SECTION_START"): (S.TOOL_PREAMBLE, ()),
            (S.TOOL_PREAMBLE, "TOOL_START"): (S.TOOL_NAME, (Ev.TOOL_START,)),
            (S.TOOL_NAME, "ARG_START"): (S.TOOL_ARGS, ()),
            (S.TOOL_ARGS, "TOOL_END"): (S.TOOL_BETWEEN, (Ev.TOOL_END,)),
            (S.TOOL_ARGS, "TOOL_SECTION_END"): (S.TOOL_PREAMBLE, (Ev.TOOL_END,)),
            (S.TOOL_BETWEEN, "TOOL_START"): (S.TOOL_NAME, (Ev.TOOL_START,)),
            # After the section, trailing text stays in a tool state (dropped).
            (S.TOOL_PREAMBLE, "TOOL_SECTION_END"): (S.TOOL_PREAMBLE, ()),
            (S.TOOL_BETWEEN, "TOOL_SECTION_END"): (S.TOOL_PREAMBLE, ()),
        },
        initial_state=S.REASONING if thinking else S.CONTENT,
        wait_for_reasoning=thinking,
        strip_trailing_reasoning_ws=True,
        strip_content_ws_with_tools=False,
    )


class KimiK2Parser(GrammarParser):
    def __init__(
        self,
        tokenizer: ParserTokenizer,
        tools: list[dict] | None = None,
        tool_choice: object = None,
        chat_template_kwargs: dict | None = None,
    ) -> None:
        self.thinking = thinking_enabled(chat_template_kwargs)
        super().__init__(kimi_k2_grammar(self.thinking), tokenizer, tools, tool_choice)
        self._think_end_id = tokenizer.vocab.get(THINK_END)
        self._section_start_id = tokenizer.vocab.get(SECTION_START)

    def extract_reasoning(self, text: str) -> tuple[str | None, str | None]:
        if not self.thinking:
            return None, text
        return super().extract_reasoning(text)

    def extract_content_ids(self, token_ids: list[int]) -> list[int]:
        """After the last ``</think>``, else from the last tool section, else none."""
        if not self.thinking:
            return token_ids
        for marker, skip in ((self._think_end_id, 1), (self._section_start_id, 0)):
            if marker is not None and marker in token_ids:
                at = len(token_ids) - 1 - token_ids[::-1].index(marker)
                return token_ids[at + skip :]
        return []
