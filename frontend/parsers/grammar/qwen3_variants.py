"""Grammars that are the Qwen3 grammar (:mod:`frontend.parsers.grammar.qwen3`)
with other markers or rules, as vLLM 0.32 derives them from its ``Qwen3Parser``:

* ``seed_oss`` (Seed-OSS): ``<seed:think>``/``<seed:tool_call>`` and the
  ``<seed:bos>``/``<seed:eos>`` turn boundaries;
* ``step3p5`` (Step-3.5/3.7): always thinking (``enable_thinking`` is
  ignored), trailing reasoning whitespace stripped;
* ``mimo`` (MiMo): parameter values verbatim (no newline trimmed).
"""

from __future__ import annotations

import functools
import json
from dataclasses import replace

from frontend.parsers.grammar.machine import Grammar
from frontend.parsers.grammar.parser import GrammarParser
from frontend.parsers.grammar.qwen3 import _OPEN_PARAM_RE, _PARAM_RE, Qwen3Parser, qwen3_grammar
from frontend.parsers.tokenizer import ParserTokenizer

SEED_MARKERS = {
    "THINK_START": "<seed:think>",
    "THINK_END": "</seed:think>",
    "TOOL_START": "<seed:tool_call>",
    "TOOL_END": "</seed:tool_call>",
}


@functools.cache
def seed_oss_grammar(thinking: bool) -> Grammar:
    base = qwen3_grammar(thinking)
    return replace(
        base,
        name="seed_oss",
        terminals={**base.terminals, **SEED_MARKERS},
        id_terminals={**base.id_terminals, **SEED_MARKERS},
        turn_boundary_tokens=frozenset(("<seed:bos>", "<seed:eos>")),
    )


@functools.cache
def step3p5_grammar() -> Grammar:
    return replace(qwen3_grammar(True), name="step3p5", strip_trailing_reasoning_ws=True)


def mimo_parameters_to_json(raw: str, partial: bool) -> str:
    """Qwen3's parameters with the values as written."""
    params = {m.group(1): m.group(2) for m in _PARAM_RE.finditer(raw)}
    if partial:
        last = _OPEN_PARAM_RE.search(_PARAM_RE.sub("", raw))
        if last and last.group(1):
            params[last.group(1)] = last.group(2)
    return json.dumps(params, ensure_ascii=False)


@functools.cache
def mimo_grammar(thinking: bool) -> Grammar:
    return replace(qwen3_grammar(thinking), name="mimo", arg_converter=mimo_parameters_to_json)


class _Variant(Qwen3Parser):
    """Qwen3Parser's thinking switch over another grammar."""

    def __init__(
        self,
        tokenizer: ParserTokenizer,
        tools: list[dict] | None = None,
        tool_choice: object = None,
        chat_template_kwargs: dict | None = None,
    ) -> None:
        self.thinking = (chat_template_kwargs or {}).get("enable_thinking", True)
        GrammarParser.__init__(
            self, self.grammar_for(bool(self.thinking)), tokenizer, tools, tool_choice
        )

    @staticmethod
    def grammar_for(thinking: bool) -> Grammar:
        raise NotImplementedError


class SeedOssParser(_Variant):
    grammar_for = staticmethod(seed_oss_grammar)


class MiMoParser(_Variant):
    grammar_for = staticmethod(mimo_grammar)


class Step3p5Parser(GrammarParser):
    def __init__(
        self,
        tokenizer: ParserTokenizer,
        tools: list[dict] | None = None,
        tool_choice: object = None,
        chat_template_kwargs: dict | None = None,
    ) -> None:
        self.thinking = True
        super().__init__(step3p5_grammar(), tokenizer, tools, tool_choice)
