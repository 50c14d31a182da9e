"""Chat stream deltas -> the Messages API's events, as vLLM's
``message_stream_converter`` turns chat's chunks into them.

One content block is open at a time. A reasoning delta opens a thinking
block (closed with a ``signature_delta`` before its ``content_block_stop``),
a content delta a text block, a tool call with an id and a name a tool_use
block whose argument pieces follow as ``input_json_delta``. Text that comes
while a tool_use block is open is held back and sent as a text block of its
own once that block closes. No ``ping`` events (vLLM sends none).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from frontend.anthropic.response import signature, stop_reason


def frame(name: bytes, data: bytes) -> bytes:
    return b"event: " + name + b"\ndata: " + data + b"\n\n"


def _is_json(text: str) -> bool:
    try:
        json.loads(text)
    except json.JSONDecodeError:
        return False
    return True


class EventStream:
    """One message's event sequence; each method returns the events' bytes."""

    def __init__(self, encode: Callable[[Any], bytes]) -> None:
        self.encode = encode
        self.next_index = 0  # the next block's index
        self.block_type: str | None = None  # the open block's
        self.block_index = 0
        self.signature: str | None = None  # an open thinking block's, until sent
        self.tool_use_id: str | None = None
        self.pending: list[str] = []  # text held back while a tool_use block is open
        self.finish_reason: str | None = None
        self.stop: int | str | None = None  # chat's stop_reason
        self.tool_used = False
        self.last_tool_args: list[str] = []  # only the last call can be cut short
        self.tool_ids: dict[int, str] = {}  # a call's index -> its tool_use id

    def _event(self, name: bytes, event: dict) -> bytes:
        return frame(name, self.encode(event))

    def _delta(self, delta: dict) -> bytes:
        event = {"type": "content_block_delta", "delta": delta, "index": self.block_index}
        return self._event(b"content_block_delta", event)

    # ------------------------------------------------------------ blocks
    def _start(self, block: dict, out: list[bytes]) -> None:
        event = {"type": "content_block_start", "content_block": block, "index": self.next_index}
        out.append(self._event(b"content_block_start", event))
        self.block_type = block["type"]
        self.block_index = self.next_index
        self.signature = signature() if block["type"] == "thinking" else None
        self.tool_use_id = block["id"] if block["type"] == "tool_use" else None

    def _stop(self, out: list[bytes]) -> None:
        if self.block_type is None:
            return
        if self.signature is not None:
            out.append(self._delta({"type": "signature_delta", "signature": self.signature}))
        event = {"type": "content_block_stop", "index": self.block_index}
        out.append(self._event(b"content_block_stop", event))
        self.block_type = self.signature = self.tool_use_id = None
        self.pending.clear()
        self.next_index += 1

    def _stop_and_flush(self, out: list[bytes]) -> None:
        """Close the open block, then send the held-back text as a block of its own."""
        held, self.pending = self.pending, []
        self._stop(out)
        if held:
            self._start({"type": "text", "text": ""}, out)
            out.append(self._delta({"type": "text_delta", "text": "".join(held)}))
            self._stop(out)

    # ------------------------------------------------------------ the stream
    def start(self, message_id: str, model: str, input_tokens: int) -> bytes:
        """message_start (vLLM's is the role chunk's: no content, no cache fields)."""
        message: dict[str, Any] = {
            "id": message_id,
            "type": "message",
            "role": "assistant",
            "content": [],
            "model": model,
            "stop_reason": None,
            "stop_sequence": None,
            "usage": {"input_tokens": input_tokens, "output_tokens": 0},
        }
        return self._event(b"message_start", {"type": "message_start", "message": message})

    def chunk(
        self,
        reasoning: str | None,
        content: str | None,
        tool_calls: list[dict],
        finish_reason: str | None,
        stop: int | str | None,
    ) -> bytes:
        """One chat chunk's delta (and its finish, if it is the last)."""
        out: list[bytes] = []
        if finish_reason is not None:
            self.finish_reason, self.stop = finish_reason, stop
        if reasoning:
            if self.block_type != "thinking":
                self._stop_and_flush(out)
                self._start({"type": "thinking", "thinking": ""}, out)
            out.append(self._delta({"type": "thinking_delta", "thinking": reasoning}))
        if content:
            if self.block_type == "tool_use":
                self.pending.append(content)
            else:
                if self.block_type != "text":
                    self._stop_and_flush(out)
                    self._start({"type": "text", "text": ""}, out)
                out.append(self._delta({"type": "text_delta", "text": content}))
        for call in tool_calls:
            self._tool_call(call, out)
        return b"".join(out)

    def _tool_call(self, call: dict, out: list[bytes]) -> None:
        function = call.get("function") or {}
        arguments = function.get("arguments")
        call_id = call.get("id")
        if call_id is not None:
            self.tool_ids[call["index"]] = call_id
            name = function.get("name")
            if self.tool_use_id != call_id and name is not None:
                self._stop_and_flush(out)
                self.tool_used = True
                self.last_tool_args = []
                self._start({"type": "tool_use", "id": call_id, "name": name, "input": {}}, out)
        else:  # a later piece: only the open block's arguments go out
            call_id = self.tool_ids.get(call["index"])
        if arguments and call_id is not None and self.tool_use_id == call_id:
            self.last_tool_args.append(arguments)
            out.append(self._delta({"type": "input_json_delta", "partial_json": arguments}))

    def finish(self, usage: dict[str, int]) -> bytes:
        """After chat's usage chunk: the last block closed, message_delta, message_stop."""
        out: list[bytes] = []
        self._stop_and_flush(out)
        complete = self.tool_used and _is_json("".join(self.last_tool_args))
        reason, sequence = stop_reason(
            self.finish_reason or "stop", self.stop, self.tool_used, complete
        )
        delta = {"stop_reason": reason, "stop_sequence": sequence}
        out.append(
            self._event(b"message_delta", {"type": "message_delta", "delta": delta, "usage": usage})
        )
        out.append(self._event(b"message_stop", {"type": "message_stop"}))
        return b"".join(out)
