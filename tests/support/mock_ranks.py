"""Several mock engine ranks (data parallel) and several clients, at the protocol level.

``ClusterHarness`` plays one or more frontends the way vLLM lays them out:
one handshake ROUTER, and per client an input ROUTER and an output PULL, all
named in the INIT every rank gets (engine-protocol.md §2.1;
vllm-scale-and-features.md §1.2, §2). It answers every HELLO (a restarted
rank says HELLO again), routes ADD / ABORT / UTILITY to a rank by its
identity on a client's input socket, and files every output under its
request id, noting the ``engine_index`` that sent it.

``MockRanks`` runs one mock process per rank (``--data-parallel-size N
--data-parallel-start-rank k --data-parallel-size-local 1``: vLLM's
one-launcher-per-rank layout), each with its own control socket, so a test
can kill, stop, continue or restart one rank alone; it attaches to the harness
or to any frontend's handshake address. The fixture
``start_mock_ranks(size, *mock_args, clients=1)`` gives ranks on a harness;
import it into a test module to use it.
"""

from __future__ import annotations

import itertools
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any, Callable

import msgspec
import pytest
import zmq

from engine_core.mock_control import MockControl
from harness.engine_harness import Result, bind_random, spawn_mock
from protocol import handshake
from protocol.wire import (
    ENGINE_CORE_DEAD,
    EngineCoreOutputs,
    EngineCoreRequest,
    RequestType,
    UtilityOutput,
    decode_outputs,
    encode_abort,
    encode_utility,
)


