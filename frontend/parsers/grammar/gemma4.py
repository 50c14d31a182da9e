"""The Gemma 4 output grammar: channel reasoning and ``call:`` tool calls.

::

    <|channel>thought
    ...reasoning...<channel|>
    <|tool_call>call:get_weather{city:<|"|>Paris<|"|>,days:3}<tool_call|>

Arguments are Gemma's own ``key:value`` notation (strings between
``<|"|>`` delimiters, bare numbers and booleans, nested ``{}`` and ``[]``),
converted to JSON.  Reasoning is on with ``enable_thinking``; the
``thought\\n`` that opens a channel is not reasoning.  Used by the
``gemma4`` tool and reasoning parsers (vLLM's ``vllm/parser/gemma4.py``).
"""

from __future__ import annotations

import functools
import json
from collections.abc import Sequence

from frontend.parsers.grammar.machine import Ev, Event, Grammar, State
from frontend.parsers.grammar.parser import GrammarParser
from frontend.parsers.tokenizer import ParserTokenizer
from frontend.parsers.types import UNSET, ParsedDelta

CHANNEL_START = "<|channel>"
CHANNEL_END = "<channel|>"
TOOL_CALL_START = "<|tool_call>"
TOOL_CALL_END = "<tool_call|>"
STRING_DELIM = '<|"|>'
TURN_START = "<|turn>"
TOOL_RESPONSE = "<|tool_response>"
_DELIM_LEN = len(STRING_DELIM)
_PARTIAL_DELIMS = tuple(STRING_DELIM[:k] for k in range(len(STRING_DELIM), 0, -1))
THOUGHT_PREFIX = "thought\n"
THOUGHT_TOKEN = "thought"


# -- Gemma's key:value arguments -> JSON ----------------------------------------------


def _strip_partial_delim(value: str) -> str:
    """A trailing partial ``<|"|>`` is not part of a streamed string."""
    for suffix in _PARTIAL_DELIMS:
        if value.endswith(suffix):
            return value[: -len(suffix)]
    return value


def _skip_nested(text: str, i: int, opener: str, closer: str) -> tuple[int, int]:
    """From just after ``opener`` at ``i``: (end index, depth left open)."""
    depth, n = 1, len(text)
    while i < n and depth > 0:
        if text.startswith(STRING_DELIM, i):
            # Brackets inside strings do not count.
            next_delim = text.find(STRING_DELIM, i + _DELIM_LEN)
            i = n if next_delim == -1 else next_delim + _DELIM_LEN
            continue
        if text[i] == opener:
            depth += 1
        elif text[i] == closer:
            depth -= 1
        i += 1
    return i, depth


def _nested_value(text: str, i: int) -> tuple[object, int]:
    """The ``{...}`` or ``[...]`` value at ``i`` and the index after it."""
    is_object = text[i] == "{"
    parse = parse_args if is_object else _parse_array
    start = i + 1
    end, depth = _skip_nested(text, start, *("{}" if is_object else "[]"))
    if depth > 0:
        # Unfinished: everything so far, parsed as partial.
        return parse(text[start:end], partial=True), end
    # Closed: complete, even while the whole is still streaming (as vLLM).
    return parse(text[start : end - 1]), end


def parse_args(text: str, *, partial: bool = False) -> dict:
    """``key:value,...`` -> a dict.  ``partial`` (streaming): a bare value at
    the end may be incomplete (``tr`` of ``true``, ``108.``) and is left out."""
    if not text or not text.strip():
        return {}
    result: dict = {}
    i, n = 0, len(text)
    while i < n:
        while i < n and text[i] in " ,\n\t":
            i += 1
        if i >= n:
            break
        key_start = i
        while i < n and text[i] != ":":
            i += 1
        if i >= n:
            break
        key = text[key_start:i].strip()
        if key.startswith(STRING_DELIM) and key.endswith(STRING_DELIM):
            key = key[_DELIM_LEN:-_DELIM_LEN]
        i += 1
        while i < n and text[i] in " \n\t":
            i += 1
        if i >= n:
            if not partial:
                result[key] = ""
            break
        if text.startswith(STRING_DELIM, i):
            i += _DELIM_LEN
            end = text.find(STRING_DELIM, i)
            if end == -1:
                value = text[i:]
                result[key] = _strip_partial_delim(value) if partial else value
                break
            result[key] = text[i:end]
            i = end + _DELIM_LEN
        elif text[i] in "{[":
            result[key], i = _nested_value(text, i)
        else:
            start = i
            while i < n and text[i] not in ",}]":
                i += 1
            if (partial and i >= n) or i == start:
                break
            raw = text[start:i].strip()
            if partial and raw.endswith("."):
                break  # more digits may follow
            result[key] = raw
    return result


