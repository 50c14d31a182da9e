"""The frontend's side of the engine protocol, synchronously, for protocol-level
tests and the mock engine's own benchmark.

``EngineHarness`` plays the frontend of engine-protocol.md §2.1: it binds the
handshake ROUTER, the input ROUTER and the output PULL on free loopback ports,
answers HELLO, waits for the ready response and READY, then sends ADD / ABORT /
UTILITY built with ``protocol.wire`` and decodes outputs with
``protocol.wire.decode_outputs``. ``spawn_mock`` starts ``python -m
engine_core.mock`` against it (or any handshake address).
"""

from __future__ import annotations

import itertools
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

import msgspec
import zmq

from engine_core.mock_control import MockControl
from harness.ports import HOST, free_port_triple
from harness.procs import spawn
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

IDENTITY = handshake.engine_identity(0)


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


def bind_random(ctx: zmq.Context, kind: int, host: str,
                options: dict[int, int] | None = None) -> zmq.Socket:
    """A socket of ``kind`` bound to a random port of ``host``, as a frontend
    binds (no linger, unbounded queues: the harness reads everything)."""
    sock = ctx.socket(kind)
    for option, value in {zmq.LINGER: 0, zmq.SNDHWM: 0, zmq.RCVHWM: 0,
                          **(options or {})}.items():
        sock.setsockopt(option, value)
    sock.bind_to_random_port(f"tcp://{host}")
    return sock


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
        return bind_random(self.ctx, kind, host)

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


def spawn_mock(frontend_addr: str, log_path: Path, *args: str
               ) -> tuple[subprocess.Popen, MockControl]:
    """``python -m engine_core.mock`` in its own session, with a control channel
    (on a port with the next four free: a launcher of several ranks binds rank
    k's channel at port + k)."""
    control_addr = f"tcp://{HOST}:{free_port_triple()}"
    cmd = [sys.executable, "-m", "engine_core.mock", "--frontend-addr", frontend_addr,
           "--control-addr", control_addr, *args]
    return spawn(cmd, log_path), MockControl(control_addr)
