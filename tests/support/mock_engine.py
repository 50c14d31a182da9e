"""A synchronous frontend-side ZMQ harness, and fixtures that run the mock engine.

``EngineHarness`` plays the frontend of engine-protocol.md §2.1: it binds the
handshake ROUTER, the input ROUTER and the output PULL on free loopback ports,
answers HELLO, waits for the ready response and READY, then sends ADD / ABORT /
UTILITY built with ``protocol.wire`` and decodes outputs with
``protocol.wire.decode_outputs``. ``start_mock`` starts
``python -m engine_core.mock`` against it and always kills it at teardown.
"""

from __future__ import annotations

import itertools
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

import msgspec
import pytest
import zmq

from engine_core.mock_control import MockControl
from protocol import handshake
from protocol.sampling import ModelLimits, SamplingParams
from protocol.wire import (
    ENGINE_CORE_DEAD,
    EngineCoreOutput,
    EngineCoreOutputs,
    EngineCoreRequest,
    RequestType,
    UtilityOutput,
    decode_outputs,
    encode_abort,
    encode_add,
    encode_utility,
)
from tests.support.real_engine import free_port_triple

IDENTITY = handshake.engine_identity(0)
REPO_ROOT = Path(__file__).resolve().parents[2]


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def make_request(request_id: str, prompt: list[int], **params: Any) -> EngineCoreRequest:
    """An ADD payload with ``SamplingParams(**params)`` (greedy, 16 tokens by default)."""
    params.setdefault("temperature", 0.0)
    return EngineCoreRequest(request_id, prompt, None, SamplingParams(**params), None,
                             time.time(), None, None, None)


@dataclass
class Result:
    """Everything the engine sent about one request."""

    outputs: list[EngineCoreOutput] = field(default_factory=list)

    @property
    def tokens(self) -> list[int]:
        return [t for out in self.outputs for t in out.new_token_ids]

    @property
    def finish_reason(self) -> int | None:
        return self.outputs[-1].finish_reason if self.outputs else None

    @property
    def stop_reason(self) -> int | str | None:
        return self.outputs[-1].stop_reason if self.outputs else None

    @property
    def finished(self) -> bool:
        return self.finish_reason is not None

    def logprob_rows(self) -> tuple[list[list[int]], list[list[float]], list[int]]:
        """Sample logprobs over all steps: id rows, logprob rows, sampled ranks."""
        ids, lps, ranks = [], [], []
        for out in self.outputs:
            if out.new_logprobs is not None:
                ids += out.new_logprobs.token_ids.rows()
                lps += out.new_logprobs.logprobs.rows()
                ranks += out.new_logprobs.ranks.flat()
        return ids, lps, ranks