class ClusterHarness:
    """Binds what ``clients`` frontends bind; talks to every rank, synchronously."""

    def __init__(self, clients: int = 1, host: str = "127.0.0.1") -> None:
        self.ctx = zmq.Context()
        self.shake = self._bind(zmq.ROUTER, host)
        # HANDOVER: a restarted rank's identity replaces a peer not yet seen to go.
        self.inputs = [self._bind(zmq.ROUTER, host, {zmq.ROUTER_MANDATORY: 1,
                                                     zmq.ROUTER_HANDOVER: 1})
                       for _ in range(clients)]
        self.outputs = [self._bind(zmq.PULL, host) for _ in range(clients)]
        self.ready: dict[int, handshake.ReadyResponse] = {}  # the latest, per rank
        self.messages: list[tuple[int, EngineCoreOutputs]] = []  # (client, message)
        self.results: dict[str, Result] = {}
        self.engine_of: dict[str, int] = {}  # request id -> engine_index of its outputs
        self.utility_replies: dict[int, tuple[int, int, UtilityOutput]] = {}
        self.dead: list[int] = []  # a client per ENGINE_CORE_DEAD frame it received
        self._call_ids = itertools.count(1)

    def _bind(self, kind: int, host: str, options: dict[int, int] | None = None
              ) -> zmq.Socket:
        return bind_random(self.ctx, kind, host, options)

    @staticmethod
    def address(sock: zmq.Socket) -> str:
        return sock.getsockopt(zmq.LAST_ENDPOINT).decode()

    @property
    def handshake_addr(self) -> str:
        return self.address(self.shake)

    def close(self) -> None:
        self.ctx.destroy(linger=0)

    # --- startup

    def accept(self, ranks: list[int], timeout: float = 60.0
               ) -> dict[int, handshake.ReadyResponse]:
        """Answer the HELLOs of ``ranks``; wait for each one's ready response on
        every input socket and its READY."""
        by_identity = {handshake.engine_identity(r): r for r in ranks}
        init = handshake.encode_init([self.address(s) for s in self.inputs],
                                     [self.address(s) for s in self.outputs])
        registering = {(r, c) for r in ranks for c in range(len(self.inputs))}
        not_ready = set(ranks)
        poller = zmq.Poller()
        for sock in (self.shake, *self.inputs):
            poller.register(sock, zmq.POLLIN)
        deadline = time.monotonic() + timeout
        while registering or not_ready:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"ranks not ready: {sorted(not_ready)}, "
                                   f"not registered: {sorted(registering)}")
            for sock, _ in poller.poll(int(left * 1000)):
                identity, payload = sock.recv_multipart()
                rank = by_identity[identity]
                if sock is self.shake:
                    status = handshake.decode_status(payload)
                    assert (status.local, status.headless) == (False, True), status
                    if status.status == "HELLO":
                        self.shake.send_multipart([identity, init])
                    else:
                        assert status.status == "READY", status
                        not_ready.discard(rank)
                else:
                    self.ready[rank] = handshake.decode_ready_response(payload)
                    registering.discard((rank, self.inputs.index(sock)))
        return {r: self.ready[r] for r in ranks}

    # --- sending

    def send(self, rank: int, *frames: bytes, client: int = 0) -> None:
        self.inputs[client].send_multipart([handshake.engine_identity(rank), *frames])

    def add(self, request: EngineCoreRequest, rank: int = 0, client: int = 0) -> None:
        """An ADD for ``rank`` from ``client`` (its outputs come to that client)."""
        request.client_index = client
        self.results.setdefault(request.request_id, Result())
        self.send(rank, RequestType.ADD.value, msgspec.msgpack.encode(request),
                  client=client)

    def abort(self, rank: int, *request_ids: str, client: int = 0) -> None:
        self.send(rank, *encode_abort(request_ids), client=client)

    def call(self, method: str, *args: Any, rank: int = 0, client: int = 0) -> int:
        """Send a UTILITY call; returns its call id (see ``wait_utility``)."""
        call_id = next(self._call_ids)
        self.send(rank, *encode_utility(call_id, method, args, client_index=client),
                  client=client)
        return call_id

    def wait_utility(self, call_id: int, timeout: float = 5.0
                     ) -> tuple[int, int, UtilityOutput]:
        """(client it came to, engine_index, reply)."""
        self.pump_until(lambda: call_id in self.utility_replies, timeout)
        return self.utility_replies.pop(call_id)

    # --- receiving

    def recv(self, timeout: float) -> bool:
        """One message from each output socket that has one; False on timeout."""
        poller = zmq.Poller()
        for sock in self.outputs:
            poller.register(sock, zmq.POLLIN)
        ready = dict(poller.poll(int(timeout * 1000)))
        for client, sock in enumerate(self.outputs):
            if sock in ready:
                self._file(client, sock.recv_multipart())
        return bool(ready)

    def _file(self, client: int, frames: list[bytes]) -> None:
        if frames == [ENGINE_CORE_DEAD]:
            self.dead.append(client)
            return
        outs = decode_outputs(frames)
        self.messages.append((client, outs))
        for out in outs.outputs:
            self.results.setdefault(out.request_id, Result()).outputs.append(out)
            assert self.engine_of.setdefault(out.request_id, outs.engine_index) \
                == outs.engine_index, f"{out.request_id} came from two engines"
        if outs.utility_output is not None:
            self.utility_replies[outs.utility_output.call_id] = \
                (client, outs.engine_index, outs.utility_output)

    def pump_until(self, done: Callable[[], bool], timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while not done():
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError("the engines did not deliver in time")
            self.recv(left)

    def quiet(self, seconds: float) -> None:
        """File whatever arrives within ``seconds``."""
        deadline = time.monotonic() + seconds
        while (left := deadline - time.monotonic()) > 0:
            self.recv(left)


class MockRanks:
    """One single-rank mock process per rank, all attached to one frontend.

    The frontend is ``harness`` (which then accepts each started rank), or any
    handshake address, e.g. a frontend process under test.
    """

    def __init__(self, frontend_addr: str, size: int, mock_args: tuple[str, ...],
                 log_dir: Path, harness: ClusterHarness | None = None) -> None:
        self.frontend_addr = frontend_addr
        self.harness = harness
        self.size = size
        self.mock_args = mock_args
        self.log_dir = log_dir
        self.procs: dict[int, subprocess.Popen] = {}
        self.controls: dict[int, MockControl] = {}
        self.logs: dict[int, Path] = {}
        self._starts = itertools.count()

    def start(self, rank: int, wait_ready: bool = True) -> handshake.ReadyResponse | None:
        """Start ``rank`` (again); with ``wait_ready`` the harness accepts it."""
        log = self.logs[rank] = self.log_dir / f"mock-rank{rank}-{next(self._starts)}.log"
        self.procs[rank], self.controls[rank] = spawn_mock(
            self.frontend_addr, log, "--data-parallel-size", str(self.size),
            "--data-parallel-start-rank", str(rank), "--data-parallel-size-local", "1",
            *self.mock_args)
        if wait_ready and self.harness is not None:
            return self.harness.accept([rank])[rank]
        return None

    def signal(self, rank: int, signum: int) -> None:
        os.killpg(self.procs[rank].pid, signum)

    def kill(self, rank: int) -> int:
        """SIGKILL: the rank's sockets just drop. Returns the exit status."""
        self.signal(rank, signal.SIGKILL)
        return self.procs[rank].wait(10)

    def terminate(self, rank: int) -> int:
        """SIGTERM: the rank aborts what it runs and exits 0."""
        self.signal(rank, signal.SIGTERM)
        return self.procs[rank].wait(10)

    def stop(self, rank: int) -> None:
        """SIGSTOP: the rank freezes with its sockets open (a hung engine)."""
        self.signal(rank, signal.SIGSTOP)

    def cont(self, rank: int) -> None:
        self.signal(rank, signal.SIGCONT)

    def restart(self, rank: int) -> handshake.ReadyResponse | None:
        """Kill the rank if it runs, start it again: the same identity says HELLO."""
        if self.procs[rank].poll() is None:
            self.kill(rank)
        return self.start(rank)

    def log(self, rank: int) -> str:
        """The log of the rank's latest process."""
        return self.logs[rank].read_text(errors="replace")

    def close(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)  # (a stopped process dies too)
                proc.wait(10)
        if self.harness is not None:
            self.harness.close()


@pytest.fixture
def start_mock_ranks(tmp_path):
    """``start_mock_ranks(size, *mock_args, clients=1, wait_ready=True)`` -> MockRanks.

    With ``wait_ready`` every rank has done the handshake; without it, the test
    calls ``ranks.harness.accept(...)`` itself.
    """
    started: list[MockRanks] = []

    def start(size: int, *mock_args: str, clients: int = 1, wait_ready: bool = True
              ) -> MockRanks:
        harness = ClusterHarness(clients)
        ranks = MockRanks(harness.handshake_addr, size, mock_args, tmp_path, harness)
        started.append(ranks)
        for rank in range(size):
            ranks.start(rank, wait_ready=False)
        if wait_ready:
            ranks.harness.accept(list(range(size)))
        return ranks

    yield start
    for ranks in started:
        ranks.close()