def _parse_array(text: str, *, partial: bool = False) -> list:
    items: list = []
    i, n = 0, len(text)
    while i < n:
        while i < n and text[i] in " ,\n\t":
            i += 1
        if i >= n:
            break
        if text.startswith(STRING_DELIM, i):
            i += _DELIM_LEN
            end = text.find(STRING_DELIM, i)
            if end == -1:
                items.append(text[i:])
                break
            items.append(text[i:end])
            i = end + _DELIM_LEN
        elif text[i] in "{[":
            item, i = _nested_value(text, i)
            items.append(item)
        else:
            start = i
            while i < n and text[i] not in ",]":
                i += 1
            if (partial and i >= n) or i == start:
                break
            raw = text[start:i].strip()
            if partial and raw.endswith("."):
                break
            items.append(raw)
    return items


def arguments_to_json(raw: str, partial: bool) -> str:
    """The raw text after ``call:name{`` (or ``(``) -> JSON arguments."""
    text = raw.strip()
    if text.endswith("}") or text.endswith(")") and text.count("(") < text.count(")"):
        text = text[:-1]
    return json.dumps(parse_args(text, partial=partial), ensure_ascii=False)


# -- the grammar --------------------------------------------------------------------


@functools.cache
def gemma4_grammar(thinking: bool) -> Grammar:
    S = State
    return Grammar(
        name="gemma4",
        terminals={
            "THINK_START": CHANNEL_START,
            "THINK_END": CHANNEL_END,
            "TOOL_START": TOOL_CALL_START,
            "TOOL_END": TOOL_CALL_END,
            "CALL_PREFIX": "call:",
            "COLON": ":",
            "OPEN_BRACE": "{",
            "OPEN_PAREN": "(",
        },
        id_terminals={
            "THINK_START": CHANNEL_START,
            "THINK_END": CHANNEL_END,
            "TOOL_START": TOOL_CALL_START,
            "TOOL_END": TOOL_CALL_END,
        },
        transitions={
            (S.CONTENT, "THINK_START"): (S.REASONING, ()),
            # A channel the prompt opened, opened again by the model.
            (S.REASONING, "THINK_START"): (S.REASONING, ()),
            (S.REASONING, "THINK_END"): (S.CONTENT, (Ev.REASONING_END,)),
            (S.REASONING, "TOOL_START"): (S.TOOL_PREAMBLE, (Ev.REASONING_END, Ev.TOOL_START)),
            (S.CONTENT, "TOOL_START"): (S.TOOL_PREAMBLE, (Ev.REASONING_END, Ev.TOOL_START)),
            (S.TOOL_PREAMBLE, "TOOL_END"): (S.CONTENT, (Ev.TOOL_END,)),
            (S.TOOL_PREAMBLE, "CALL_PREFIX"): (S.TOOL_NAME, ()),
            # Some checkpoints write "<|tool_call>:name{...}".
            (S.TOOL_PREAMBLE, "COLON"): (S.TOOL_NAME, ()),
            (S.TOOL_NAME, "OPEN_BRACE"): (S.TOOL_ARGS, ()),
            (S.TOOL_NAME, "OPEN_PAREN"): (S.TOOL_ARGS, ()),
            (S.TOOL_NAME, "TOOL_END"): (S.CONTENT, (Ev.TOOL_END,)),
            (S.TOOL_ARGS, "TOOL_END"): (S.CONTENT, (Ev.TOOL_END,)),
            # Stray closers after a call or a channel are dropped.
            (S.CONTENT, "TOOL_END"): (S.CONTENT, ()),
            (S.CONTENT, "THINK_END"): (S.CONTENT, ()),
        },
        # A silent tail: with thinking off (or after a tool response) the
        # templates write no channel marker.
        wait_for_reasoning=thinking,
        turn_boundary_tokens=frozenset({TURN_START, TOOL_RESPONSE}),
        arg_converter=arguments_to_json,
        args_json=False,
        arg_structural_chars=frozenset(",:{}[]<"),
        preserve_tokens=frozenset({STRING_DELIM}),
    )


