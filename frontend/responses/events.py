"""A streamed response's events, as vLLM 0.32's non-Harmony stream makes them
(``responses/streaming_events.py``: ``SimpleStreamingEventProcessor``).

Each engine step's parsed delta (reasoning, content, tool call pieces) is
split into single-kind parts; a part of another kind than the open item (or
of another tool call) closes that item (its ``...done`` events) and opens a
new one (``output_item.added``, and a ``content_part.added`` for reasoning and
text); then the part's delta event. Events are dicts in openai's key order
with a ``sequence_number`` slot that :class:`Framer` fills as it writes them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from frontend.ids import random_hex
from frontend.parsers import UNSET
from frontend.parsers.json_partial import PartialJSONError, loads_partial
from frontend.responses.output import (
    ToolNames,
    custom_call_item,
    custom_input,
    function_call_item,
    message_item,
    new_id,
    reasoning_item,
    stream_logprobs,
    text_part,
)

NONE, CONTENT, REASONING, TOOL_CALL = "none", "content", "reasoning", "tool_call"
SEQ = "sequence_number"


def event(kind: str, **fields: Any) -> dict[str, Any]:
    """An event with openai's field order: its fields, the sequence number
    where it sorts among them, then ``type``."""
    out: dict[str, Any] = {}
    for name in sorted([*fields, SEQ]):
        out[name] = fields.get(name)
    out["type"] = kind
    return out


class Framer:
    """SSE frames as vLLM writes them: ``event: <type>``, the compact JSON,
    sequence numbers from 0; no ``[DONE]``."""

    def __init__(self, encode: Callable[[Any], bytes]) -> None:
        self.encode = encode
        self.sequence = 0

    def frame(self, ev: dict[str, Any]) -> bytes:
        ev[SEQ] = self.sequence
        self.sequence += 1
        return b"event: " + ev["type"].encode() + b"\ndata: " + self.encode(ev) + b"\n\n"

    def frames(self, events: list[dict[str, Any]]) -> bytes:
        return b"".join(self.frame(ev) for ev in events)


def split(delta: Any) -> list[tuple[str, Any]]:
    """vLLM's ``split_delta``: (kind, value) parts in the order reasoning,
    content, tool calls (grouped by index). Absent or null fields are none."""
    parts: list[tuple[str, Any]] = []
    if delta.reasoning is not None and delta.reasoning is not UNSET:
        parts.append((REASONING, delta.reasoning))
    if delta.content is not None and delta.content is not UNSET:
        parts.append((CONTENT, delta.content))
    groups: dict[int, list[Any]] = {}
    for call in delta.tool_calls:
        groups.setdefault(call.index, []).append(call)
    parts.extend((TOOL_CALL, calls) for calls in groups.values())
    return parts


class EventMachine:
    """One streamed output's items: the open one and those done."""

    def __init__(self, names: ToolNames) -> None:
        self.names = names
        self.state = NONE
        self.output_index = 0
        self.item_id = ""
        self.text = ""  # the open item's text (reasoning, content or arguments)
        self.logprobs: list[dict[str, Any]] = []
        # Logprobs of steps that gave no text yet (a partial character, text a
        # parser holds): they go with the next text delta, as in vLLM's merged steps.
        self.held: list[dict[str, Any]] = []
        self.call_id = ""
        self.call_name = ""
        self.call_namespace: str | None = None
        self.call_index: int | None = None
        self.custom = False
        self.payload = ""  # a custom tool's input streamed so far
        self.items: list[dict[str, Any]] = []  # done, as output_item.done gave them

    def feed(self, delta: Any, logprobs: Callable[[], list[dict[str, Any]]]) -> list[dict]:
        """The events of one parsed delta; ``logprobs()``: its step's full logprobs."""
        out: list[dict[str, Any]] = []
        for kind, value in split(delta):
            target = self._target(kind, value)
            if target == NONE:
                if kind == CONTENT:
                    self.hold(logprobs)
                continue
            if target != CONTENT:
                self.held = []  # (the step's tokens were not the text's)
            first: Any = value[0] if target == TOOL_CALL else None
            if self.state != target or (
                first is not None and self.call_index is not None and first.index != self.call_index
            ):
                out += self.close()
                out += self._open(target, first)
            out += self._delta(target, value, logprobs)
        return out

    def hold(self, logprobs: Callable[[], list[dict[str, Any]]]) -> None:
        """A step with no text: its logprobs wait for the next text delta."""
        self.held += logprobs()

    @staticmethod
    def _target(kind: str, value: Any) -> str:
        if kind == TOOL_CALL:
            return TOOL_CALL if value[0].has_function else NONE
        if kind == REASONING:
            return REASONING  # even "": vLLM opens a reasoning item for it
        return CONTENT if value else NONE

    # ------------------------------------------------------------ open
    def _open(self, target: str, call: Any) -> list[dict[str, Any]]:
        self.state = target
        self.text = ""
        index = self.output_index
        if target == CONTENT:
            self.item_id, self.logprobs = new_id("msg"), []
            return [
                event(
                    "response.output_item.added",
                    item=message_item(self.item_id, [], "in_progress"),
                    output_index=index,
                ),
                event(
                    "response.content_part.added",
                    content_index=0,
                    item_id=self.item_id,
                    output_index=index,
                    part=text_part("", []),
                ),
            ]
        if target == REASONING:
            self.item_id = new_id("rs")
            return [
                event(
                    "response.output_item.added",
                    item=reasoning_item(self.item_id, None, "in_progress"),
                    output_index=index,
                ),
                event(
                    "response.content_part.added",
                    content_index=0,
                    item_id=self.item_id,
                    output_index=index,
                    part={"text": "", "type": "reasoning_text"},
                ),
            ]
        raw_name = call.name if isinstance(call.name, str) else ""
        self.custom = raw_name in self.names.custom
        self.call_name, self.call_namespace = (
            (raw_name, None) if self.custom else self.names.resolve(raw_name)
        )
        self.call_index = call.index
        self.call_id = (
            call.id if isinstance(call.id, str) and call.id else (f"chatcmpl-tool-{random_hex(8)}")
        )
        self.payload = ""
        if self.custom:
            self.item_id = new_id("ctc")
            item = custom_call_item(self.item_id, self.call_id, self.call_name, "")
        else:
            self.item_id = new_id("fc")
            item = function_call_item(
                self.item_id, self.call_id, self.call_name, self.call_namespace, "", "in_progress"
            )
        return [event("response.output_item.added", item=item, output_index=index)]

    # ------------------------------------------------------------ deltas
    def _delta(self, target: str, value: Any, logprobs: Callable[[], list]) -> list[dict]:
        index = self.output_index
        if target == REASONING:
            self.text += value
            return [
                event(
                    "response.reasoning_text.delta",
                    content_index=0,
                    delta=value,
                    item_id=self.item_id,
                    output_index=index,
                )
            ]
        if target == CONTENT:
            full = self.held + logprobs()
            self.held = []
            self.text += value
            self.logprobs += full
            return [
                event(
                    "response.output_text.delta",
                    content_index=0,
                    delta=value,
                    item_id=self.item_id,
                    logprobs=stream_logprobs(full),
                    output_index=index,
                )
            ]
        arguments = "".join(
            c.arguments for c in value if c.has_function and isinstance(c.arguments, str)
        )
        if not arguments:
            return []
        self.text += arguments
        if self.custom:
            return self._custom_delta(_payload_prefix(self.text))
        return [
            event(
                "response.function_call_arguments.delta",
                delta=arguments,
                item_id=self.item_id,
                output_index=index,
            )
        ]

    def _custom_delta(self, payload: str) -> list[dict[str, Any]]:
        streamed = self.payload
        if payload == streamed:
            return []
        self.payload = payload
        # A payload that does not extend what was sent is sent again whole.
        piece = payload[len(streamed) :] if payload.startswith(streamed) else payload
        return [
            event(
                "response.custom_tool_call_input.delta",
                delta=piece,
                item_id=self.item_id,
                output_index=self.output_index,
            )
        ]

    # ------------------------------------------------------------ close
    def close(self) -> list[dict[str, Any]]:
        """The open item's ``...done`` events (none when nothing is open)."""
        state, index, item_id, text = self.state, self.output_index, self.item_id, self.text
        if state == NONE:
            return []
        if state == CONTENT:
            part = text_part(text, self.logprobs or None)
            item = message_item(item_id, [part] if text else [], "completed")
            out = [
                event(
                    "response.output_text.done",
                    content_index=0,
                    item_id=item_id,
                    logprobs=[],
                    output_index=index,
                    text=text,
                ),
                event(
                    "response.content_part.done",
                    content_index=0,
                    item_id=item_id,
                    output_index=index,
                    part=part,
                ),
            ]
        elif state == REASONING:
            item = reasoning_item(item_id, text, "completed")
            out = [
                event(
                    "response.reasoning_text.done",
                    content_index=0,
                    item_id=item_id,
                    output_index=index,
                    text=text,
                ),
                event(
                    "response.content_part.done",
                    content_index=0,
                    item_id=item_id,
                    output_index=index,
                    part={"text": text, "type": "reasoning_text"},
                ),
            ]
        elif self.custom:
            payload = custom_input(text)
            out = self._custom_delta(payload)
            out.append(
                event(
                    "response.custom_tool_call_input.done",
                    input=payload,
                    item_id=item_id,
                    output_index=index,
                )
            )
            item = custom_call_item(item_id, self.call_id, self.call_name, payload)
        else:
            done = event(
                "response.function_call_arguments.done",
                arguments=text,
                item_id=item_id,
                output_index=index,
            )
            done["name"] = self.call_name  # (vLLM passes it as an extra field: last)
            out = [done]
            item = function_call_item(
                item_id, self.call_id, self.call_name, self.call_namespace, text, "completed"
            )
        out.append(event("response.output_item.done", item=item, output_index=index))
        self.items.append(item)
        self.output_index += 1
        self.state = NONE
        self.custom = False
        self.call_namespace = None
        return out


def _payload_prefix(arguments: str) -> str:
    """vLLM's ``decode_custom_tool_input_prefix``: the longest decodable
    prefix of a custom tool's ``input`` in partial shim arguments."""
    try:
        parsed, _ = loads_partial(arguments, True)
    except (PartialJSONError, ValueError, IndexError):
        return ""
    payload = parsed.get("input") if isinstance(parsed, dict) else None
    if not isinstance(payload, str):
        return ""
    if payload and "\ud800" <= payload[-1] <= "\udbff":
        payload = payload[:-1]
    return payload
