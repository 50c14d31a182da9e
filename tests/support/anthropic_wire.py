"""Messages API replies from two servers, compared as vLLM's parity modules do.

* ``send``: one POST (JSON body, or raw bytes with a content type); a stream
  is parsed into ``(event name, data)`` pairs, and its framing checked: every
  event is ``event: <name>\\ndata: <json>\\n\\n`` whose ``type`` is the name.
* ``masked``: ids, thinking signatures and tool_use ids differ by design
  (random in both servers); they are checked for shape, then masked.
* ``fold``: a stream as its blocks. vLLM's server merges engine steps into
  one chat chunk when it falls behind the engine (and parses them together),
  so the number of deltas per block is not part of the contract: per block,
  its start event, the concatenation of each delta kind and its stop; the
  block order, message_start, message_delta, message_stop and errors exactly.
* ``assert_same``: status and content type; errors in either shape with
  their type, message (unless ``message_differs`` says why not) and ``param``;
  bodies after masking; streams folded.
"""

from __future__ import annotations

import http.client
import json
import re
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

TIMEOUT_S = 120.0
MESSAGES = "/v1/messages"
COUNT = "/v1/messages/count_tokens"
HEX32 = re.compile(r"^[0-9a-f]{32}$")


@dataclass
class Shape:
    id: str
    body: Any
    path: str = MESSAGES
    content_type: str = "application/json"
    # error shapes whose message differs on purpose (status and type match): the reason
    message_differs: str | None = None


@dataclass
class Reply:
    status: int
    content_type: str
    body: bytes
    events: list[tuple[str, Any]] | None = field(default=None)

    def json(self) -> Any:
        return json.loads(self.body)


def send(base_url: str, s: Shape, headers: dict[str, str] | None = None) -> Reply:
    url = urlsplit(base_url)
    conn = http.client.HTTPConnection(url.hostname, url.port, timeout=TIMEOUT_S)
    data = s.body if isinstance(s.body, bytes) else json.dumps(s.body).encode()
    try:
        conn.request("POST", s.path, body=data,
                     headers={"Content-Type": s.content_type, **(headers or {})})
        resp = conn.getresponse()
        reply = Reply(resp.status, resp.getheader("Content-Type", ""), resp.read())
    finally:
        conn.close()
    if reply.content_type.startswith("text/event-stream"):
        reply.events = parse_events(reply.body)
    return reply


def parse_events(body: bytes) -> list[tuple[str, Any]]:
    text = body.decode("utf-8")
    assert text.endswith("\n\n"), f"stream does not end with a blank line: {text[-200:]!r}"
    events = []
    for block in text.split("\n\n")[:-1]:
        lines = block.split("\n")
        assert len(lines) == 2 and lines[0].startswith("event: ") \
            and lines[1].startswith("data: "), f"bad SSE event {block!r}"
        name, data = lines[0][len("event: "):], json.loads(lines[1][len("data: "):])
        assert data["type"] == name, block
        events.append((name, data))
    return events


def masked(value: Any) -> Any:
    """Ids and signatures replaced by their kind, after checking their shape."""
    if isinstance(value, list):
        return [masked(v) for v in value]
    if not isinstance(value, dict):
        return value
    out = {}
    for key, v in value.items():
        if key == "signature":
            assert HEX32.match(v), v
            v = "<signature>"
        elif key == "id" and isinstance(v, str):
            assert v.startswith(("chatcmpl-", "toolu_", "call_")), v
            v = "<tool id>" if "tool" in v or v.startswith(("toolu_", "call_")) else "<id>"
        out[key] = masked(v)
    return out


def fold(events: list[tuple[str, Any]]) -> dict[str, Any]:
    """A stream as message_start, its blocks (start, joined deltas by kind,
    stop), the message_delta, and whether message_stop and errors came."""
    out: dict[str, Any] = {"start": None, "blocks": [], "delta": None, "stop": 0,
                           "errors": [], "order": []}
    open_block: dict | None = None
    for name, data in events:
        if not out["order"] or out["order"][-1] != name:
            out["order"].append(name)  # the event kinds, repeats collapsed
        if name == "message_start":
            assert out["start"] is None
            out["start"] = masked(data)
        elif name == "content_block_start":
            assert open_block is None, "a block started inside another"
            assert data["index"] == len(out["blocks"]), data
            open_block = {"start": masked(data["content_block"]), "deltas": {}, "kinds": []}
        elif name == "content_block_delta":
            assert open_block is not None and data["index"] == len(out["blocks"]), data
            delta = data["delta"]
            kind = delta["type"]
            if not open_block["kinds"] or open_block["kinds"][-1] != kind:
                open_block["kinds"].append(kind)
            value = "<signature>" if kind == "signature_delta" else \
                next(v for k, v in delta.items() if k != "type")
            open_block["deltas"][kind] = open_block["deltas"].get(kind, "") + value
        elif name == "content_block_stop":
            assert open_block is not None and data["index"] == len(out["blocks"]), data
            if open_block["start"]["type"] == "thinking":  # its signature, last
                assert open_block["kinds"][-1] == "signature_delta", open_block
            out["blocks"].append(open_block)
            open_block = None
        elif name == "message_delta":
            assert open_block is None and out["delta"] is None
            out["delta"] = data
        elif name == "message_stop":
            out["stop"] += 1
        elif name == "error":
            out["errors"].append(data)
        else:
            raise AssertionError(f"unexpected event {name}")
    if open_block is not None:
        out["blocks"].append({**open_block, "unclosed": True})
    return out


def error_of(reply: Reply) -> tuple[str, dict]:
    """("anthropic" or "openai", the error object), after checking the envelope."""
    body = reply.json()
    if body.get("type") == "error":
        assert set(body) == {"type", "error"} and set(body["error"]) == {"type", "message"}
        return "anthropic", body["error"]
    assert set(body) == {"error"}, body
    assert set(body["error"]) == {"message", "type", "param", "code"}, body
    return "openai", body["error"]


def assert_same(s: Shape, ours: Reply, theirs: Reply) -> None:
    assert ours.status == theirs.status, (
        f"status {ours.status} != vLLM's {theirs.status}\nours: {ours.body[:2000]!r}\n"
        f"vLLM: {theirs.body[:2000]!r}")
    assert ours.content_type.split(";")[0] == theirs.content_type.split(";")[0]
    if theirs.events is not None:
        assert ours.events is not None
        assert fold(ours.events) == fold(theirs.events), (
            f"\nours: {ours.events}\nvLLM: {theirs.events}")
        return
    if theirs.status >= 400:
        our_shape, our_err = error_of(ours)
        their_shape, their_err = error_of(theirs)
        assert our_shape == their_shape, (our_err, their_err)
        keys = ["type"] if s.message_differs else ["type", "message"]
        if their_shape == "openai":
            keys += ["code", "param"]
        for key in keys:
            assert our_err[key] == their_err[key], (
                f"error.{key}: {our_err!r} != vLLM's {their_err!r}")
        return
    assert masked(ours.json()) == masked(theirs.json())
