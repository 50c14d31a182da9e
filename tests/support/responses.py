"""Comparing Responses API answers across servers (ours and vLLM's).

Random parts are masked: item ids (``msg_``/``rs_``/``fc_`` + hex) keep their
prefix, tool call ids their ``chatcmpl-tool-`` prefix, response ids without
a ``request_id`` theirs; ``created_at`` and prefix-cache hits
(``cached_tokens``: each engine's cache has its own history) are dropped.

Streams are folded: vLLM's API server merges engine steps into one event when
it falls behind the engine, so the number of ``...delta`` events is not the
contract. A run of delta events of one kind for one output item becomes one
entry (the joined text and logprobs); every other event is kept whole (its
sequence number aside, which must count 0, 1, 2, ... on each side).

A step that gives no text (a partial character, text a parser holds) has its
logprobs dropped by vLLM unless it merged that step with a later one; ours
carries them to the next text delta (the README's difference). So a logprobs
list of vLLM's may be a subsequence of ours: ours then stands in for it
(``test_stream_logprobs_cover_every_token`` checks that ours is complete).
"""

from __future__ import annotations

import http.client
import json
import re
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

TIMEOUT_S = 120.0
_RANDOM_ID = re.compile(r"^(resp|msg|rs|fc|ctc)_[0-9a-f]{16}$")
_CALL_ID = re.compile(r"^chatcmpl-tool-[0-9a-f]{16}$")


@dataclass
class Reply:
    status: int
    content_type: str
    body: bytes
    events: list[tuple[str, Any]] | None = field(default=None)

    def json(self) -> Any:
        return json.loads(self.body)


def send(base_url: str, method: str, path: str, body: Any = None,
         content_type: str = "application/json") -> Reply:
    url = urlsplit(base_url)
    conn = http.client.HTTPConnection(url.hostname, url.port, timeout=TIMEOUT_S)
    try:
        data = None if body is None else (body if isinstance(body, bytes)
                                          else json.dumps(body).encode())
        conn.request(method, path, body=data, headers={"Content-Type": content_type})
        resp = conn.getresponse()
        reply = Reply(resp.status, resp.getheader("Content-Type", ""), resp.read())
    finally:
        conn.close()
    if reply.content_type.startswith("text/event-stream"):
        reply.events = parse_events(reply.body)
    return reply


def parse_events(body: bytes) -> list[tuple[str, Any]]:
    """vLLM's framing: ``event: <type>`` then one ``data:`` line, a blank line after."""
    text = body.decode("utf-8")
    assert not text or text.endswith("\n\n"), f"stream does not end with a blank line: {text[-200:]!r}"
    events = []
    for block in text.split("\n\n")[:-1]:
        lines = block.split("\n")
        assert len(lines) == 2 and lines[0].startswith("event: "), f"bad event {block!r}"
        assert lines[1].startswith("data: "), f"bad event {block!r}"
        events.append((lines[0][len("event: "):], json.loads(lines[1][len("data: "):])))
    return events


REASONING_COUNT = ("reasoning_tokens",)


def masked(value: Any, key: str | None = None, drop: tuple[str, ...] = ()) -> Any:
    if isinstance(value, dict):
        return {k: masked(v, k, drop) for k, v in value.items()
                if k not in ("created_at", "cached_tokens", *drop)}
    if isinstance(value, list):
        return [masked(v, None, drop) for v in value]
    if isinstance(value, str) and key in ("id", "item_id", "call_id"):
        if _RANDOM_ID.match(value):
            return value.split("_", 1)[0] + "_<hex>"
        if _CALL_ID.match(value):
            return "chatcmpl-tool-<hex>"
    return value


def fold(events: list[tuple[str, Any]], drop: tuple[str, ...] = ()) -> list[Any]:
    """Delta runs joined; sequence numbers checked (contiguous from the first:
    a replay may start late) and dropped; ids masked."""
    out: list[Any] = []
    base = events[0][1].get("sequence_number", 0) if events else 0
    for n, (name, data) in enumerate(events, base):
        assert data.get("type") == name, (name, data)
        assert data.get("sequence_number") == n, (n, data)
        data = masked({k: v for k, v in data.items() if k != "sequence_number"}, None, drop)
        if name.endswith(".delta"):
            last = out[-1] if out else None
            if isinstance(last, dict) and last.get("type") == name and \
                    last.get("item_id") == data.get("item_id"):
                last["delta"] += data["delta"]
                if "logprobs" in data:
                    last["logprobs"] = last["logprobs"] + data["logprobs"]
                continue
        out.append(data)
    return out


