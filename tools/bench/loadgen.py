"""A lean closed-loop load generator for ``/v1/completions`` and
``/v1/chat/completions`` (HTTP/1.1, asyncio).

It speaks raw HTTP/1.1 over keep-alive connections (one per concurrency slot)
with an ``asyncio.Protocol``: no HTTP client library, no JSON parsing of
stream chunks. A streamed response is read as chunked transfer encoding; each
HTTP chunk is scanned with ``bytes.count`` for SSE events, and every read
records one timestamp. That keeps the client's cost per token at a few
microseconds, so a frontend on its own core cannot outrun it (the benchmark
measures this ceiling against ``tools/bench/trivial_server.py``).

Accounting (see docs/benchmarks.md):

* **Staggered start.** Worker ``i`` of ``C`` first sends an unmeasured request
  for ``1 + 127 * i // C`` tokens, so that the closed loop does not run in
  lock-step waves (every request starting, and finishing, in the same step).
* **Window.** Measurement starts when every worker has finished its stagger
  request and lasts ``duration`` seconds (or until ``max_requests`` requests
  have been sent). Then no new request is sent and the ones in flight finish.
* **Throughput** counts the output tokens *received inside the window*: every
  token-carrying SSE event of a request (a chat stream's first event, the
  role with empty content, carries none) is credited
  ``completion_tokens / token events`` (usage from the final usage chunk); a
  non-streamed response's tokens are spread evenly over its lifetime (send ->
  end) and the part inside the window counts.
* **Latency** statistics cover the requests *sent inside the window*: TTFT
  (send -> first token event), ITL (gaps between token events of one
  response; events that arrive in the same read count as gap 0), TPOT
  ((last - first token) / (tokens - 1)), and end-to-end latency.
"""

from __future__ import annotations

import asyncio
import json
import random
import re
import time
from array import array
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

_USAGE_RE = re.compile(rb'"completion_tokens"\s*:\s*(\d+)')
_PROMPT_USAGE_RE = re.compile(rb'"prompt_tokens"\s*:\s*(\d+)')
# A chat stream's first event: the role, no token.
_ROLE_EVENT = b'"delta":{"role":"assistant","content":""}'
PATHS = {"completions": "/v1/completions", "chat": "/v1/chat/completions"}
_now = time.perf_counter


@dataclass
class Workload:
    """One load point."""
    name: str
    concurrency: int
    stream: bool = True
    prompts_per_request: int = 1  # > 1: a batch prompt (a list of prompts)
    n: int = 1
    max_tokens: int = 128
    temperature: float = 0.0
    api: str = "completions"  # or "chat" (the prompt as one user message)

    @property
    def choices(self) -> int:
        return self.prompts_per_request * self.n


@dataclass
class Record:
    """One request as the client saw it."""
    t_send: float
    t_first: float = 0.0
    t_done: float = 0.0
    status: int = 0
    completion_tokens: int = 0
    prompt_tokens: int = 0
    error: str | None = None
    # token events: per read, (time, number of token events in that read)
    ev_t: array = field(default_factory=lambda: array("d"))
    ev_n: array = field(default_factory=lambda: array("l"))
    stagger: bool = False
    measured: bool = False