class EngineHarness:
    """Binds what a frontend binds and talks to one engine, synchronously."""

    def __init__(self, host: str = "127.0.0.1") -> None:
        self.ctx = zmq.Context()
        self.shake = self._bind(zmq.ROUTER, host)
        self.input = self._bind(zmq.ROUTER, host)
        self.input.setsockopt(zmq.ROUTER_MANDATORY, 1)
        self.output = self._bind(zmq.PULL, host)
        self.ready: handshake.ReadyResponse | None = None
        self.limits: ModelLimits | None = None
        self.messages: list[EngineCoreOutputs] = []
        self.results: dict[str, Result] = {}
        self.utility_replies: dict[int, UtilityOutput] = {}
        self.dead = False
        self._call_ids = itertools.count(1)

    def _bind(self, kind: int, host: str) -> zmq.Socket:
        sock = self.ctx.socket(kind)
        sock.setsockopt(zmq.LINGER, 0)
        sock.setsockopt(zmq.SNDHWM, 0)
        sock.setsockopt(zmq.RCVHWM, 0)
        sock.bind_to_random_port(f"tcp://{host}")
        return sock

    @staticmethod
    def address(sock: zmq.Socket) -> str:
        return sock.getsockopt(zmq.LAST_ENDPOINT).decode()

    @property
    def handshake_addr(self) -> str:
        return self.address(self.shake)

    def close(self) -> None:
        self.ctx.destroy(linger=0)

    # --- startup

    def wait_hello(self, timeout: float = 10.0) -> tuple[list[bytes], handshake.HandshakeStatus]:
        if not self.shake.poll(int(timeout * 1000)):
            raise TimeoutError("no HELLO from the engine")
        frames = self.shake.recv_multipart()
        return frames, handshake.decode_status(frames[1])

    def handshake(self, timeout: float = 10.0, vocab_size: int = 1200) -> handshake.ReadyResponse:
        """HELLO -> INIT -> ready response and READY (either order)."""
        (identity, _), hello = self.wait_hello(timeout)
        assert identity == IDENTITY and hello.status == "HELLO", hello
        self.shake.send_multipart([identity, handshake.encode_init(
            [self.address(self.input)], [self.address(self.output)])])
        got_ready_status = False
        deadline = time.monotonic() + timeout
        poller = zmq.Poller()
        poller.register(self.shake, zmq.POLLIN)
        poller.register(self.input, zmq.POLLIN)
        while self.ready is None or not got_ready_status:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError("engine did not become ready")
            for sock, _ in poller.poll(int(left * 1000)):
                identity, payload = sock.recv_multipart()
                assert identity == IDENTITY
                if sock is self.input:
                    self.ready = handshake.decode_ready_response(payload)
                else:
                    status = handshake.decode_status(payload)
                    assert status.status == "READY", status
                    got_ready_status = True
        # Like vLLM's --max-logprobs -1: the engine itself has no logprobs cap.
        self.limits = ModelLimits(vocab_size=vocab_size, max_model_len=self.ready.max_model_len,
                                  max_logprobs=-1)
        return self.ready

    # --- sending

    def send(self, *frames: bytes) -> None:
        self.input.send_multipart([IDENTITY, *frames])

    def add(self, request: EngineCoreRequest) -> None:
        """A validated ADD (what a correct frontend sends)."""
        self.results.setdefault(request.request_id, Result())
        self.send(*encode_add(request, self.limits))

    def add_unchecked(self, request: EngineCoreRequest) -> None:
        """An ADD encoded without any frontend-side validation."""
        self.results.setdefault(request.request_id, Result())
        self.send(RequestType.ADD.value, msgspec.msgpack.encode(request))

    def abort(self, *request_ids: str) -> None:
        self.send(*encode_abort(request_ids))

    def call(self, method: str, *args: Any) -> int:
        """Send a UTILITY call; returns its call id (see ``utility``)."""
        call_id = next(self._call_ids)
        self.send(*encode_utility(call_id, method, args))
        return call_id

    def utility(self, method: str, *args: Any, timeout: float = 5.0) -> UtilityOutput:
        call_id = self.call(method, *args)
        return self.wait_utility(call_id, timeout)

    def wait_utility(self, call_id: int, timeout: float = 5.0) -> UtilityOutput:
        self.pump_until(lambda: call_id in self.utility_replies, timeout)
        return self.utility_replies.pop(call_id)

    # --- receiving

    def recv_frames(self, timeout: float) -> list[bytes] | None:
        if not self.output.poll(int(timeout * 1000)):
            return None
        return self.output.recv_multipart()

    def recv(self, timeout: float = 5.0) -> EngineCoreOutputs | None:
        """One decoded message (also filed into results); None on timeout."""
        frames = self.recv_frames(timeout)
        if frames is None:
            return None
        if frames == [ENGINE_CORE_DEAD]:
            self.dead = True
            return None
        outs = decode_outputs(frames)
        self.messages.append(outs)
        for out in outs.outputs:
            self.results.setdefault(out.request_id, Result()).outputs.append(out)
        if outs.utility_output is not None:
            self.utility_replies[outs.utility_output.call_id] = outs.utility_output
        return outs

    def pump_until(self, done, timeout: float = 10.0) -> None:
        deadline = time.monotonic() + timeout
        while not done():
            left = deadline - time.monotonic()
            if left <= 0 or self.dead:
                raise TimeoutError("engine did not deliver in time"
                                   + (" (ENGINE_CORE_DEAD)" if self.dead else ""))
            self.recv(left)

    def run(self, requests: Iterable[EngineCoreRequest], timeout: float = 10.0
            ) -> dict[str, Result]:
        """Send the requests and collect until every one of them has finished."""
        ids = []
        for request in requests:
            self.add(request)
            ids.append(request.request_id)
        self.pump_until(lambda: all(self.results[i].finished for i in ids), timeout)
        return {i: self.results[i] for i in ids}

    def quiet(self, seconds: float) -> list[list[bytes]]:
        """Everything (raw) that arrives within ``seconds``."""
        got = []
        deadline = time.monotonic() + seconds
        while (left := deadline - time.monotonic()) > 0:
            frames = self.recv_frames(left)
            if frames is not None:
                got.append(frames)
        return got


# ------------------------------------------------------------------ processes

@dataclass
class MockEngineProcess:
    """A running mock: its process, the harness it talks to, its control client."""

    proc: subprocess.Popen
    harness: EngineHarness
    control: MockControl
    log_path: Path

    @property
    def ready(self) -> handshake.ReadyResponse | None:
        return self.harness.ready

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def wait(self, timeout: float = 10.0) -> int:
        return self.proc.wait(timeout)

    def kill(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)
        self.harness.close()


def spawn_mock(frontend_addr: str, log_path: Path, *args: str
               ) -> tuple[subprocess.Popen, MockControl]:
    """``python -m engine_core.mock`` in its own session, with a control channel
    (on a port with the next four free: a launcher of several ranks binds rank
    k's channel at port + k)."""
    control_addr = f"tcp://127.0.0.1:{free_port_triple()}"
    cmd = [sys.executable, "-m", "engine_core.mock", "--frontend-addr", frontend_addr,
           "--control-addr", control_addr, *args]
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(cmd, cwd=REPO_ROOT, stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True)
    return proc, MockControl(control_addr)


@pytest.fixture
def start_mock(tmp_path):
    """``start_mock(*mock_args, wait_ready=True)`` -> a running MockEngineProcess.

    With ``wait_ready`` the harness has done the handshake; without it, the
    test drives the handshake itself.
    """
    started: list[MockEngineProcess] = []

    def start(*args: str, wait_ready: bool = True, vocab_size: int = 1200
              ) -> MockEngineProcess:
        harness = EngineHarness()
        log_path = tmp_path / f"mock-engine-{len(started)}.log"
        proc, control = spawn_mock(harness.handshake_addr, log_path, *args)
        mock = MockEngineProcess(proc, harness, control, log_path)
        started.append(mock)
        if wait_ready:
            harness.handshake(vocab_size=vocab_size)
        return mock

    yield start
    for mock in started:
        mock.kill()


@pytest.fixture
def mock_engine(start_mock) -> MockEngineProcess:
    """A mock engine with default settings, already handshaken."""
    return start_mock()