def with_textless_logprobs(vllm: Any, mine: Any) -> Any:
    """vLLM's folded events with each ``logprobs`` list that is a subsequence
    of ours (vLLM dropped textless steps) replaced by ours."""
    if isinstance(vllm, dict) and isinstance(mine, dict):
        out = {}
        for k, v in vllm.items():
            if k == "logprobs" and _subsequence(v, mine.get(k)):
                out[k] = mine[k]
            else:
                out[k] = with_textless_logprobs(v, mine.get(k))
        return out
    if isinstance(vllm, list) and isinstance(mine, list) and len(vllm) == len(mine):
        return [with_textless_logprobs(v, m) for v, m in zip(vllm, mine)]
    return vllm


def _subsequence(short: Any, long: Any) -> bool:
    if not (isinstance(short, list) and isinstance(long, list)) or len(short) >= len(long):
        return False
    rest = iter(long)
    return all(any(entry == other for other in rest) for entry in short)


def deltas(reply: Reply) -> list[str]:
    """The delta events' texts: where a server merged steps, its list differs."""
    return [data.get("delta") for name, data in reply.events or [] if name.endswith(".delta")]


def differences(a: Any, b: Any, path: str = "") -> list[str]:
    """Where two JSON values differ (key paths), for failure messages."""
    if isinstance(a, dict) and isinstance(b, dict):
        out = [f"{path}.{k}: missing on one side" for k in set(a) ^ set(b)]
        for k in a.keys() & b.keys():
            out += differences(a[k], b[k], f"{path}.{k}")
        return out
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        return [d for i, (x, y) in enumerate(zip(a, b)) for d in differences(x, y, f"{path}[{i}]")]
    return [] if a == b else [f"{path}: {json.dumps(a)[:300]} != vLLM's {json.dumps(b)[:300]}"]


def assert_same(ours: Reply, theirs: Reply, *, message_differs: bool = False,
                unmerged: bool = False, streamed: bool = False) -> None:
    """``unmerged``: the caller made sure vLLM parsed every engine step on its own;
    ``streamed``: a JSON answer parsed as a stream (a stored background stream's)."""
    assert ours.status == theirs.status, (
        f"status {ours.status} != vLLM's {theirs.status}\nours: {ours.body[:3000]!r}\n"
        f"vLLM: {theirs.body[:3000]!r}")
    assert ours.content_type.split(";")[0] == theirs.content_type.split(";")[0]
    if theirs.events is not None:
        assert ours.events is not None
        # vLLM's server merges engine steps it falls behind on, and the grammar
        # reasoning parser then counts differently (the README's difference);
        # a merged step without text does not show in the deltas.
        drop = () if unmerged else REASONING_COUNT
        mine, vllm = fold(ours.events, drop), fold(theirs.events, drop)
        vllm = with_textless_logprobs(vllm, mine)
        if mine != vllm:
            at = next((i for i, (a, b) in enumerate(zip(mine, vllm)) if a != b),
                      min(len(mine), len(vllm)))
            raise AssertionError(
                f"{len(mine)} vs vLLM's {len(vllm)} folded events; first difference at {at}:\n"
                f"{differences(mine[at:at + 1], vllm[at:at + 1])[:8]}\n"
                f"ours: {json.dumps(mine[at:at + 2])[:4000]}\n"
                f"vLLM: {json.dumps(vllm[at:at + 2])[:4000]}\n"
                f"raw ours: {ours.body[:3000]!r}\nraw vLLM: {theirs.body[:3000]!r}")
        return
    our_json, their_json = ours.json(), theirs.json()
    if theirs.status >= 400:
        ours_err, theirs_err = our_json["error"], their_json["error"]
        keys = ("type", "code") if message_differs else ("type", "code", "param", "message")
        for key in keys:
            assert ours_err[key] == theirs_err[key], (
                f"error.{key}: {ours_err!r} != vLLM's {theirs_err!r}")
        return
    drop = REASONING_COUNT if streamed and not unmerged else ()
    our_json, their_json = masked(our_json, None, drop), masked(their_json, None, drop)
    assert our_json == their_json, (
        f"{differences(our_json, their_json)[:8]}\nours: {json.dumps(our_json)[:6000]}\n"
        f"vLLM: {json.dumps(their_json)[:6000]}")