class Gemma4Parser(GrammarParser):
    """Gemma 4's grammar; strips ``thought\\n`` off the reasoning."""

    def __init__(
        self,
        tokenizer: ParserTokenizer,
        tools: list[dict] | None = None,
        tool_choice: object = None,
        chat_template_kwargs: dict | None = None,
    ) -> None:
        thinking = bool((chat_template_kwargs or {}).get("enable_thinking", False))
        super().__init__(gemma4_grammar(thinking), tokenizer, tools, tool_choice)
        vocab = tokenizer.vocab
        # After any of these in the prompt, a <|channel> before them is closed.
        self._channel_closer_ids = frozenset(
            vocab[t]
            for t in (CHANNEL_END, TOOL_CALL_START, TURN_START, TOOL_RESPONSE)
            if t in vocab
        )
        self._reset_gemma()

    def _reset_gemma(self) -> None:
        self._reasoning_text = ""
        self._prefix_stripped = False
        self._first_feed = True

    def _reset(self, initial_state: State | None = None) -> None:
        super()._reset(initial_state)
        self._reset_gemma()

    def _feed(self, delta_text: str, token_ids: Sequence[int]) -> list[Event]:
        if self._first_feed:
            self._first_feed = False
            delta_text, token_ids = self._open_channel_if_implied(delta_text, token_ids)
        return super()._feed(delta_text, token_ids)

    def _open_channel_if_implied(
        self, delta_text: str, token_ids: Sequence[int]
    ) -> tuple[str, Sequence[int]]:
        """Output that starts with ``thought`` or holds a ``<channel|>`` with no
        ``<|channel>`` before it is reasoning the prompt's channel opened."""
        if (
            not delta_text
            or self._machine.state != State.CONTENT
            or self._start_id is None
            or self._end_id is None
            or CHANNEL_START in delta_text
        ):
            return delta_text, token_ids
        if not (
            CHANNEL_END in delta_text
            or delta_text.startswith(THOUGHT_PREFIX)
            or delta_text == THOUGHT_TOKEN
        ):
            return delta_text, token_ids
        if token_ids:
            token_ids = [self._start_id, *token_ids]
        return CHANNEL_START + delta_text, token_ids

    def adjust_initial_state_from_prompt(self, prompt_ids: Sequence[int]) -> None:
        """A prompt that ends inside an open ``<|channel>`` (after a tool
        response) continues in reasoning."""
        if self._start_id is None:
            return
        for token_id in reversed(prompt_ids):
            if token_id == self._start_id:
                self._machine.reset(State.REASONING)
                self._streaming_initialized = True
                return
            if token_id in self._channel_closer_ids:
                return

    def _events_to_delta(self, events: list[Event], finished: bool = False) -> ParsedDelta | None:
        delta = super()._events_to_delta(events, finished)
        if delta is None or delta.reasoning in (UNSET, None) or self._prefix_stripped:
            return delta
        self._reasoning_text += delta.reasoning
        prefix_len = len(THOUGHT_PREFIX)
        if self._reasoning_text.startswith(THOUGHT_PREFIX):
            before = len(self._reasoning_text) - len(delta.reasoning)
            if before >= prefix_len:
                self._prefix_stripped = True
                return delta
            stripped = delta.reasoning[prefix_len - before :]
            if stripped:
                self._prefix_stripped = True
                delta.reasoning = stripped
                return delta
            self._prefix_stripped = True
            delta.reasoning = None
            if delta.content not in (UNSET, None) or delta.tool_calls:
                return delta
            return None
        if THOUGHT_PREFIX.startswith(self._reasoning_text):
            # Still possibly the prefix: wait.
            if finished:
                self._prefix_stripped = True
            return None
        self._prefix_stripped = True
        delta.reasoning = self._reasoning_text
        return delta

    def extract_reasoning(self, text: str) -> tuple[str | None, str | None]:
        reasoning, content = super().extract_reasoning(text)
        if reasoning:
            if reasoning.startswith(THOUGHT_PREFIX):
                reasoning = reasoning[len(THOUGHT_PREFIX) :]
            elif reasoning == THOUGHT_PREFIX.rstrip():
                reasoning = None
        return reasoning or None, content
