"""Events -> reasoning, content and tool calls (vLLM 0.32's ``ParserEngine``).

One :class:`GrammarParser` serves either as a reasoning parser or as a tool
parser (the composite runs two instances for a grammar that does both, as
vLLM's adapters do).  Tool calls are tracked in slots: the name is sent once
known, then argument pieces; grammars with non-JSON arguments (Qwen3's XML
parameters) convert the raw text to JSON and stream only its stable prefix.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence

from frontend.parsers.arguments import (
    coerce_arguments,
    find_tool_properties,
    stable_prefix,
    streamable_string_keys,
)
from frontend.parsers.grammar.machine import Ev, Event, Grammar, Machine, State
from frontend.parsers.tokenizer import ParserTokenizer
from frontend.parsers.types import (
    UNSET,
    DeltaToolCall,
    ExtractedToolCalls,
    ParsedDelta,
    ToolCall,
    make_tool_call_id,
)


class _Slot:
    __slots__ = ("id", "name", "args", "name_sent", "string_keys", "streamed_json")

    def __init__(self) -> None:
        self.id = ""
        self.name = ""
        self.args = ""
        self.name_sent = False
        self.string_keys: set[str] | None = None
        self.streamed_json = ""


_NAME_RE = re.compile(r'"name"\s*:\s*"([^"]*)"')


class GrammarParser:
    """A grammar-driven parser for one choice's output."""

    def __init__(
        self,
        grammar: Grammar,
        tokenizer: ParserTokenizer,
        tools: list[dict] | None = None,
        tool_choice: object = None,
    ) -> None:
        self.grammar = grammar
        self.tokenizer = tokenizer
        self._tools = tools
        self._suppress_tool_calls = tool_choice == "none" and bool(tools)
        self._machine = Machine(grammar, tokenizer)
        self._has_reasoning = (
            "THINK_END" in grammar.id_terminals
            or "THINK_START" in grammar.terminals
            or "THINK_END" in grammar.terminals
            or grammar.initial_state == State.REASONING
        )
        self.reasoning_ended = not self._has_reasoning
        self._streaming_initialized = False
        self._slots: list[_Slot] = []
        self._deferred_content = ""
        self._deferred_reasoning = ""
        self._content_has_nonws = False

        vocab = tokenizer.vocab
        start_text = grammar.id_terminals.get("THINK_START")
        end_text = grammar.id_terminals.get("THINK_END")
        self._start_id = vocab.get(start_text) if start_text else None
        self._end_id = vocab.get(end_text) if end_text else None
        self._boundary_ids = frozenset(vocab[t] for t in grammar.turn_boundary_tokens if t in vocab)
        self._end_ids = self._reasoning_end_ids(vocab)

    # -- switches the composite flips ---------------------------------------------

    @property
    def skip_tool_parsing(self) -> bool:
        return self._machine.skip_tool_parsing

    @skip_tool_parsing.setter
    def skip_tool_parsing(self, value: bool) -> None:
        self._machine.skip_tool_parsing = value

    @property
    def skip_reasoning_parsing(self) -> bool:
        return self._machine.skip_reasoning_parsing

    @skip_reasoning_parsing.setter
    def skip_reasoning_parsing(self, value: bool) -> None:
        self._machine.skip_reasoning_parsing = value

    # -- lifecycle ---------------------------------------------------------------

    def _reset(self, initial_state: State | None = None) -> None:
        self._machine.reset(initial_state)
        self.reasoning_ended = not self._has_reasoning
        self._slots.clear()
        self._deferred_content = ""
        self._deferred_reasoning = ""
        self._content_has_nonws = False

    def initialize_streaming(self, initial_state: State | None = None) -> None:
        if not self._streaming_initialized:
            self._streaming_initialized = True
            self._reset(initial_state)

    def _feed(self, delta_text: str, token_ids: Sequence[int]) -> list[Event]:
        return self._machine.feed(delta_text, token_ids)

    def finish_streaming(self) -> ParsedDelta | None:
        events = self._machine.finish()
        if events or self._deferred_content:
            return self._events_to_delta(events, finished=True)
        return None

    def streaming_fallback_content(self) -> str | None:
        """Content for a stream that ended inside reasoning (none by default)."""
        return None

    # -- reasoning ---------------------------------------------------------------

    def extract_reasoning(self, text: str) -> tuple[str | None, str | None]:
        self._reset()
        events = self._feed(text, [])
        events.extend(self._machine.finish())
        reasoning_parts, content_parts = [], []
        for event in events:
            if event.type == Ev.REASONING:
                reasoning_parts.append(event.value)
            elif event.type == Ev.TEXT:
                content_parts.append(event.value)
            elif event.type == Ev.REASONING_END:
                self.reasoning_ended = True
        reasoning = "".join(reasoning_parts)
        if self.grammar.strip_trailing_reasoning_ws:
            reasoning = reasoning.rstrip()
        return reasoning or None, "".join(content_parts) or None

    def extract_reasoning_streaming(
        self, delta_text: str, token_ids: Sequence[int]
    ) -> ParsedDelta | None:
        self.initialize_streaming()
        return self._strip_trailing_reasoning(
            self._events_to_delta(self._feed(delta_text, token_ids))
        )

    def _reasoning_end_ids(self, vocab: dict[str, int]) -> frozenset[int]:
        """Token ids that end reasoning (empty if some end is text-only)."""
        ends: dict[str, State] = {}
        for (state, terminal), (nxt, events) in self.grammar.transitions.items():
            if state != State.REASONING:
                continue
            if Ev.REASONING_END in events:
                ends.setdefault(terminal, nxt)
            elif nxt != State.REASONING:
                return frozenset()
        ids: set[int] = set()
        for terminal, nxt in ends.items():
            text = self.grammar.id_terminals.get(terminal)
            token_id = vocab.get(text) if text is not None else None
            if token_id is not None:
                ids.add(token_id)
            elif nxt == State.CONTENT:
                return frozenset()
        return frozenset(ids)

    def is_reasoning_end(self, token_ids: Sequence[int]) -> bool:
        """Whether reasoning is already over at the end of ``token_ids`` (a prompt)."""
        grammar = self.grammar
        start = grammar.transitions.get((grammar.initial_state, "THINK_START"))
        start_opens = start is not None and start[0] == State.REASONING
        for token_id in reversed(token_ids):
            if token_id in self._end_ids:
                return True
            if token_id == self._start_id:
                if start_opens:
                    return False
                break
            if token_id in self._boundary_ids:
                break
        return not self.grammar.wait_for_reasoning

    def extract_content_ids(self, token_ids: list[int]) -> list[int]:
        if not self.grammar.wait_for_reasoning:
            return token_ids
        if self._end_id is not None:
            for i in range(len(token_ids) - 1, -1, -1):
                if token_ids[i] == self._end_id:
                    return token_ids[i + 1 :]
        if self._end_ids:
            turn_start = 0
            for i in range(len(token_ids) - 1, -1, -1):
                if token_ids[i] in self._boundary_ids:
                    turn_start = i + 1
                    break
            for i in range(turn_start, len(token_ids)):
                if token_ids[i] in self._end_ids:
                    return token_ids[i:]
        return token_ids

    @property
    def reasoning_tokens(self) -> int:
        return self._machine.reasoning_tokens

    def _strip_trailing_reasoning(self, delta: ParsedDelta | None) -> ParsedDelta | None:
        """Hold back trailing whitespace of reasoning until more reasoning follows."""
        if not self.grammar.strip_trailing_reasoning_ws:
            return delta
        if delta is not None and delta.reasoning is not UNSET and delta.reasoning is not None:
            combined = self._deferred_reasoning + delta.reasoning
            trimmed = combined.rstrip()
            self._deferred_reasoning = combined[len(trimmed) :]
            delta.reasoning = trimmed or None
            if delta.reasoning is None and delta.content in (UNSET, None) and not delta.tool_calls:
                return None
        elif self._deferred_reasoning and self.reasoning_ended:
            self._deferred_reasoning = ""
        return delta

    # -- tool calls ----------------------------------------------------------------

    def extract_tool_calls_from_content(self, content: str) -> ExtractedToolCalls:
        """Non-streaming: tool calls in reasoning-free content."""
        _, parsed_content, info = self._single_pass(content, [], State.CONTENT)
        if parsed_content is not None and info.content is None:
            info.content = parsed_content
        return info

    def extract_tool_calls_streaming(
        self, delta_text: str, token_ids: Sequence[int]
    ) -> ParsedDelta | None:
        self.initialize_streaming(State.CONTENT)
        return self._strip_trailing_reasoning(
            self._events_to_delta(self._feed(delta_text, token_ids))
        )

    def _single_pass(
        self, text: str, token_ids: Sequence[int], initial_state: State | None
    ) -> tuple[str | None, str | None, ExtractedToolCalls]:
        self._reset(initial_state)
        events = self._feed(text, token_ids)
        events.extend(self._machine.finish())
        delta = self._events_to_delta(events, finished=True)
        info = self._extracted_result()
        reasoning = delta.reasoning if delta is not None else None
        if reasoning and self.grammar.strip_trailing_reasoning_ws:
            reasoning = reasoning.rstrip() or None
        content = delta.content if delta is not None else None
        if content:
            content = self._strip_content_whitespace(content, info.tools_called)
        return reasoning or None, content or None, info

    def count_reasoning_tokens_once(self, token_ids: Sequence[int]) -> int:
        """Reasoning tokens of a complete output, parsed afresh."""
        self._single_pass(self.tokenizer.decode(list(token_ids)), token_ids, None)
        return self._machine.reasoning_tokens

    def _strip_content_whitespace(self, content: str, tools_called: bool) -> str | None:
        if tools_called:
            if self.grammar.strip_content_ws_with_tools:
                content = content.strip()
            elif self.grammar.drop_ws_only_content_before_tools and not content.strip():
                content = ""
        return content or None

    # -- events -> delta -------------------------------------------------------------

    def _events_to_delta(self, events: list[Event], finished: bool = False) -> ParsedDelta | None:
        if not events and not self._deferred_content:
            return None
        tool_deltas: list[DeltaToolCall] = []
        content_parts: list[str] = []
        reasoning_parts: list[str] = []
        carried = self._deferred_content
        seen_tool_event = False
        suppress = self._suppress_tool_calls
        for event in events:
            kind = event.type
            if kind == Ev.TEXT:
                if seen_tool_event:
                    # Text after a tool event waits: it may belong before or
                    # after the call depending on what this step completes.
                    self._deferred_content += event.value
                else:
                    content_parts.append(event.value)
            elif kind == Ev.REASONING:
                reasoning_parts.append(event.value)
            elif kind == Ev.REASONING_END:
                self.reasoning_ended = True
            elif suppress:
                continue
            elif kind == Ev.TOOL_START:
                seen_tool_event = True
                while len(self._slots) <= event.tool_index:
                    self._slots.append(_Slot())
            elif kind == Ev.TOOL_NAME:
                seen_tool_event = True
                self._slots[event.tool_index].name += event.value
            elif kind == Ev.ARGS:
                seen_tool_event = True
                self._on_args(event, tool_deltas)
            elif kind == Ev.TOOL_END:
                seen_tool_event = True
                self._on_tool_end(event, tool_deltas)

        if len(tool_deltas) > 1:
            tool_deltas = _coalesce(tool_deltas)

        if self._deferred_content and (not seen_tool_event or not tool_deltas):
            deferred_now = self._deferred_content[len(carried) :]
            if carried:
                content_parts.insert(0, carried)
            if deferred_now:
                content_parts.append(deferred_now)
            self._deferred_content = ""

        content = "".join(content_parts)
        if not self._content_has_nonws and content:
            # Whitespace-only content waits for real content, and is dropped
            # when tool calls come instead.
            if content.strip():
                self._content_has_nonws = True
            elif self._slots:
                if self.grammar.drop_ws_only_content_before_tools:
                    content = ""
            elif not finished:
                self._deferred_content = content
                content = ""

        reasoning = "".join(reasoning_parts)
        if not (content or tool_deltas or reasoning):
            return None
        delta = ParsedDelta()
        if content:
            delta.content = content
        if reasoning:
            delta.reasoning = reasoning
        delta.tool_calls = tool_deltas
        return delta

    def _ensure_tool_id(self, slot: _Slot, name: str) -> None:
        if not slot.id:
            slot.id = make_tool_call_id()

    def _accept_tool_name(self, name: str) -> bool:
        return bool(name)

    def _send_name(
        self, idx: int, deltas: list[DeltaToolCall], name: str | None, arguments: object = UNSET
    ) -> bool:
        if name is None or not self._accept_tool_name(name):
            return False
        slot = self._slots[idx]
        slot.name = name
        slot.name_sent = True
        slot.string_keys = streamable_string_keys(find_tool_properties(self._tools, name))
        self._ensure_tool_id(slot, name)
        deltas.append(
            DeltaToolCall(idx, id=slot.id, type="function", name=name, arguments=arguments)
        )
        return True

    def _on_args(self, event: Event, deltas: list[DeltaToolCall]) -> None:
        slot = self._slots[event.tool_index]
        if event.value:
            slot.args += event.value
        if not slot.name_sent:
            if slot.name:
                self._send_name(event.tool_index, deltas, slot.name)
            elif event.value:
                self._send_name(event.tool_index, deltas, self._try_extract_name(event.tool_index))
        elif event.value:
            piece = self._arg_delta(event.tool_index, event.value)
            if piece:
                deltas.append(DeltaToolCall(event.tool_index, arguments=piece))

    def _on_tool_end(self, event: Event, deltas: list[DeltaToolCall]) -> None:
        idx = event.tool_index
        if idx >= len(self._slots):
            return
        remaining = self._flush_converted_args(idx)
        slot = self._slots[idx]
        if not slot.name_sent:
            name = slot.name or self._try_extract_name(idx) or ""
            if self._send_name(idx, deltas, name, arguments=remaining or ""):
                remaining = None
        if remaining and slot.name_sent:
            deltas.append(DeltaToolCall(idx, arguments=remaining))

    def _try_extract_name(self, idx: int) -> str | None:
        m = _NAME_RE.search(self._slots[idx].args)
        return m.group(1) or None if m else None

    # -- argument conversion ------------------------------------------------------------

    def _arg_delta(self, idx: int, raw_piece: str) -> str | None:
        converter = self.grammar.arg_converter
        if converter is None:
            return raw_piece
        if not self.grammar.stream_arg_deltas:
            return None
        structural = self.grammar.arg_structural_chars
        if structural is not None and structural.isdisjoint(raw_piece):
            return None
        slot = self._slots[idx]
        try:
            current = self._convert_args(slot.args, True)
        except (ValueError, TypeError):
            return None
        if not current:
            return None
        if slot.name:
            current = self._fix_arg_types(current, slot.name)
        safe = stable_prefix(current, slot.string_keys)
        previous = slot.streamed_json
        if not safe or safe == previous:
            return None
        if previous and not safe.startswith(previous):
            return None
        piece = safe[len(previous) :]
        if piece:
            slot.streamed_json = safe
            return piece
        return None

    def _convert_args(self, raw: str, partial: bool) -> str:
        """The grammar's ``arg_converter`` (a parser may wrap it)."""
        converter = self.grammar.arg_converter
        assert converter is not None
        return converter(raw, partial)

    def _flush_converted_args(self, idx: int) -> str | None:
        converter = self.grammar.arg_converter
        if converter is None:
            return None
        slot = self._slots[idx]
        try:
            final = self._convert_args(slot.args, False)
        except (ValueError, TypeError):
            return None
        if final:
            final = self._fix_arg_types(final, slot.name)
        previous = slot.streamed_json
        if final and len(final) > len(previous):
            if previous and not final.startswith(previous):
                return None
            slot.streamed_json = final
            return final[len(previous) :]
        return None

    def _fix_arg_types(self, args_json: str, name: str) -> str:
        """Coerce argument values to the tool schema's types."""
        if not self._tools or not name:
            return args_json
        try:
            args = json.loads(args_json)
        except ValueError:
            return args_json
        if not isinstance(args, dict):
            return args_json
        properties = find_tool_properties(self._tools, name)
        if not properties:
            return args_json
        if coerce_arguments(args, properties):
            return json.dumps(args, ensure_ascii=False)
        return args_json

    # -- non-streaming result ------------------------------------------------------------

    def _extracted_result(self) -> ExtractedToolCalls:
        calls: list[ToolCall] = []
        for slot in self._slots:
            if not slot.name and not slot.args:
                continue
            name = slot.name.strip()
            raw = slot.args
            if not name and raw.strip():
                name, args = self._name_and_args(raw)
            elif raw.strip():
                converter = self.grammar.arg_converter
                if converter is not None:
                    try:
                        args = self._convert_args(raw, False)
                    except (ValueError, TypeError):
                        args = self._args_json(raw, name)
                else:
                    args = self._args_json(raw, name)
            else:
                args = "{}"
            if self._accept_tool_name(name):
                self._ensure_tool_id(slot, name)
                calls.append(ToolCall(name, self._fix_arg_types(args, name), slot.id))
        content = self._strip_content_whitespace("", bool(calls))
        return ExtractedToolCalls(bool(calls), calls, content)

    def _name_and_args(self, raw: str) -> tuple[str, str]:
        """A ``{"name": ..., "arguments": ...}`` envelope, when the body is one."""
        raw = raw.strip()
        try:
            parsed = json.loads(raw)
        except ValueError:
            return "", raw
        if not isinstance(parsed, dict):
            return "", raw
        name = parsed.get("name", "")
        if not isinstance(name, str):  # vLLM fails the request here
            name = ""
        for key in ("arguments", "parameters"):
            if key in parsed:
                value = parsed[key]
                return name, value if isinstance(value, str) else json.dumps(
                    value, ensure_ascii=False
                )
        rest = {k: v for k, v in parsed.items() if k != "name"}
        return name, json.dumps(rest, ensure_ascii=False)

    def _args_json(self, raw: str, name: str) -> str:
        if not raw.strip():
            return "{}"
        return self._name_and_args(raw)[1]


def _coalesce(deltas: list[DeltaToolCall]) -> list[DeltaToolCall]:
    """One entry per tool index: later pieces merge into the first."""
    merged: dict[int, DeltaToolCall] = {}
    for tc in deltas:
        first = merged.get(tc.index)
        if first is None:
            merged[tc.index] = tc
            continue
        if tc.id not in (UNSET, None) and first.id in (UNSET, None):
            first.id = tc.id
        if tc.type not in (UNSET, None) and first.type in (UNSET, None):
            first.type = tc.type
        if tc.name not in (UNSET, None) and first.name in (UNSET, None):
            first.name = tc.name
        if tc.arguments not in (UNSET, None):
            if first.arguments in (UNSET, None):
                first.arguments = tc.arguments
            else:
                first.arguments += tc.arguments
    if len(merged) == len(deltas):
        return deltas
    return list(merged.values())
