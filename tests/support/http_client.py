"""HTTP helpers for the frontend tests: the ``openai`` client, plain JSON posts,
SSE streams read to the end, raw sockets that can hang up mid-request, and the
frontend's /metrics parsed.

Every call has a timeout: a frontend bug must fail a test, not hang it.
"""

from __future__ import annotations

import json
import socket
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import openai

TIMEOUT_S = 60.0
MODEL = "tiny"


def client(url: str, timeout: float = TIMEOUT_S) -> openai.OpenAI:
    """An ``openai`` client as a user would make one (no retries: errors show)."""
    return openai.OpenAI(base_url=f"{url}/v1", api_key="unused", timeout=timeout,
                         max_retries=0)


@dataclass
class Reply:
    status: int
    headers: dict[str, str]
    body: bytes

    @property
    def json(self) -> Any:
        return json.loads(self.body)

    @property
    def error(self) -> dict:
        """The OpenAI error object, after checking the envelope's shape."""
        payload = self.json
        assert set(payload) == {"error"}, payload
        err = payload["error"]
        assert set(err) == {"message", "type", "param", "code"}, err
        assert isinstance(err["message"], str) and err["message"], err
        assert isinstance(err["type"], str) and err["type"], err
        assert err["code"] == self.status, (self.status, err)
        return err


def post(url: str, path: str, body: Any, *, timeout: float = TIMEOUT_S,
         headers: dict[str, str] | None = None) -> Reply:
    """POST ``body`` (an object sent as JSON, or raw bytes); any status is returned."""
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    req = urllib.request.Request(url + path, data=data, method="POST", headers={
        "Content-Type": "application/json", **(headers or {})})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return Reply(r.status, dict(r.headers), r.read())
    except urllib.error.HTTPError as e:
        return Reply(e.code, dict(e.headers), e.read())


def get(url: str, path: str, *, timeout: float = 10.0,
        headers: dict[str, str] | None = None) -> Reply:
    try:
        request = urllib.request.Request(url + path, headers=headers or {})
        with urllib.request.urlopen(request, timeout=timeout) as r:
            return Reply(r.status, dict(r.headers), r.read())
    except urllib.error.HTTPError as e:
        return Reply(e.code, dict(e.headers), e.read())


def completion(url: str, body: dict, **kw: Any) -> dict:
    """A successful non-streaming completion's JSON (asserts 200)."""
    body = {"model": MODEL, **body}
    reply = post(url, "/v1/completions", body, **kw)
    assert reply.status == 200, (reply.status, reply.body[:2000])
    return reply.json


@dataclass
class Stream:
    """A whole SSE response: every ``data:`` payload, in order."""

    status: int
    headers: dict[str, str]
    raw: bytes
    events: list[str] = field(default_factory=list)

    @property
    def chunks(self) -> list[dict]:
        """The JSON events (everything but ``[DONE]``)."""
        return [json.loads(e) for e in self.events if e != "[DONE]"]

    def check_framing(self) -> None:
        """``data: ...\\n\\n`` events only, exactly one ``[DONE]``, and it is last."""
        assert self.status == 200, (self.status, self.raw[:2000])
        assert self.headers.get("Content-Type", "").startswith("text/event-stream"), \
            self.headers
        assert self.events.count("[DONE]") == 1, self.events[-3:]
        assert self.events[-1] == "[DONE]", self.events[-3:]

    @property
    def choice_chunks(self) -> list[dict]:
        return [c for c in self.chunks if c.get("choices")]

    @property
    def usage_chunks(self) -> list[dict]:
        return [c for c in self.chunks if "choices" in c and c["choices"] == []]

    @property
    def errors(self) -> list[dict]:
        return [c["error"] for c in self.chunks if "error" in c]


def parse_sse(raw: bytes) -> list[str]:
    text = raw.decode("utf-8")
    assert text.endswith("\n\n") or not text, text[-200:]
    events = []
    for block in text.split("\n\n")[:-1]:
        assert block.startswith("data: "), block[:200]
        events.append(block[len("data: "):])
    return events


