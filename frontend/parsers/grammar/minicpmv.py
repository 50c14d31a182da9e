"""The MiniCPM-V output grammar: Qwen3's (:mod:`frontend.parsers.grammar.qwen3`)
with MiniCPM-V's markers passed over.

``<|im_end|>`` and the reserved markers (``<reserved_12>`` ... ``<reserved_15>``
as text, ``<|reserved_12|>`` ... as tokens) never reach the content.
Thinking is on unless ``enable_thinking`` is false; without it a stray
``<think>...</think>`` is dropped, not shown.  No prompt turn boundaries.
vLLM 0.32's ``vllm/parser/minicpmv.py`` (``MiniCPMVParser``); its newline
recovery is :mod:`frontend.parsers.escaped_newlines`.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import replace

from frontend.parsers.grammar.machine import Grammar, State
from frontend.parsers.grammar.parser import GrammarParser
from frontend.parsers.grammar.qwen3 import Qwen3Parser, qwen3_grammar
from frontend.parsers.tokenizer import ParserTokenizer
from frontend.parsers.types import UNSET, ParsedDelta

IM_END = "<|im_end|>"
RESERVED = range(12, 16)


@functools.cache
def minicpmv_grammar(thinking: bool) -> Grammar:
    S = State
    base = qwen3_grammar(thinking)
    transitions = dict(base.transitions)
    if not thinking:
        # <think> opens a span that is dropped, not reasoning.
        transitions[(S.CONTENT, "THINK_START")] = (S.REASONING, ())
    terminals = {**base.terminals, "IM_END": IM_END}
    id_terminals = {**base.id_terminals, "IM_END": IM_END}
    passed_over = ["IM_END"]
    for n in RESERVED:
        terminals[f"RESERVED_TEXT_{n}"] = f"<reserved_{n}>"
        terminals[f"RESERVED_TOKEN_{n}"] = id_terminals[f"RESERVED_TOKEN_{n}"] = f"<|reserved_{n}|>"
        passed_over += [f"RESERVED_TEXT_{n}", f"RESERVED_TOKEN_{n}"]
    for name in passed_over:
        for state in (S.CONTENT, S.REASONING):
            transitions[(state, name)] = (state, ())
    return replace(
        base,
        name="minicpmv" if thinking else "minicpmv_no_thinking",
        terminals=terminals,
        id_terminals=id_terminals,
        transitions=transitions,
        turn_boundary_tokens=frozenset(),
    )


class MiniCPMVParser(Qwen3Parser):
    """Without thinking, reasoning is over from the start and what a stray
    think span held is dropped."""

    def __init__(
        self,
        tokenizer: ParserTokenizer,
        tools: list[dict] | None = None,
        tool_choice: object = None,
        chat_template_kwargs: dict | None = None,
    ) -> None:
        self.thinking = (chat_template_kwargs or {}).get("enable_thinking", True)
        GrammarParser.__init__(
            self, minicpmv_grammar(bool(self.thinking)), tokenizer, tools, tool_choice
        )

    @property
    def reasoning_ended(self) -> bool:
        return not self.thinking or self._reasoning_ended

    @reasoning_ended.setter
    def reasoning_ended(self, value: bool) -> None:
        self._reasoning_ended = value

    def extract_reasoning(self, text: str) -> tuple[str | None, str | None]:
        if self.thinking:
            return super().extract_reasoning(text)
        return None, GrammarParser.extract_reasoning(self, text)[1]

    def extract_reasoning_streaming(
        self, delta_text: str, token_ids: Sequence[int]
    ) -> ParsedDelta | None:
        delta = super().extract_reasoning_streaming(delta_text, token_ids)
        if self.thinking or delta is None:
            return delta
        delta.reasoning = None
        if delta.content in (None, UNSET) and not delta.tool_calls:
            return None
        return delta

    def streaming_fallback_content(self) -> str | None:
        if self.thinking:
            return super().streaming_fallback_content()
        delta = self.finish_streaming()
        return delta.content or None if delta is not None else None
