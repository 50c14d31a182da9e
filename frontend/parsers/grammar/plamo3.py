"""The PLaMo 3 output grammar: ``<|plamo:...:plamo|>`` markers around
reasoning and tool requests.

::

    <|plamo:begin_think:plamo|>...<|plamo:end_think:plamo|>
    <|plamo:begin_tool_requests:plamo|>
    <|plamo:begin_tool_request:plamo|>
    <|plamo:begin_tool_name:plamo|>get_weather<|plamo:end_tool_name:plamo|>
    <|plamo:begin_tool_arguments:plamo|><|plamo:constrain|>json<|plamo:msg|>
    {"city": "Paris"}<|plamo:end_tool_arguments:plamo|>
    <|plamo:end_tool_request:plamo|>
    <|plamo:end_tool_requests:plamo|>

(each marker without the line breaks).  The tokenizer spells a marker in
several tokens (``<|plamo:begin_``, ``think``, ``:plamo|>``), so markers are
matched as text and a reasoning boundary in the prompt as a token sequence;
only ``<|plamo:tag|>`` (end of turn) is one token.  A marker cut off at the
end of the output is dropped.  Arguments are JSON, streamed as written.
``enable_thinking`` false: no reasoning.  vLLM 0.32's ``vllm/parser/plamo3.py``.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Sequence
from dataclasses import replace
from itertools import groupby

from frontend.parsers.grammar.machine import Ev, Event, Grammar, State
from frontend.parsers.grammar.parser import GrammarParser
from frontend.parsers.tokenizer import ParserTokenizer
from frontend.parsers.types import UNSET, DeltaToolCall, ParsedDelta

BEGIN_TOOL_REQUESTS = "<|plamo:begin_tool_requests:plamo|>"
END_TOOL_REQUESTS = "<|plamo:end_tool_requests:plamo|>"
BEGIN_TOOL_REQUEST = "<|plamo:begin_tool_request:plamo|>"
END_TOOL_REQUEST = "<|plamo:end_tool_request:plamo|>"
BEGIN_TOOL_NAME = "<|plamo:begin_tool_name:plamo|>"
END_TOOL_NAME = "<|plamo:end_tool_name:plamo|>"
BEGIN_TOOL_ARGUMENTS = "<|plamo:begin_tool_arguments:plamo|><|plamo:constrain|>json<|plamo:msg|>"
END_TOOL_ARGUMENTS = "<|plamo:end_tool_arguments:plamo|>"
BEGIN_THINK = "<|plamo:begin_think:plamo|>"
END_THINK = "<|plamo:end_think:plamo|>"
EOT = "<|plamo:tag|>"
MARKER_PREFIX = "<|plamo:"

# The special tokens markers are spelled with: kept, not dropped as unknown
# special tokens.
MARKER_PIECES = frozenset({"<|plamo:begin_", "<|plamo:end_", ":plamo|>"})


@functools.cache
def plamo3_grammar(thinking: bool) -> Grammar:
    S = State
    think = {"THINK_START": BEGIN_THINK, "THINK_END": END_THINK} if thinking else {}
    transitions: dict = {}
    if thinking:
        transitions.update(
            {
                # (vLLM's REASONING_START event has no effect on deltas.)
                (S.REASONING, "THINK_START"): (S.REASONING, ()),
                (S.CONTENT, "THINK_START"): (S.REASONING, ()),
                (S.REASONING, "THINK_END"): (S.CONTENT, (Ev.REASONING_END,)),
                (S.CONTENT, "THINK_END"): (S.CONTENT, ()),
                (S.REASONING, "TOOL_REQUESTS_START"): (S.TOOL_PREAMBLE, (Ev.REASONING_END,)),
            }
        )
    transitions.update(
        {
            (S.CONTENT, "TOOL_REQUESTS_START"): (S.TOOL_PREAMBLE, ()),
            (S.TOOL_PREAMBLE, "TOOL_REQUEST_START"): (S.TOOL_PREAMBLE, ()),
            (S.TOOL_PREAMBLE, "TOOL_NAME_START"): (S.TOOL_NAME, (Ev.TOOL_START,)),
            (S.TOOL_NAME, "TOOL_NAME_END"): (S.TOOL_PREAMBLE, ()),
            (S.TOOL_PREAMBLE, "TOOL_ARGS_START"): (S.TOOL_ARGS, ()),
            (S.TOOL_ARGS, "TOOL_ARGS_END"): (S.TOOL_BETWEEN, ()),
            (S.TOOL_BETWEEN, "TOOL_REQUEST_END"): (S.TOOL_PREAMBLE, (Ev.TOOL_END,)),
            (S.TOOL_PREAMBLE, "TOOL_REQUESTS_END"): (S.CONTENT, ()),
            # The end of turn is normally a stop token; in the text it ends
            # whatever is open and is never shown.
            (S.REASONING, "EOT"): (S.CONTENT, (Ev.REASONING_END,)),
            **{
                (state, "EOT"): (S.CONTENT, ())
                for state in (
                    S.CONTENT,
                    S.TOOL_PREAMBLE,
                    S.TOOL_NAME,
                    S.TOOL_ARGS,
                    S.TOOL_BETWEEN,
                )
            },
        }
    )
    return Grammar(
        name="plamo3",
        terminals={
            **think,
            "TOOL_REQUESTS_START": BEGIN_TOOL_REQUESTS,
            "TOOL_REQUESTS_END": END_TOOL_REQUESTS,
            "TOOL_REQUEST_START": BEGIN_TOOL_REQUEST,
            "TOOL_REQUEST_END": END_TOOL_REQUEST,
            "TOOL_NAME_START": BEGIN_TOOL_NAME,
            "TOOL_NAME_END": END_TOOL_NAME,
            "TOOL_ARGS_START": BEGIN_TOOL_ARGUMENTS,
            "TOOL_ARGS_END": END_TOOL_ARGUMENTS,
            "EOT": EOT,
        },
        # The markers are several tokens each: only EOT can match by id.
        id_terminals={"EOT": EOT, **think},
        transitions=transitions,
        initial_state=S.REASONING if thinking else S.CONTENT,
        wait_for_reasoning=thinking,
        strip_trailing_reasoning_ws=False,
        drop_ws_only_content_before_tools=True,
        strip_content_ws_with_tools=False,
        preserve_tokens=MARKER_PIECES,
    )


class Plamo3Parser(GrammarParser):
    def __init__(
        self,
        tokenizer: ParserTokenizer,
        tools: list[dict] | None = None,
        tool_choice: object = None,
        chat_template_kwargs: dict | None = None,
    ) -> None:
        self.thinking = (chat_template_kwargs or {}).get("enable_thinking", True)
        super().__init__(plamo3_grammar(bool(self.thinking)), tokenizer, tools, tool_choice)
        sequences = tokenizer.cache.get("plamo3")
        if sequences is None:
            literals = {text for text, _ in self.grammar.literals()}
            literals |= {BEGIN_THINK, END_THINK}
            sequences = tokenizer.cache["plamo3"] = {
                text: tuple(tokenizer.encode(text)) for text in literals
            }
        self._think_start_ids = list(sequences[BEGIN_THINK])
        self._think_end_ids = list(sequences[END_THINK])
        self._marker_ids = [
            ids for text, ids in sequences.items() if text in self.grammar.terminals.values()
        ]
        self._eot_id = tokenizer.vocab.get(EOT)

    # -- reasoning boundaries, as token sequences ----------------------------------------

    def is_reasoning_end(self, token_ids: Sequence[int]) -> bool:
        if not self.thinking:
            return True
        ids = list(token_ids)
        start, end = self._think_start_ids, self._think_end_ids
        for i in range(len(ids) - 1, -1, -1):
            if ids[i : i + len(end)] == end:
                return True
            if ids[i : i + len(start)] == start:
                return False
            if ids[i] == self._eot_id:
                return False
        return False

    def extract_content_ids(self, token_ids: list[int]) -> list[int]:
        if not self.thinking:
            return token_ids
        end = self._think_end_ids
        for i in range(len(token_ids) - len(end), -1, -1):
            if token_ids[i : i + len(end)] == end:
                return token_ids[i + len(end) :]
        return token_ids

    def extract_reasoning(self, text: str) -> tuple[str | None, str | None]:
        reasoning, content = super().extract_reasoning(text)
        return self._strip_unfinished_marker(reasoning), content

    # -- a marker cut off at the end -------------------------------------------------------

    def _strip_unfinished_marker(self, value: str | None) -> str | None:
        """``value`` without a trailing marker that the output cut short
        (compared as token ids: the marker's first tokens)."""
        if not value:
            return value
        start = value.rfind(MARKER_PREFIX)
        if start < 0:
            return value
        suffix_ids = tuple(self.tokenizer.encode(value[start:]))
        n = len(suffix_ids)
        if any(len(ids) > n and ids[:n] == suffix_ids for ids in self._marker_ids):
            return value[:start] or None
        return value

    def _events_to_delta(self, events: list[Event], finished: bool = False) -> ParsedDelta | None:
        if not finished:
            return super()._events_to_delta(events)
        delta = super()._events_to_delta(self._coalesce_tool_events(events), finished=True)
        if delta is None:
            return None
        # vLLM sets both fields here (null when empty), so both are sent.
        delta.reasoning = self._strip_unfinished_marker(delta.reasoning or None)
        if not self.skip_tool_parsing:
            delta.content = self._strip_unfinished_marker(delta.content or None)
        # Arguments never streamed are "{}", as in the non-streaming result.
        for call in delta.tool_calls:
            if call.has_function and not (call.arguments or "").strip():
                call.arguments = "{}"
        if delta.reasoning is None and delta.content in (None, UNSET) and not delta.tool_calls:
            return None
        return delta

    def _coalesce_tool_events(self, events: list[Event]) -> list[Event]:
        """At the end: each run of name (or argument) pieces as one event, a
        name without its cut-off marker; empty ones dropped."""
        combined: list[Event] = []
        for (kind, index), group in groupby(events, key=lambda e: (e.type, e.tool_index)):
            chunks = list(group)
            if kind not in (Ev.TOOL_NAME, Ev.ARGS):
                combined.extend(chunks)
                continue
            if kind == Ev.TOOL_NAME and index < 0:
                continue
            value = "".join(chunk.value for chunk in chunks)
            if kind == Ev.TOOL_NAME:
                value = self._strip_unfinished_marker(value) or ""
            if value:
                combined.append(replace(chunks[0], value=value))
        return combined

    def _on_args(self, event: Event, deltas: list[DeltaToolCall]) -> None:
        idx = event.tool_index
        slot = self._slots[idx]
        start = event.value.rfind(MARKER_PREFIX)
        if start >= 0:
            # A marker's start at the end of the arguments is not theirs.
            kept = event.value[:start]
            try:
                json.loads(slot.args + kept)
            except ValueError:
                pass
            else:
                event = replace(event, value=kept)
        sent_before = slot.name_sent
        super()._on_args(event, deltas)
        # The chunk that sent the name goes out as the first arguments.
        if event.value and not sent_before and slot.name_sent:
            deltas.append(DeltaToolCall(idx, arguments=event.value))

    def _args_json(self, raw: str, name: str) -> str:
        # The name is not in the arguments: they are the JSON as written.
        return raw.strip() or "{}"
