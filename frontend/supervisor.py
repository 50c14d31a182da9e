"""``--api-server-count N``: one service, N frontend processes.

The supervising parent binds the engine handshake socket (every engine rank
learns all N workers' address pairs, client i's at ``inputs[i]``/``outputs[i]``)
and, for ``--uds``, the HTTP listener. It starts N workers (multiprocessing,
spawned: fresh interpreters), each a whole frontend process with its own
``client_index``, engine link, engine state file and HTTP listener: on TCP its
own SO_REUSEPORT socket on the same port, so the kernel spreads connections
over the workers; on a Unix socket (no SO_REUSEPORT there) the parent accepts
and hands each connection to the least busy worker (SCM_RIGHTS).

Shared memory (``Shared``) holds each worker's admission counts (``--max-
concurrent-requests`` is the service's limit), heartbeat and readiness; a
directory holds each worker's metrics snapshot, so that /metrics from any
worker shows the whole service. The parent speaks sd_notify for the service:
``READY=1`` once every worker serves, ``WATCHDOG=1`` only while every worker's
heartbeat is fresh, ``STOPPING=1`` on SIGTERM, which it forwards (each worker
drains). A worker that dies is replaced; the replacement re-attaches to the
engines from its state file and aborts the requests its predecessor left (their
outputs are unknown to it), while the other workers keep serving.
"""

from __future__ import annotations

import argparse
import asyncio
import ctypes
import logging
import multiprocessing
import os
import shutil
import signal
import socket
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, cast

import zmq

from frontend.engine_addresses import EngineAddresses
from frontend.engine_handshake import HandshakeServer
from frontend.ops.systemd import Notifier

log = logging.getLogger("frontend")

HEARTBEAT_S = 1.0
# A worker that keeps dying: this many deaths within the window stop the service
# (systemd restarts it as a whole), so a broken setup does not spin.
CRASH_LIMIT, CRASH_WINDOW_S = 5, 60.0
STOP_GRACE_S = 15.0  # beyond --shutdown-timeout before workers are killed
PR_SET_PDEATHSIG = 1


class Shared:
    """Memory every worker sees; each worker writes only its own slots."""

    def __init__(self, ctx: Any, workers: int, ranks: int = 1) -> None:
        self.lock = ctx.Lock()
        self.requests = ctx.RawArray("q", workers)
        self.choices = ctx.RawArray("q", workers)
        self.heartbeat = ctx.RawArray("d", workers)  # time.monotonic(), system-wide
        self.ready = ctx.RawArray("b", workers)
        # When each engine rank last said HELLO (the parent's handshake server
        # writes; every worker accepts a rank's registration only after it).
        self.hellos = ctx.RawArray("d", ranks)

    def forget(self, worker: int) -> None:
        """A dead worker's slots: nothing in flight, not ready."""
        with self.lock:
            self.requests[worker] = self.choices[worker] = 0
        self.ready[worker] = 0
        self.heartbeat[worker] = 0.0


@dataclass
class WorkerSpec:
    """What a worker process is started with (pickled to it)."""

    argv: list[str]
    index: int
    count: int
    shared: Shared
    handoff: socket.socket | None  # where its Unix-socket connections arrive
    metrics_dir: str  # every worker's metrics snapshot (frontend/ops/service_metrics.py)


