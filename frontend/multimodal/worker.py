"""One multimodal processor worker process as the pool sees it: its pipes, the
requests it has in hand, and whether it still serves.

Requests are written one at a time, each after the pipe drained below the
transport's high-water mark, so a flood of large images waits in its own
request handlers rather than piling up in the main process's write buffer.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import Any

from protocol import mm_worker

log = logging.getLogger("frontend.multimodal")

STOP_TIMEOUT_S = 5.0
# A worker that does not answer a request's cancel this long after its deadline
# has its event loop blocked (stuck in a processor): it is killed, and the pool
# starts another.
STUCK_GRACE_S = 10.0


class WorkerGone(Exception):
    pass


class Worker:
    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self.proc = proc
        self.pending: dict[int, asyncio.Future] = {}  # written, not answered yet
        self.reader: asyncio.Task | None = None  # read_answers, once it is ready
        self.ready_at: float | None = None
        self.gone: WorkerGone | None = None
        self._writing = asyncio.Lock()
        self._queued = 0  # requests waiting for the pipe

    @property
    def stdin(self) -> asyncio.StreamWriter:
        assert self.proc.stdin is not None
        return self.proc.stdin

    @property
    def serving(self) -> bool:
        return self.ready_at is not None and self.gone is None

    def load(self) -> int:
        return len(self.pending) + self._queued

    def uptime(self) -> float:
        return 0.0 if self.ready_at is None else time.monotonic() - self.ready_at

    async def set_up(self, settings: dict[str, Any], timeout: float) -> None:
        """Send the settings and wait for its ready answer; then read its answers.
        Raises WorkerGone (after killing a worker that did not answer in time)."""
        try:
            self.stdin.write(mm_worker.encode(settings))
            await self._drain()
            async with asyncio.timeout(timeout):  # (wait_for may swallow a cancel in 3.11)
                await self.receive()
        except TimeoutError:
            self.proc.kill()
            error = WorkerGone(f"processor worker {self.proc.pid} not ready after {timeout:g} s")
            self.fail(error)
            raise error from None
        except WorkerGone as e:
            self.fail(e)
            raise
        self.ready_at = time.monotonic()
        self.reader = asyncio.ensure_future(self.read_answers())

    async def request(self, request_id: int, message: dict[str, Any]) -> asyncio.Future:
        """Write a request once the pipe has room; the future of its answer.
        Its entry in ``pending`` exists from the moment it is written."""
        self._queued += 1
        try:
            await self._writing.acquire()
        finally:
            self._queued -= 1
        try:
            if self.gone is not None:
                raise WorkerGone(str(self.gone))
            future = asyncio.get_running_loop().create_future()
            self.pending[request_id] = future
            self.stdin.write(mm_worker.encode(message))
            await self._drain()
        finally:
            self._writing.release()
        return future

    def abandon(self, request_id: int, past_deadline: bool = False) -> None:
        """The caller gave up on a request (its client left, or its deadline
        passed): the worker cancels it, and its entry goes with the worker's
        answer (the cancel's, or a late result, dropped)."""
        future = self.pending.get(request_id)
        if future is None:  # never written, or answered already
            return
        future.cancel()  # (whatever comes for it now is dropped)
        self.stdin.write(mm_worker.encode({"cancel": request_id}))  # a few bytes
        if past_deadline:
            loop = asyncio.get_running_loop()
            loop.call_later(STUCK_GRACE_S, self._kill_if_stuck, request_id)

    def _kill_if_stuck(self, request_id: int) -> None:
        if request_id in self.pending and self.proc.returncode is None:
            log.error(
                "processor worker %d did not answer a cancel %g s after the request's "
                "deadline (stuck in a processor): killing it",
                self.proc.pid,
                STUCK_GRACE_S,
            )
            self.proc.kill()

    async def _drain(self) -> None:
        with contextlib.suppress(ConnectionError):  # it died: read_answers fails its requests
            await self.stdin.drain()

    async def receive(self) -> Any:
        stdout = self.proc.stdout
        assert stdout is not None
        try:
            header = await stdout.readexactly(mm_worker.HEADER.size)
            (size,) = mm_worker.HEADER.unpack(header)
            return mm_worker.decode(await stdout.readexactly(size))
        except (asyncio.IncompleteReadError, ConnectionError):
            raise WorkerGone(f"processor worker {self.proc.pid} exited") from None

    async def read_answers(self) -> None:
        """Until the worker exits; then every request still waiting gets the error."""
        try:
            while True:
                answer = await self.receive()
                future = self.pending.pop(answer["id"], None)
                if future is not None and not future.done():  # else: its caller gave up
                    future.set_result(answer)
        except WorkerGone as e:
            self.fail(e)
        except Exception as e:  # (say a C library's print on its stdout): no more answers
            self.proc.kill()
            self.fail(WorkerGone(f"processor worker {self.proc.pid} sent a malformed answer: {e}"))

    def fail(self, error: WorkerGone) -> None:
        """No more answers: every request still waiting gets ``error``."""
        if self.gone is None:
            self.gone = error
        for future in self.pending.values():
            if not future.done():
                future.set_exception(error)
        self.pending.clear()

    async def stop(self) -> None:
        """Wait for the process to exit (told to, or dead), killing it if it lingers."""
        try:
            async with asyncio.timeout(STOP_TIMEOUT_S):
                await self.proc.wait()
        except TimeoutError:
            self.proc.kill()
            await self.proc.wait()