class _Conn(asyncio.Protocol):
    """One keep-alive HTTP/1.1 connection; one request at a time."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.rec: Record | None = None
        self.fut: asyncio.Future | None = None
        self.closed = False
        self._reset()

    def _reset(self) -> None:
        self.head = b""
        self.in_body = False
        self.chunked = False
        self.length = -1
        self.body = bytearray()
        self.cbuf = b""
        self.tail = b""  # the payload of the chunk holding usage (streaming)

    # -- asyncio.Protocol
    def connection_made(self, transport) -> None:
        self.transport = transport

    def connection_lost(self, exc) -> None:
        self.closed = True
        if self.fut is not None and not self.fut.done():
            self.rec.error = f"connection lost: {exc}"
            self.fut.set_result(self.rec)

    def data_received(self, data: bytes) -> None:
        now = _now()
        if not self.in_body:
            self.head += data
            i = self.head.find(b"\r\n\r\n")
            if i < 0:
                return
            head, data = self.head[:i], self.head[i + 4:]
            self.in_body = True
            rec = self.rec
            try:
                rec.status = int(head[9:12])
            except ValueError:
                rec.status = -1
            lower = head.lower()
            self.chunked = b"transfer-encoding: chunked" in lower
            if not self.chunked:
                m = re.search(rb"content-length:\s*(\d+)", lower)
                self.length = int(m.group(1)) if m else -1
            if not data:
                if self.length == 0:
                    self._finish(now)
                return
        if self.chunked:
            try:
                self._chunks(data, now)
            except ValueError as e:  # not chunked framing: the server broke the stream
                self.rec.error = f"bad chunked framing: {e}"
                self.transport.close()
        else:
            self.body += data
            if self.length >= 0 and len(self.body) >= self.length:
                self._finish(now)

    def _chunks(self, data: bytes, now: float) -> None:
        buf = self.cbuf + data if self.cbuf else data
        pos, end = 0, len(buf)
        rec = self.rec
        n_tok = 0
        while pos < end:
            j = buf.find(b"\r\n", pos)
            if j < 0:
                break
            size = int(buf[pos:j].split(b";", 1)[0], 16)
            start = j + 2
            if start + size + 2 > end:
                break  # the rest of this chunk is still to come
            if size == 0:
                if n_tok:
                    self._event(now, n_tok)
                self.cbuf = b""
                self._finish(now)
                return
            payload = buf[start:start + size]
            pos = start + size + 2
            k = payload.count(b"data: ")
            if k:
                if b'"choices":[]' in payload or b"[DONE]" in payload or b'"error"' in payload:
                    k -= payload.count(b'"choices":[]') + payload.count(b"data: [DONE]")
                    if b'"error"' in payload and b'"object"' not in payload:
                        rec.error = payload[:300].decode(errors="replace")
                if b'"role"' in payload:
                    k -= payload.count(_ROLE_EVENT)
                n_tok += max(k, 0)
            if b'"completion_tokens"' in payload:
                self.tail = payload
        self.cbuf = buf[pos:] if pos < end else b""
        if n_tok:
            self._event(now, n_tok)

    def _event(self, now: float, n: int) -> None:
        rec = self.rec
        if not rec.t_first:
            rec.t_first = now
        rec.ev_t.append(now)
        rec.ev_n.append(n)

    def _finish(self, now: float) -> None:
        rec = self.rec
        rec.t_done = now
        text = self.tail if self.chunked else bytes(self.body)
        m = _USAGE_RE.search(text)
        if m:
            rec.completion_tokens = int(m.group(1))
            p = _PROMPT_USAGE_RE.search(text)
            rec.prompt_tokens = int(p.group(1)) if p else 0
        if rec.status != 200 and rec.error is None:
            rec.error = f"HTTP {rec.status}: {bytes(self.body)[:300]!r}{self.tail[:300]!r}"
        fut = self.fut
        self._reset()
        self.fut = self.rec = None
        if fut is not None and not fut.done():
            fut.set_result(rec)

    # -- API
    def request(self, raw: bytes, rec: Record) -> asyncio.Future:
        self.rec = rec
        self.fut = asyncio.get_running_loop().create_future()
        self.transport.write(raw)
        return self.fut


class Client:
    """Builds requests for a workload and keeps connections."""

    def __init__(self, host: str, port: int, prompts: Sequence[str], model: str = "tiny",
                 timeout: float = 300.0) -> None:
        self.host, self.port = host, port
        self.prompts = list(prompts)
        self.model = model
        self.timeout = timeout
        self._rng = random.Random(1234)

    async def connect(self) -> _Conn:
        loop = asyncio.get_running_loop()
        _, conn = await loop.create_connection(_Conn, self.host, self.port)
        return conn

    def build(self, w: Workload, max_tokens: int) -> bytes:
        k = w.prompts_per_request
        picks = [self.prompts[self._rng.randrange(len(self.prompts))] for _ in range(k)]
        body: dict[str, Any] = {"model": self.model}
        if w.api == "chat":
            if k != 1:
                raise ValueError("a chat request has one conversation")
            body["messages"] = [{"role": "user", "content": picks[0]}]
        else:
            body["prompt"] = picks[0] if k == 1 else picks
        body.update(max_tokens=max_tokens, ignore_eos=True, temperature=w.temperature,
                    stream=w.stream)
        if w.n != 1:
            body["n"] = w.n
        if w.stream:
            body["stream_options"] = {"include_usage": True}
        data = json.dumps(body, separators=(",", ":")).encode()
        return (f"POST {PATHS[w.api]} HTTP/1.1\r\nHost: {self.host}:{self.port}\r\n"
                f"Content-Type: application/json\r\nAccept: */*\r\n"
                f"Content-Length: {len(data)}\r\n\r\n").encode() + data

    async def send(self, conn: _Conn, raw: bytes) -> Record:
        rec = Record(t_send=_now())
        fut = conn.request(raw, rec)
        try:
            return await asyncio.wait_for(fut, self.timeout)
        except asyncio.TimeoutError:
            rec.error = "timeout"
            conn.transport.close()
            return rec


@dataclass
class PointResult:
    workload: dict
    duration: float  # length of the measurement window
    warmup_s: float
    drain_s: float
    tokens: float  # output tokens received inside the window
    requests_done: int  # requests finished inside the window
    requests_sent: int  # all requests (stagger + window + ...)
    measured: int  # requests sent inside the window (latency stats)
    errors: int
    error_samples: list
    bad_token_counts: int
    prompt_tokens_seen: list
    tok_s: float
    req_s: float
    ttft_ms: dict
    itl_ms: dict
    tpot_ms: dict
    latency_ms: dict
    hooks: dict


def _pcts(values: Sequence[float], scale: float = 1000.0) -> dict:
    if not values:
        return {"n": 0}
    s = sorted(values)
    n = len(s)

    def q(p: float) -> float:
        return s[min(n - 1, max(0, int(round(p * (n - 1)))))] * scale

    return {"n": n, "mean": sum(s) / n * scale, "p50": q(0.50), "p90": q(0.90),
            "p99": q(0.99), "max": s[-1] * scale}


async def run_point(client: Client, w: Workload, duration: float, *,
                    max_requests: int = 20000,
                    on_window_start: Callable[[], Any] | None = None,
                    on_window_end: Callable[[], Any] | None = None,
                    stagger: bool = True, warmup_timeout: float = 180.0,
                    drain_timeout: float = 180.0) -> PointResult:
    """Run one closed-loop load point and return its statistics."""
    C = w.concurrency
    conns = [await client.connect() for _ in range(C)]
    records: list[Record] = []
    stop = asyncio.Event()
    staggered = 0
    all_staggered = asyncio.Event()
    window = {"w0": None, "w1": None}
    sent = 0

    async def worker(i: int) -> None:
        nonlocal staggered, sent
        conn = conns[i]
        first = True
        while True:
            if conn.closed:
                conn = conns[i] = await client.connect()
            if first and stagger:
                mt = max(1, 1 + (w.max_tokens - 1) * i // C)
            else:
                if stop.is_set():
                    return
                mt = w.max_tokens
            raw = client.build(w, mt)
            sent += 1
            rec = await client.send(conn, raw)
            rec.stagger = first and stagger
            records.append(rec)
            if sent >= max_requests:
                stop.set()
            if first:
                first = False
                staggered += 1
                if staggered == C:
                    all_staggered.set()

    t_begin = _now()
    tasks = [asyncio.create_task(worker(i)) for i in range(C)]
    hooks: dict[str, Any] = {}
    try:
        await asyncio.wait_for(all_staggered.wait(), warmup_timeout)
    except asyncio.TimeoutError:
        stop.set()
    window["w0"] = w0 = _now()
    if on_window_start:
        hooks["start"] = on_window_start()
    try:
        await asyncio.wait_for(stop.wait(), duration)
    except asyncio.TimeoutError:
        pass
    window["w1"] = w1 = _now()
    stop.set()
    if on_window_end:
        hooks["end"] = on_window_end()
    done, pending = await asyncio.wait(tasks, timeout=drain_timeout)
    for t in pending:
        t.cancel()
    t_end = _now()
    for c in conns:
        if c.transport is not None:
            c.transport.close()
    for t in done:
        if t.exception() is not None:
            raise t.exception()

    span = w1 - w0
    for rec in records:
        rec.measured = not rec.stagger and w0 <= rec.t_send < w1
    tokens = 0.0
    done_in_window = 0
    ttft, itl, tpot, lat = [], [], [], []
    errors = 0
    error_samples: list[str] = []
    bad_counts = 0
    prompt_seen: set[int] = set()
    expected = w.max_tokens * w.choices
    for rec in records:
        if rec.stagger:
            if rec.error is not None:
                errors += 1
                error_samples.append(rec.error)
            # its tokens still count when they arrive inside the window
            if rec.completion_tokens and w.stream and sum(rec.ev_n):
                per = rec.completion_tokens / sum(rec.ev_n)
                tokens += sum(per * k for t, k in zip(rec.ev_t, rec.ev_n) if w0 <= t < w1)
            continue
        if rec.error is not None:
            errors += 1
            if len(error_samples) < 3:
                error_samples.append(rec.error)
            continue
        ct = rec.completion_tokens
        if ct != expected:
            bad_counts += 1
        if rec.prompt_tokens:
            prompt_seen.add(rec.prompt_tokens)
        if w0 <= rec.t_done < w1:
            done_in_window += 1
        if w.stream:
            n_events = sum(rec.ev_n)
            if n_events:
                per = ct / n_events
                for t, k in zip(rec.ev_t, rec.ev_n):
                    if w0 <= t < w1:
                        tokens += per * k
        elif rec.t_done > rec.t_send:
            # pro rata over the request's lifetime inside the window
            overlap = min(rec.t_done, w1) - max(rec.t_send, w0)
            if overlap > 0:
                tokens += ct * overlap / (rec.t_done - rec.t_send)
        if not rec.measured or not rec.t_done:
            continue
        lat.append(rec.t_done - rec.t_send)
        if w.stream and rec.t_first:
            ttft.append(rec.t_first - rec.t_send)
            if w.choices == 1:
                prev = None
                for t, k in zip(rec.ev_t, rec.ev_n):
                    if prev is not None:
                        itl.append(t - prev)
                    itl.extend([0.0] * (k - 1))
                    prev = t
                if ct > 1:
                    tpot.append((rec.ev_t[-1] - rec.t_first) / (ct - 1))
    return PointResult(
        workload=w.__dict__.copy(), duration=span, warmup_s=w0 - t_begin, drain_s=t_end - w1,
        tokens=tokens, requests_done=done_in_window, requests_sent=sent,
        measured=sum(1 for r in records if r.measured), errors=errors,
        error_samples=error_samples, bad_token_counts=bad_counts,
        prompt_tokens_seen=sorted(prompt_seen), tok_s=tokens / span if span > 0 else 0.0,
        req_s=done_in_window / span if span > 0 else 0.0,
        ttft_ms=_pcts(ttft), itl_ms=_pcts(itl), tpot_ms=_pcts(tpot), latency_ms=_pcts(lat),
        hooks=hooks)
