"""The Mistral output grammar (tokenizer v11 and later, Hugging Face format).

::

    [TOOL_CALLS]get_weather[ARGS]{"city": "Paris"}[TOOL_CALLS]other[ARGS]{}

``[TOOL_CALLS]`` starts each call, the name runs until ``[ARGS]`` (or a
``{``), the JSON arguments until the next call or the end.  With ``[THINK]``
in the vocabulary (v13+), ``[THINK]...[/THINK]`` is reasoning.  Tool call ids
are Mistral's 9 alphanumeric characters.
"""

from __future__ import annotations

import functools
import json

from frontend.parsers.grammar.machine import Ev, Event, Grammar, State
from frontend.parsers.grammar.parser import GrammarParser, _Slot
from frontend.parsers.tokenizer import ParserTokenizer
from frontend.parsers.types import DeltaToolCall, make_mistral_tool_call_id

TOOL_CALLS = "[TOOL_CALLS]"
ARGS = "[ARGS]"
THINK_START = "[THINK]"
THINK_END = "[/THINK]"


@functools.cache
def mistral_grammar(reasoning: bool) -> Grammar:
    S = State
    terminals = {"TOOL_CALLS": TOOL_CALLS, "ARGS": ARGS, "OPEN_BRACE": "{"}
    id_terminals = {"TOOL_CALLS": TOOL_CALLS, "ARGS": ARGS}
    transitions: dict = {
        # The name runs to [ARGS], or to the "{" that opens the arguments
        # (kept as their first character).
        (S.TOOL_NAME, "ARGS"): (S.TOOL_ARGS, ()),
        (S.TOOL_NAME, "OPEN_BRACE"): (S.TOOL_ARGS, (Ev.ARGS,)),
        (S.TOOL_ARGS, "TOOL_CALLS"): (S.TOOL_NAME, (Ev.TOOL_END, Ev.TOOL_START)),
    }
    if reasoning:
        think = {"THINK_START": THINK_START, "THINK_END": THINK_END}
        terminals = {**think, **terminals}
        id_terminals = {**think, **id_terminals}
        transitions.update(
            {
                (S.CONTENT, "THINK_START"): (S.REASONING, ()),
                (S.REASONING, "THINK_START"): (S.REASONING, ()),
                (S.REASONING, "THINK_END"): (S.CONTENT, (Ev.REASONING_END,)),
                (S.CONTENT, "THINK_END"): (S.CONTENT, ()),
                (S.REASONING, "TOOL_CALLS"): (S.TOOL_NAME, (Ev.REASONING_END, Ev.TOOL_START)),
                (S.CONTENT, "TOOL_CALLS"): (S.TOOL_NAME, (Ev.REASONING_END, Ev.TOOL_START)),
            }
        )
    else:
        transitions[(S.CONTENT, "TOOL_CALLS")] = (S.TOOL_NAME, (Ev.TOOL_START,))
    return Grammar(
        name="mistral",
        terminals=terminals,
        id_terminals=id_terminals,
        transitions=transitions,
        initial_state=S.CONTENT,
        wait_for_reasoning=reasoning,
    )


def is_supported_tokenizer(tokenizer: ParserTokenizer) -> bool:
    """v11+ tokenizers have ``[ARGS]``; older ones (a JSON list after
    ``[TOOL_CALLS]``) are not supported here."""
    return TOOL_CALLS in tokenizer.vocab and ARGS in tokenizer.vocab


class MistralParser(GrammarParser):
    def __init__(
        self,
        tokenizer: ParserTokenizer,
        tools: list[dict] | None = None,
        tool_choice: object = None,
    ) -> None:
        if not is_supported_tokenizer(tokenizer):
            raise ValueError(
                "the mistral parser needs a v11+ Mistral tokenizer (with the "
                f"{TOOL_CALLS} and {ARGS} tokens)"
            )
        self.reasoning = THINK_START in tokenizer.vocab
        super().__init__(mistral_grammar(self.reasoning), tokenizer, tools, tool_choice)

    def extract_reasoning(self, text: str) -> tuple[str | None, str | None]:
        if not self.reasoning:
            return None, text
        return super().extract_reasoning(text)

    def _ensure_tool_id(self, slot: _Slot, name: str) -> None:
        if not slot.id:
            slot.id = make_mistral_tool_call_id()

    def _accept_tool_name(self, name: str) -> bool:
        # The name is final once the arguments start, even empty: a call
        # named "" surfaces the malformed generation instead of losing it.
        return True

    def _try_extract_name(self, idx: int) -> str | None:
        return self._slots[idx].name

    def _on_args(self, event: Event, deltas: list[DeltaToolCall]) -> None:
        # The "{" that moved the name to the arguments goes out with the name.
        idx = event.tool_index
        name_sent_before = self._slots[idx].name_sent
        super()._on_args(event, deltas)
        if event.value and not name_sent_before and self._slots[idx].name_sent:
            deltas.append(DeltaToolCall(idx, arguments=event.value))

    def _name_and_args(self, raw: str) -> tuple[str, str]:
        # No {"name": ...} envelope in this format: a "name" key is an argument.
        return "", self._args_json(raw, "")

    def _args_json(self, raw: str, name: str) -> str:
        """The first JSON value of the arguments; text after it is dropped."""
        stripped = raw.strip()
        if not stripped:
            return "{}"
        try:
            _, end = json.JSONDecoder().raw_decode(stripped)
        except ValueError:
            return stripped
        return stripped[:end]