def stream(url: str, path: str, body: dict, *, timeout: float = TIMEOUT_S) -> Stream:
    """POST and read the whole stream (or the error reply)."""
    reply = post(url, path, body, timeout=timeout)
    result = Stream(reply.status, reply.headers, reply.body)
    if reply.status == 200:
        result.events = parse_sse(reply.body)
    return result


def stream_completion(url: str, body: dict, **kw: Any) -> Stream:
    s = stream(url, "/v1/completions", {"model": MODEL, "stream": True, **body}, **kw)
    s.check_framing()
    return s


def texts_by_index(chunks: list[dict]) -> dict[int, str]:
    out: dict[int, str] = {}
    for c in chunks:
        for ch in c.get("choices", ()):
            out[ch["index"]] = out.get(ch["index"], "") + ch["text"]
    return out


def finals_by_index(chunks: list[dict]) -> dict[int, dict]:
    """The chunk choice carrying each index's finish_reason (asserts exactly one)."""
    out: dict[int, dict] = {}
    for c in chunks:
        for ch in c.get("choices", ()):
            if ch.get("finish_reason") is not None:
                assert ch["index"] not in out, f"two finish chunks for {ch['index']}"
                out[ch["index"]] = ch
    return out


class RawRequest:
    """A request on a plain socket, so a test can hang up whenever it likes."""

    def __init__(self, url: str, path: str, body: dict, timeout: float = 30.0) -> None:
        parts = urlsplit(url)
        self.sock = socket.create_connection((parts.hostname, parts.port), timeout=timeout)
        data = json.dumps(body).encode()
        head = (f"POST {path} HTTP/1.1\r\nHost: {parts.hostname}:{parts.port}\r\n"
                f"Content-Type: application/json\r\nContent-Length: {len(data)}\r\n"
                "Connection: close\r\n\r\n").encode()
        self.sock.sendall(head + data)
        self.received = b""

    def read_until(self, marker: bytes, count: int = 1, timeout: float = 30.0) -> bytes:
        """Read until ``marker`` has been seen ``count`` times (after the headers)."""
        deadline = time.monotonic() + timeout
        while True:
            body = self.received.partition(b"\r\n\r\n")[2]
            if body.count(marker) >= count:
                return self.received
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"saw {body.count(marker)} of {count} {marker!r}")
            self.sock.settimeout(left)
            data = self.sock.recv(65536)
            if not data:
                raise ConnectionError(f"closed early: {self.received[-500:]!r}")
            self.received += data

    def read_all(self, timeout: float = 30.0) -> bytes:
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError("response did not end")
            self.sock.settimeout(left)
            data = self.sock.recv(65536)
            if not data:
                return self.received
            self.received += data

    @property
    def status(self) -> int:
        return int(self.received.split(b" ", 2)[1])

    def hang_up(self) -> None:
        """Close at once with a reset, as a killed client would."""
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00"
                             b"\x00\x00\x00\x00")
        self.sock.close()

    def close(self) -> None:
        self.sock.close()


def scrape(url: str) -> dict[tuple[str, frozenset], float]:
    """The frontend's /metrics, parsed (see ``metric``)."""
    reply = get(url, "/metrics")
    assert reply.status == 200, (reply.status, reply.body[:500])
    return parse_metrics(reply.body.decode())


def parse_metrics(text: str) -> dict[tuple[str, frozenset], float]:
    """Prometheus text -> {(sample name, frozenset of label items): value}."""
    from prometheus_client.parser import text_string_to_metric_families
    samples: dict[tuple[str, frozenset], float] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            samples[(s.name, frozenset(s.labels.items()))] = s.value
    return samples


def metric(samples: dict, name: str, **labels: str) -> float:
    """One sample's value; labels must match exactly (absent sample: KeyError)."""
    key = (name, frozenset(labels.items()))
    if key not in samples:
        near = sorted(str(dict(k[1])) for k in samples if k[0] == name)
        raise KeyError(f"{name}{labels} not found; have {near}")
    return samples[key]