class Supervisor:
    def __init__(
        self,
        argv: list[str],
        args: argparse.Namespace,
        addresses: EngineAddresses,
        shutdown_timeout: float,
        worker_main: Callable[[WorkerSpec], int],
    ) -> None:
        self.argv = argv
        self.worker_main = worker_main  # (a module-level function: spawn pickles it)
        self.args = args
        self.count = args.api_server_count
        self.addresses = addresses
        self.shutdown_timeout = shutdown_timeout
        self.ctx = multiprocessing.get_context("spawn")
        self.shared = Shared(self.ctx, self.count, args.data_parallel_size)
        self.notifier = Notifier.from_env()
        self.handshake = HandshakeServer(
            addresses.handshake,
            addresses.inputs,
            addresses.outputs,
            args.data_parallel_size,
            on_status=self.notifier.status,
            hellos=self.shared.hellos,
        )
        self.listen_socket = _unix_listener(args.uds) if args.uds else None
        self.handoffs: list[socket.socket | None] = [None] * self.count
        self.workers: list[Any] = [None] * self.count
        self._next = 0
        self.metrics_dir = tempfile.mkdtemp(
            prefix="vllm-frontend-metrics-", dir=os.environ.get("XDG_RUNTIME_DIR")
        )
        self.deaths: list[float] = []
        self.draining = False

    def run(self) -> int:
        import uvloop

        return uvloop.run(self._run())

    async def _run(self) -> int:
        loop = asyncio.get_running_loop()
        stopped = asyncio.Event()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stopped.set)
        try:
            self.handshake.start(zmq.Context.instance())
        except OSError as e:
            log.error("%s", e)
            return 1
        self.notifier.status(f"starting {self.count} frontend workers")
        for i in range(self.count):
            self._start(i)
        if self.listen_socket is not None:
            self.listen_socket.setblocking(False)
            loop.add_reader(self.listen_socket.fileno(), self._hand_over)
        self.notifier.start_watchdog(self._all_responsive)
        status = await self._supervise(stopped)
        await self._stop_workers()
        await self.handshake.close()
        log.info("stopped")
        return status

    def _start(self, index: int) -> None:
        theirs = None
        if self.listen_socket is not None:
            old = self.handoffs[index]
            if old is not None:
                old.close()
            self.handoffs[index], theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        spec = WorkerSpec(self.argv, index, self.count, self.shared, theirs, self.metrics_dir)
        proc = self.ctx.Process(target=self.worker_main, args=(spec,), name=f"frontend-{index}")
        proc.start()
        if theirs is not None:
            theirs.close()  # the worker has its copy
        self.workers[index] = proc
        log.info("frontend worker %d started (pid %d)", index, proc.pid)

    async def _supervise(self, stopped: asyncio.Event) -> int:
        """Until SIGTERM: replace dead workers, say READY=1 once all serve."""
        announced = False
        while not stopped.is_set():
            for index, proc in enumerate(self.workers):
                if proc.is_alive():
                    continue
                self.shared.forget(index)
                log.error(
                    "frontend worker %d (pid %d) exited with %s; replacing it",
                    index,
                    proc.pid,
                    proc.exitcode,
                )
                now = time.monotonic()
                self.deaths = [t for t in self.deaths if now - t < CRASH_WINDOW_S] + [now]
                if len(self.deaths) >= CRASH_LIMIT:
                    log.error(
                        "%d worker deaths within %.0f s: stopping the service",
                        len(self.deaths),
                        CRASH_WINDOW_S,
                    )
                    return 1
                self._start(index)
            if not announced and all(self.shared.ready):
                announced = True
                where = (
                    f"unix:{self.args.uds}"
                    if self.args.uds
                    else f"{self.args.host}:{self.args.port}"
                )
                log.info("serving on %s with %d frontend workers", where, self.count)
                self.notifier.ready(f"serving on {where} with {self.count} frontend workers")
            try:
                await asyncio.wait_for(stopped.wait(), 0.2)
            except TimeoutError:
                pass
        return 0

    def _hand_over(self) -> None:
        """Accept what waits on the Unix socket; each connection to the ready
        worker with the fewest requests in flight (ties rotate)."""
        listen = self.listen_socket
        assert listen is not None  # (the reader is added only with the socket)
        while True:
            try:
                conn, _ = listen.accept()
            except (BlockingIOError, InterruptedError):
                return
            with conn:
                ready = [
                    i
                    for i in range(self.count)
                    if self.shared.ready[i] and self.handoffs[i] is not None
                ]
                if not ready:
                    continue  # (nobody serves yet: the client sees it closed)
                start = self._next = (self._next + 1) % self.count
                order = sorted(
                    ready, key=lambda i: (self.shared.requests[i], (i - start) % self.count)
                )
                for index in order:
                    try:
                        handoff = cast(socket.socket, self.handoffs[index])  # ready: not None
                        socket.send_fds(handoff, [b"c"], [conn.fileno()])
                        break
                    except OSError:
                        continue  # that worker just died

    def _all_responsive(self, interval: float) -> bool:
        """Every worker's event loop ran within two ping intervals."""
        now = time.monotonic()
        limit = max(2 * interval, 3 * HEARTBEAT_S)
        return all(now - beat < limit for beat in self.shared.heartbeat)

    async def _stop_workers(self) -> None:
        """Drain: SIGTERM to every worker; each finishes its requests up to
        --shutdown-timeout; whatever is left after the grace is killed."""
        self.draining = True
        self.notifier.stopping("draining")
        for proc in self.workers:
            if proc is not None and proc.is_alive():
                os.kill(proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + self.shutdown_timeout + STOP_GRACE_S
        while any(p.is_alive() for p in self.workers) and time.monotonic() < deadline:
            await asyncio.sleep(0.1)
        for proc in self.workers:
            if proc.is_alive():
                log.warning("frontend worker %d did not stop; killing it", proc.pid)
                proc.kill()
            proc.join(5)
        if self.listen_socket is not None:
            asyncio.get_running_loop().remove_reader(self.listen_socket.fileno())
            self.listen_socket.close()
        for handoff in self.handoffs:
            if handoff is not None:
                handoff.close()
        shutil.rmtree(self.metrics_dir, ignore_errors=True)


def _unix_listener(path: str) -> socket.socket:
    """The service's Unix socket; the supervisor accepts on it."""
    try:
        if os.path.exists(path) and not os.path.isdir(path):
            os.unlink(path)  # a stale socket from a previous run
    except OSError:
        pass
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.bind(path)
    sock.listen(1024)
    return sock


def become_worker() -> None:
    """What a worker process does first: die with its supervisor, whatever kills
    it, and leave systemd to the supervisor."""
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    except OSError:
        pass
    os.environ.pop("NOTIFY_SOCKET", None)
    os.environ.pop("WATCHDOG_USEC", None)
