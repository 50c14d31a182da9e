"""Server-sent events over aiohttp, written straight from the engine reader.

The hot path of a stream is engine step -> SSE bytes. Waking one handler
coroutine per stream per step would cost more than formatting the chunk, so a
streaming handler installs a *sink* on its group: the fan-out table calls it
once per engine step with that step's deltas, the view formats them, and the
bytes go to the socket right there, framed as one HTTP chunk (the step that
finishes the group is left to the handler, which sends it with the closing
events and the end of the body in one write). Only a client
that does not keep up (the transport's buffer is full) makes bytes queue; then
the handler coroutine is woken to write the backlog as the client reads (the
transport's write-drain tells it when), and more than ``--max-stream-buffer``
bytes waiting for the client abort the request (slow consumer), dropping what
was queued.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import time
from collections.abc import Callable

from aiohttp import web

from frontend.choices import Delta, Group
from frontend.errors import internal_error, sse_error_event

log = logging.getLogger("frontend.sse")

DONE = b"data: [DONE]\n\n"
HEADERS = {"Content-Type": "text/event-stream; charset=utf-8", "Cache-Control": "no-cache"}
# Above this many unsent bytes in the socket's buffer, writes go through the
# handler (which awaits aiohttp's drain) instead of straight to the transport.
DIRECT_WRITE_LIMIT = 64 * 1024
SOCKET_SEND_BUFFER = 128 * 1024


KEEP_ALIVE = b": keep-alive\n\n"


class SseWriter:
    def __init__(self, request: web.Request, group: Group, keep_alive: float = 0.0) -> None:
        self.request = request
        self.group = group
        # --sse-keep-alive-interval: when the stream last sent anything (only kept then).
        self.keep_alive = keep_alive
        self.last_sent = time.monotonic()
        self.response = web.StreamResponse(status=200, headers=HEADERS)
        self.backlog: list[bytes] = []
        self.backlog_bytes = 0
        self._transport: asyncio.Transport | None = None
        self._chunked = False

    async def start(self) -> None:
        # Chunked framing is ours to write on the direct path, so make it explicit
        # (HTTP/1.0 clients get a connection-delimited body instead).
        if self.request.version >= (1, 1):
            self.response.enable_chunked_encoding()
            self._chunked = True
        await self.response.prepare(self.request)
        self._transport = self.request.transport
        if self._transport is not None:
            # The transport pauses the protocol above this many bytes and
            # resumes it once the client has read most of them: what
            # flush() waits for.
            self._transport.set_write_buffer_limits(high=DIRECT_WRITE_LIMIT)
        # Linux grows a socket's send buffer to megabytes by itself, which
        # would hide a client that does not read; a fixed size keeps the lag
        # visible in the transport's buffer (still ample for token streams).
        sock = self._transport.get_extra_info("socket") if self._transport else None
        if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, SOCKET_SEND_BUFFER)

    def push(self, data: bytes) -> tuple[int, bool]:
        """Send now if the client keeps up, else queue for the handler.

        Returns (bytes the client has not taken yet, whether they were queued).
        """
        transport = self._transport
        if transport is None or transport.is_closing():
            self._queue(data)
            return self.backlog_bytes, True
        buffered = transport.get_write_buffer_size()
        if self.backlog or buffered > DIRECT_WRITE_LIMIT:
            self._queue(data)
            return buffered + self.backlog_bytes, True
        if data:
            transport.write(b"%x\r\n%b\r\n" % (len(data), data) if self._chunked else data)
            if self.keep_alive:
                self.last_sent = time.monotonic()
        return transport.get_write_buffer_size(), False

    def _queue(self, data: bytes) -> None:
        if data:
            self.backlog.append(data)
            self.backlog_bytes += len(data)

    async def flush(self) -> None:
        """Write the backlog with flow control. Raises when the client is gone."""
        while self.backlog and not self._dropping():
            await self._writable()
            data, self.backlog, self.backlog_bytes = b"".join(self.backlog), [], 0
            await self.response.write(data)
            self.last_sent = time.monotonic()
        if self._dropping():
            self.backlog, self.backlog_bytes = [], 0

    def _dropping(self) -> bool:
        return self.group.drop_unsent

    async def _writable(self) -> None:
        # aiohttp drains by its own count of bytes, which misses ours: wait for
        # the transport's resume_writing instead. Meanwhile new steps queue up
        # (and too many bytes waiting abort the request).
        transport = self._transport
        if (
            transport is not None
            and not transport.is_closing()
            and transport.get_write_buffer_size() > DIRECT_WRITE_LIMIT
        ):
            await self.request.writer.drain()

    async def wait(self) -> None:
        """Until the group wakes the handler; with keep-alives, a comment
        whenever the stream has been silent that long (vLLM's
        --sse-keep-alive-interval: while queued, in prefill or between chunks)."""
        group = self.group
        if not self.keep_alive:
            await group.wait()
            return
        while True:
            silent = time.monotonic() - self.last_sent
            if silent >= self.keep_alive:
                self.push(KEEP_ALIVE)
                self.last_sent = time.monotonic()
                continue
            try:
                await asyncio.wait_for(group.wait(), self.keep_alive - silent)
                return
            except TimeoutError:
                pass

    async def finish(self, last: bytes, tail: bytes) -> None:
        """End the stream: the backlog, then the last step's events (dropped
        with the backlog when the client did not keep up), ``tail`` and the
        end of the body, those three in one write."""
        await self.flush()
        if self._dropping():
            last = b""
        await self.response.write_eof(last + tail)


async def stream_group(
    request: web.Request,
    group: Group,
    render: Callable[[list[Delta]], bytes],
    closing: Callable[[], bytes | None],
    keep_alive: float = 0.0,
) -> web.StreamResponse:
    """Stream ``group``: ``render`` turns a step's deltas into SSE events,
    ``closing`` gives the final event (usage) if any; then errors and [DONE].
    ``keep_alive``: seconds of silence before a keep-alive comment (0: none)."""
    writer = SseWriter(request, group, keep_alive)
    await writer.start()
    group.sink = lambda deltas: writer.push(render(deltas))
    last = b""
    try:
        while not group.done:
            if group.pending:  # deltas that arrived before the sink was installed
                writer.push(render(group.take()))
            await writer.flush()
            await writer.wait()
        # The table leaves a finished group's last deltas to its handler, so they
        # go out with the closing events and the end of the body in one write.
        last = render(group.take()) if group.pending else b""
        final = closing() if group.error is None else None
    except (ConnectionError, asyncio.CancelledError):
        raise  # the client is gone: the handler's cleanup aborts the rest
    except Exception:
        # The 200 is out: an error can only be reported in the stream.
        log.exception("stream %s failed", group.request_id)
        group.error = group.error or internal_error()
    finally:
        group.sink = None
    if group.error is not None:
        tail = sse_error_event(group.error)
    elif final is not None:
        tail = b"data: " + final + b"\n\n"
    else:
        tail = b""
    await writer.finish(last, tail + DONE)
    return writer.response
