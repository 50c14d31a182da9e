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

The response's head (status line and headers) goes out with the stream's first
bytes, in the same write: a separate write of it costs a system call and, as
often as not, a wake-up of the client for nothing to read. A stream with no
bytes after ``HEAD_DELAY`` sends its head alone, so a client whose request waits
in the engine's queue still learns soon that it was accepted.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import time
import weakref
from collections.abc import Callable
from typing import Any

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
# Seconds a stream's head waits for its first bytes before it is sent alone.
HEAD_DELAY = 1.0
# Transports whose socket has its fixed send buffer already (a keep-alive
# connection's later streams skip the socket object and two system calls).
_SIZED_TRANSPORTS: weakref.WeakSet[asyncio.Transport] = weakref.WeakSet()


def _first_stream_on(transport: asyncio.Transport) -> bool:
    """Whether the connection's socket still needs its set-up (kept per transport)."""
    if transport in _SIZED_TRANSPORTS:
        return False
    try:
        _SIZED_TRANSPORTS.add(transport)
    except TypeError:  # not weak-referenceable (uvloop's TLS transport): every stream
        pass
    return True


def _holds_head(writer: Any) -> bool:
    """Whether aiohttp's writer still has the response's head to send."""
    return bool(getattr(writer, "_headers_buf", None)) and not getattr(
        writer, "_headers_written", True
    )


class _DeferredHeadResponse(web.StreamResponse):
    """prepare() leaves the head in aiohttp's writer (as web.Response does)."""

    _send_headers_immediately = False


class SseWriter:
    def __init__(self, request: web.Request, group: Group, keep_alive: float = 0.0) -> None:
        self.request = request
        self.group = group
        # --sse-keep-alive-interval: when the stream last sent anything (only kept then).
        self.keep_alive = keep_alive
        self.last_sent = time.monotonic()
        self.response = _DeferredHeadResponse(status=200, headers=HEADERS)
        self.backlog: list[bytes] = []
        self.backlog_bytes = 0
        self._transport: asyncio.Transport | None = None
        self._chunked = False
        # aiohttp's writer while it holds the head for our first direct write.
        self._head_writer: Any = None
        self._head_timer: asyncio.TimerHandle | None = None

    async def start(self) -> None:
        # Chunked framing is ours to write on the direct path, so make it explicit
        # (HTTP/1.0 clients get a connection-delimited body instead).
        if self.request.version >= (1, 1):
            self.response.enable_chunked_encoding()
            self._chunked = True
        writer: Any = await self.response.prepare(self.request)
        transport = self._transport = self.request.transport
        if _holds_head(writer):
            self._head_writer = writer
            self._head_timer = asyncio.get_running_loop().call_later(HEAD_DELAY, self._send_head)
        elif hasattr(writer, "send_headers"):
            # An aiohttp that keeps the head elsewhere: out now, before any
            # direct write (a no-op where prepare() sent it).
            writer.send_headers()
        if transport is not None and _first_stream_on(transport):
            # The transport pauses the protocol above this many bytes and
            # resumes it once the client has read most of them: what
            # flush() waits for.
            transport.set_write_buffer_limits(high=DIRECT_WRITE_LIMIT)
            # Linux grows a socket's send buffer to megabytes by itself, which
            # would hide a client that does not read; a fixed size keeps the lag
            # visible in the transport's buffer (still ample for token streams).
            sock = transport.get_extra_info("socket")
            if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, SOCKET_SEND_BUFFER)

    def _take_head(self) -> bytes:
        """The head, if aiohttp's writer still holds it (taken from it, so it is
        sent once): the first direct write carries it. Empty once a write
        through aiohttp (flush, finish) has sent it."""
        writer = self._head_writer
        self._leave_head_to_aiohttp()
        if not _holds_head(writer):
            return b""
        head, writer._headers_buf, writer._headers_written = writer._headers_buf, None, True
        writer.output_size += len(head)  # (as its send_headers counts it: "response started")
        return head

    def _send_head(self) -> None:
        """HEAD_DELAY passed without bytes to send: the head alone."""
        self._head_timer = None
        transport = self._transport
        if transport is not None and not transport.is_closing():
            head = self._take_head()
            if head:
                transport.write(head)

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
            framed = b"%x\r\n%b\r\n" % (len(data), data) if self._chunked else data
            transport.write(self._take_head() + framed if self._head_writer else framed)
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
        self._leave_head_to_aiohttp()
        await self.response.write_eof(last + tail)  # (with the head if still held)

    def _leave_head_to_aiohttp(self) -> None:
        """aiohttp's next write sends the head if it still holds it."""
        self._head_writer = None
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None


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
