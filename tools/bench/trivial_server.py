"""A trivial ``/v1/completions`` server, to measure the load generator's ceiling.

Raw asyncio (uvloop) HTTP/1.1 with keep-alive, no framework and no engine: a
streamed request gets ``max_tokens`` canned completion chunks (each one HTTP
chunk, written separately, yielding to the event loop between writes the way
a frontend writes once per engine step), a usage chunk and ``[DONE]``; a
non-streamed one gets a canned JSON body. Whatever rate the load generator
reaches against it is the most it could measure of a real frontend, and its
CPU seconds per chunk (per request) are the floor of what serving one costs.

With ``--step-time S`` the streams are paced as a GPU engine paces a
frontend: one timer every S seconds writes one chunk to every open stream
(one write each), so its CPU per chunk is the floor in that regime.

    python -m tools.bench.trivial_server --port 8123 [--step-time 0.002] [--aiohttp]

With ``--aiohttp`` the same answers come from an aiohttp application (one
route, no middleware, no access log; paced streams all wait for one clock
that ticks every STEP_TIME seconds, as a frontend's wait for engine steps):
the difference to the raw server is what the framework itself costs per
request and per chunk, which no code of ours on top of it can win back.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re

_MAX_TOKENS = re.compile(rb'"max_tokens":\s*(\d+)')
_STREAM = re.compile(rb'"stream":\s*true')
_N = re.compile(rb'"n":\s*(\d+)')

CHUNK = (b'data: {"id":"cmpl-0123456789abcdef","object":"text_completion","created":'
         b'1700000000,"model":"tiny","choices":[{"index":0,"text":" word","logprobs":null,'
         b'"finish_reason":null,"stop_reason":null,"prompt_token_ids":null,'
         b'"token_ids":null}]}\n\n')
HEAD_STREAM = (b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream; charset=utf-8\r\n"
               b"Cache-Control: no-cache\r\nTransfer-Encoding: chunked\r\n\r\n")


def _chunk(payload: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(payload), payload)


CHUNK_FRAMED = _chunk(CHUNK)


class Ticker:
    """Every ``step`` seconds, one chunk to every open stream (a paced engine)."""

    def __init__(self, step: float) -> None:
        self.step = step
        self.streams: dict[Handler, int] = {}  # chunks left per stream
        self.next_at = 0.0
        self.timer: asyncio.TimerHandle | None = None

    def add(self, handler: "Handler", chunks: int) -> None:
        self.streams[handler] = chunks
        if self.timer is None:
            loop = asyncio.get_running_loop()
            self.next_at = loop.time() + self.step
            self.timer = loop.call_at(self.next_at, self.tick)

    def tick(self) -> None:
        finished = []
        for handler, left in self.streams.items():
            if handler.transport.is_closing():
                finished.append(handler)
                continue
            handler.transport.write(CHUNK_FRAMED)
            if left == 1:
                finished.append(handler)
            else:
                self.streams[handler] = left - 1
        for handler in finished:
            del self.streams[handler]
            handler.stream_done()
        if self.streams:
            loop = asyncio.get_running_loop()
            self.next_at = max(self.next_at + self.step, loop.time())
            self.timer = loop.call_at(self.next_at, self.tick)
        else:
            self.timer = None


TICKER: Ticker | None = None


class Handler(asyncio.Protocol):
    def __init__(self) -> None:
        self.buf = b""
        self.transport = None
        self.busy = False
        self.queue: list[bytes] = []
        self.done: asyncio.Future | None = None  # a paced stream's end

    def connection_made(self, transport) -> None:
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.buf += data
        while True:
            i = self.buf.find(b"\r\n\r\n")
            if i < 0:
                return
            head = self.buf[:i].lower()
            m = re.search(rb"content-length:\s*(\d+)", head)
            length = int(m.group(1)) if m else 0
            if len(self.buf) < i + 4 + length:
                return
            body = self.buf[i + 4:i + 4 + length]
            self.buf = self.buf[i + 4 + length:]
            self.queue.append(body)
            if not self.busy:
                self.busy = True
                asyncio.get_running_loop().create_task(self._serve())

    async def _serve(self) -> None:
        while self.queue and not self.transport.is_closing():
            stream, total, usage = _answer(self.queue.pop(0))
            if stream:
                self.transport.write(HEAD_STREAM)
                if TICKER is not None:
                    self.done = asyncio.get_running_loop().create_future()
                    TICKER.add(self, total)
                    await self.done
                else:
                    for _ in range(total):
                        if self.transport.is_closing():
                            return
                        self.transport.write(CHUNK_FRAMED)
                        await asyncio.sleep(0)
                if self.transport.is_closing():
                    return
                self.transport.write(_chunk(b"data: " + _usage_chunk(usage) + b"\n\n")
                                     + _chunk(b"data: [DONE]\n\n") + b"0\r\n\r\n")
            else:
                payload = _full_body(total, usage)
                self.transport.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                                     b"Content-Length: %d\r\n\r\n%s" % (len(payload), payload))
        self.busy = False

    def stream_done(self) -> None:
        if not self.done.done():
            self.done.set_result(None)


def _answer(body: bytes) -> tuple[bool, int, dict]:
    """A request body -> (stream, chunks to send, usage)."""
    m = _MAX_TOKENS.search(body)
    tokens = int(m.group(1)) if m else 16
    m = _N.search(body)
    total = tokens * (int(m.group(1)) if m else 1)
    usage = {"prompt_tokens": 128, "completion_tokens": total, "total_tokens": 128 + total}
    return bool(_STREAM.search(body)), total, usage


def _usage_chunk(usage: dict) -> bytes:
    return json.dumps({"id": "cmpl-0", "object": "text_completion", "created": 1700000000,
                       "model": "tiny", "choices": [], "usage": usage},
                      separators=(",", ":")).encode()


def _full_body(total: int, usage: dict) -> bytes:
    return json.dumps({
        "id": "cmpl-0", "object": "text_completion", "created": 1700000000,
        "model": "tiny", "choices": [{"index": 0, "text": " word" * total,
                                      "logprobs": None, "finish_reason": "length"}],
        "usage": usage}).encode()


class StepClock:
    """One tick every ``step`` seconds that every waiting stream wakes on."""

    def __init__(self, step: float) -> None:
        self.step = step
        self.tick: asyncio.Future | None = None

    async def wait(self) -> None:
        if self.step <= 0:
            await asyncio.sleep(0)
            return
        if self.tick is None:
            loop = asyncio.get_running_loop()
            self.tick = loop.create_future()
            loop.call_later(self.step, self._fire)
        await self.tick

    def _fire(self) -> None:
        tick, self.tick = self.tick, None
        assert tick is not None
        tick.set_result(None)


async def serve_aiohttp(host: str, port: int, step_time: float = 0.0) -> None:
    from aiohttp import web

    clock = StepClock(step_time)

    async def completions(request: web.Request) -> web.StreamResponse:
        stream, total, usage = _answer(await request.read())
        if not stream:
            return web.Response(body=_full_body(total, usage), content_type="application/json")
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream; charset=utf-8",
                                               "Cache-Control": "no-cache"})
        await response.prepare(request)
        for _ in range(total):
            await clock.wait()
            await response.write(CHUNK)
        await response.write(b"data: " + _usage_chunk(usage) + b"\n\n")
        await response.write(b"data: [DONE]\n\n")
        await response.write_eof()
        return response

    app = web.Application()
    app.router.add_post("/v1/completions", completions)
    runner = web.AppRunner(app, access_log=None, handler_cancellation=True)
    await runner.setup()
    await web.TCPSite(runner, host, port, backlog=1024).start()
    await asyncio.Event().wait()


async def serve(host: str, port: int, step_time: float = 0.0) -> None:
    global TICKER
    TICKER = Ticker(step_time) if step_time > 0 else None
    loop = asyncio.get_running_loop()
    server = await loop.create_server(Handler, host, port, backlog=1024)
    async with server:
        await server.serve_forever()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--step-time", type=float, default=0.0,
                   help="pace the streams: one chunk per stream every STEP_TIME seconds")
    p.add_argument("--aiohttp", action="store_true",
                   help="answer through a bare aiohttp application (the framework's floor)")
    args = p.parse_args()
    try:
        import uvloop
        run = serve_aiohttp if args.aiohttp else serve
        uvloop.run(run(args.host, args.port, args.step_time))
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
