"""One engine rank: its sockets, the handshake, the busy loop, input and output.

It speaks exactly what ``vllm serve MODEL --headless --data-parallel-address H
--data-parallel-rpc-port P`` speaks (see /work/shared/docs/engine-protocol.md):
the HELLO/INIT/READY handshake, the ready response on every input address,
ADD/ABORT/UTILITY on a DEALER per input address, and one PUSH per output
address (a request's or call's ``client_index`` picks it) carrying one
``EngineCoreOutputs`` per step, stamped with the rank as ``engine_index``.
As a dense data-parallel rank it is an independent engine: identity
``rank.to_bytes(2, "little")``, ready response with ``data_parallel_size=1``
and ``data_parallel_rank=rank``.

It also reproduces the real engine's failure modes, so tests can prove a
frontend never triggers them:

* input the real input thread cannot decode or validate (unknown type byte,
  undecodable ADD, a SamplingParams ``_verify_args`` rejects, a malformed
  UTILITY, ``handle_fault_tolerance``) *poisons the input thread*: the mock
  never reads input again but stays up and connected;
* what passes decoding but breaks the busy loop (a duplicate live id, a
  prompt that is empty, out of vocabulary or not shorter than max_model_len,
  out-of-vocabulary ``allowed_token_ids``/``logit_bias``/bad words, a pooling
  request to a generative model or one of a task it lacks, a generation request
  to a pooling model) sends ``ENGINE_CORE_DEAD`` and exits 1. The real engine is known to
  die on some of these and suspected to on the rest; the mock is strict;
* a ``client_index`` without an output socket kills the output thread, as
  vLLM's IndexError does: nothing is sent any more.
"""

from __future__ import annotations

import argparse
import inspect
import logging
import math
import os
import signal
import time
import uuid
from typing import Any, Protocol, cast

import msgspec
import zmq

from engine_core.mock.counters import Counters
from engine_core.mock.errors import EngineDead, InputPoisoned, SilentExit, StartupError
from engine_core.mock.facts import ModelFacts
from engine_core.mock.loras import Loras
from engine_core.mock.pooling import MockPooler
from engine_core.mock.requests import Request, Settings
from engine_core.mock.scheduler import Scheduler
from engine_core.mock.scripts import Scripts
from engine_core.mock.utilities import Pending, Utilities
from protocol import handshake
from protocol.errors import ValidationError
from protocol.sampling import SamplingParams, check, normalize
from protocol.wire import (
    ENGINE_CORE_DEAD,
    FINISH_REASON_NAMES,
    EngineCoreOutput,
    EngineCoreOutputs,
    FinishReason,
    RequestType,
    decode_abort,
    decode_add,
    decode_utility,
    encode_outputs,
    utility_reply,
)

logger = logging.getLogger("engine_core.mock")

VLLM_VERSION = "0.32.0"
IDLE_POLL_MS = 50  # how quickly an idle mock notices signals and stall ends

# Input type bytes the real engine knows; any other byte kills its input thread.
_EXECUTOR_FAILED = b"\x04"
_WAKEUP = b"\x05"
_KNOWN_TYPES = {t.value for t in RequestType} | {_EXECUTOR_FAILED, _WAKEUP}


def _socket(
    ctx: zmq.Context,
    kind: int,
    addr: str,
    *,
    identity: bytes | None = None,
    linger: int | None = None,
) -> zmq.Socket:
    """A connecting socket with vLLM's options (unlimited HWMs)."""
    sock = ctx.socket(kind)
    if kind in (zmq.DEALER, zmq.PULL, zmq.ROUTER):
        sock.setsockopt(zmq.RCVHWM, 0)
    if kind in (zmq.DEALER, zmq.PUSH, zmq.ROUTER):
        sock.setsockopt(zmq.SNDHWM, 0)
    if identity is not None:
        sock.setsockopt(zmq.IDENTITY, identity)
    if linger is not None:
        sock.setsockopt(zmq.LINGER, linger)
    if addr.startswith("tcp://["):
        sock.setsockopt(zmq.IPV6, 1)
    sock.connect(addr)
    return sock


class ControlChannel(Protocol):
    """The control socket the engine serves between steps (``control.Control``)."""

    socket: zmq.Socket

    def serve(self) -> None: ...


class MockEngine:
    def __init__(self, args: argparse.Namespace, facts: ModelFacts, scripts: Scripts) -> None:
        self.args = args
        self.facts = facts
        self.scripts = scripts
        self.rank = args.data_parallel_start_rank
        self.identity = handshake.engine_identity(self.rank)
        self.log_stats = not args.disable_log_stats
        self.settings = Settings(args.step_time, args.tokens_per_step, args.eos_rate)
        self.block_size = args.block_size
        self.num_blocks = max(1, -(-args.max_num_seqs * args.max_model_len // args.block_size))
        self.pooler = (
            MockPooler(args.convert, args.model)
            if getattr(args, "runner", "generate") == "pooling"
            else None
        )
        self.sched = Scheduler(
            facts,
            self.settings,
            max_model_len=args.max_model_len,
            max_num_seqs=args.max_num_seqs,
            block_size=self.block_size,
            num_blocks=self.num_blocks,
            seed=args.seed,
            pooler=self.pooler,
        )
        profiler = (getattr(args, "profiler_config", None) or {}).get("profiler")
        wrap = getattr(args, "distributed_executor_backend", "mp") == "mp"
        self.utils = Utilities(self.sched, self.abort_in_flight, self.rank, profiler, wrap)
        if self.pooler is not None:
            pooler = self.pooler  # (never replaced)
            self.utils.methods["get_supported_tasks"] = lambda: pooler.tasks
        self.loras = Loras(args.enable_lora, args.max_loras, args.max_lora_rank, args.max_cpu_loras)
        self.utils.methods.update(
            add_lora=self.loras.add_lora,
            remove_lora=self.loras.remove_lora,
            list_loras=self.loras.list_loras,
            pin_lora=self.loras.pin_lora,
        )
        self.counters = Counters()
        self.ctx = zmq.Context()
        self.control: ControlChannel | None = None  # set by the CLI
        self.inputs: list[zmq.Socket] = []
        self.outputs: list[zmq.Socket] = []
        self.input_alive = True
        self.output_alive = True
        self.shutdown_requested: str | bool = False  # or the signal's name
        self.stalled_until = 0.0
        self.next_step_at = 0.0
        self.error_next = 0
        self.pending: list[tuple[int, int, str, Pending]] = []

    # --- lifecycle

    def run(self) -> int:
        for signum in (signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, self._on_signal)
        try:
            self._startup()
        except (StartupError, zmq.ZMQError, msgspec.DecodeError) as e:
            logger.error("EngineCore failed to start: %s", e)
            self._close(0)
            return 1
        try:
            self._busy_loop()
        except SilentExit:
            self._close(0)  # the control reply still gets out
            os.kill(os.getpid(), signal.SIGKILL)
        except EngineDead as e:
            logger.error("EngineCore encountered a fatal error: %s", e)
            self._send_engine_dead()
            return 1
        except Exception:  # like vLLM: anything escaping the busy loop is fatal
            logger.exception("EngineCore encountered a fatal error.")
            self._send_engine_dead()
            return 1
        self._close(4000)
        return 0

    def _on_signal(self, signum: int, _frame: Any) -> None:
        self.shutdown_requested = signal.Signals(signum).name

    def _startup(self) -> None:
        """HELLO, INIT, ready response on every input socket, then READY."""
        shake = _socket(self.ctx, zmq.DEALER, self.args.frontend_addr, identity=self.identity)
        try:
            addresses = self._handshake(shake)
        except BaseException:
            shake.close(linger=0)
            raise
        shake.close(linger=5000)  # READY must get out
        logger.info("EngineCore ready: inputs=%s outputs=%s", addresses.inputs, addresses.outputs)

    def _handshake(self, shake: zmq.Socket) -> handshake.EngineAddresses:
        shake.send(handshake.encode_status("HELLO", local=False, headless=True))
        deadline = time.monotonic() + self.args.handshake_timeout
        while not shake.poll(IDLE_POLL_MS):
            if self.shutdown_requested:
                raise StartupError("shutdown requested during the handshake")
            if time.monotonic() > deadline:
                raise StartupError(
                    "Did not receive response from front-end process within "
                    f"{self.args.handshake_timeout / 60:g} minutes"
                )
        addresses = self._decode_init(shake.recv()).addresses
        self.inputs = [
            _socket(self.ctx, zmq.DEALER, a, identity=self.identity) for a in addresses.inputs
        ]
        self.outputs = [_socket(self.ctx, zmq.PUSH, a, linger=4000) for a in addresses.outputs]
        # The first input message registers the DEALER with the frontend's ROUTER.
        ready = handshake.encode_ready_response(self._ready_response())
        for sock in self.inputs:
            sock.send(ready)
        # (A dense DP rank runs as data_parallel_size 1: no parallel_config_hash.)
        shake.send(handshake.encode_status("READY", local=False, headless=True))
        return addresses

    @staticmethod
    def _decode_init(payload: bytes) -> handshake.HandshakeInit:
        # vLLM decodes INIT into a dataclass whose parallel_config has no default.
        raw = msgspec.msgpack.decode(payload)
        if not isinstance(raw, dict) or "parallel_config" not in raw:
            raise StartupError("Object missing required field `parallel_config`")
        return handshake.decode_init(payload)

    def _ready_response(self) -> handshake.ReadyResponse:
        a, kv_tokens = self.args, self.num_blocks * self.block_size
        return handshake.ReadyResponse(
            max_model_len=a.max_model_len,
            num_gpu_blocks=self.num_blocks,
            block_size=self.block_size,
            dp_stats_address=None,
            dtype="float32",
            vllm_version=VLLM_VERSION,
            world_size=1,
            data_parallel_size=1,
            tensor_parallel_size=1,
            pipeline_parallel_size=1,
            decode_context_parallel_size=1,
            data_parallel_rank=self.rank,
            max_num_seqs=a.max_num_seqs,
            max_num_batched_tokens=max(a.max_model_len, 2048),
            instance_id=f"mock-{uuid.uuid4().hex[:12]}",
            supports_lora=self.loras.enabled,
            max_loras=self.loras.max_loras,
            kv_cache_size_tokens=kv_tokens,
            kv_cache_max_concurrency=kv_tokens / a.max_model_len,
            effective_attention_block_size=self.block_size,
        )

    def _close(self, output_linger_ms: int) -> None:
        """Close everything; outputs (and a last control reply) may still drain."""
        for sock in self.inputs:
            sock.close(linger=0)
        for sock in self.outputs:
            sock.close(linger=output_linger_ms)
        if self.control is not None:
            self.control.socket.close(linger=1000)
        self.ctx.term()

    def _send_engine_dead(self) -> None:
        if self.output_alive:
            for sock in self.outputs:
                sock.send(ENGINE_CORE_DEAD)
        self._close(4000)

    # --- the loop

    def _busy_loop(self) -> None:
        poller = zmq.Poller()
        for sock in self.inputs:
            poller.register(sock, zmq.POLLIN)
        control = self.control.socket if self.control is not None else None
        if control is not None:
            poller.register(control, zmq.POLLIN)
        while not self.shutdown_requested:
            if self._stalled():
                continue
            ready = dict(poller.poll(self._poll_timeout_ms()))
            if control in ready:  # (only when there is a channel)
                cast(ControlChannel, self.control).serve()
            for sock in self.inputs:
                if sock in ready:
                    self._drain_input(sock, poller)
            if self.sched.has_work() and not self._stalled() and self._step_due():
                self._step()
            self._complete_pending()
        self._shutdown()

    def _stalled(self) -> bool:
        """While stalled only the control channel is served."""
        wait = self.stalled_until - time.monotonic()
        if wait <= 0:
            return False
        control = self.control
        assert control is not None  # only a control command stalls the engine
        if control.socket.poll(int(min(wait * 1000, IDLE_POLL_MS))):
            control.serve()
        return True

    def _poll_timeout_ms(self) -> int:
        if not self.sched.has_work():
            return IDLE_POLL_MS
        wait = self.next_step_at - time.monotonic() if self.settings.step_time > 0 else 0
        return max(0, min(IDLE_POLL_MS, math.ceil(wait * 1000)))

    def _step_due(self) -> bool:
        """With --step-time, steps end step_time apart (the "model" runs meanwhile)."""
        step_time = self.settings.step_time
        if step_time <= 0:
            return True
        now = time.monotonic()
        if self.next_step_at < now - step_time:  # idle until now: a step starts
            self.next_step_at = now + step_time
        if now < self.next_step_at:
            return False
        self.next_step_at += step_time
        return True

    def _drain_input(self, sock: zmq.Socket, poller: zmq.Poller) -> None:
        while self.input_alive and time.monotonic() >= self.stalled_until:
            try:
                frames = sock.recv_multipart(zmq.NOBLOCK)
            except zmq.Again:
                return
            try:
                self._handle_input(frames)
            except InputPoisoned as e:
                logger.error("EngineCore input thread died (no more input is read): %s", e)
                self.input_alive = False
                for s in self.inputs:
                    poller.unregister(s)

    def _step(self) -> None:
        by_client, aux, finished = self.sched.step()
        self.counters.steps += 1
        for _, reason in finished:
            self.counters.finished[FINISH_REASON_NAMES[reason]] += 1
        self.counters.remember_finished(r.id for r, _ in finished)
        stats = self.sched.stats() if self.log_stats else None
        if stats is not None and not by_client:
            by_client[0] = []  # an empty step still reports stats
        timestamp = time.monotonic()
        weight_version = self.utils.weight_version
        for client, outs in by_client.items():
            self._send(
                client,
                EngineCoreOutputs(
                    outputs=outs,
                    scheduler_stats=stats,
                    timestamp=timestamp,
                    weight_version=weight_version,
                ),
                aux.get(client),
            )
            stats = None  # stats go to one client only

    def _send(
        self, client_index: int, outs: EngineCoreOutputs, aux: list[bytes] | None = None
    ) -> None:
        if not self.output_alive:
            return
        if not 0 <= client_index < len(self.outputs):
            # vLLM's output thread dies on the IndexError and never sends again.
            logger.error(
                "EngineCore output thread died: IndexError: client_index %d "
                "with %d output socket(s)",
                client_index,
                len(self.outputs),
            )
            self.output_alive = False
            return
        outs.engine_index = self.rank  # as vLLM's output thread stamps it
        self.outputs[client_index].send_multipart(encode_outputs(outs, aux))

    def _finish_outside_step(self, requests: list[tuple[int, str]], reason: FinishReason) -> None:
        """Terminal outputs the engine builds itself (abort, preprocessing error):
        no tokens, and ``finished_requests`` set. ``requests``: (client, id)."""
        by_client: dict[int, list[str]] = {}
        for client, request_id in requests:
            by_client.setdefault(client, []).append(request_id)
        for client, ids in by_client.items():
            self._send(
                client,
                EngineCoreOutputs(
                    outputs=[EngineCoreOutput(i, [], finish_reason=reason) for i in ids],
                    finished_requests=ids,
                    timestamp=time.monotonic(),
                ),
            )
        self.counters.finished[FINISH_REASON_NAMES[reason]] += len(requests)
        self.counters.remember_finished(request_id for _, request_id in requests)

    def abort_in_flight(self) -> None:
        """Engine-initiated abort of everything (pause, shutdown, abort_all)."""
        aborted = self.sched.remove_all()
        self._finish_outside_step([(r.client_index, r.id) for r in aborted], FinishReason.ABORT)

    def _shutdown(self) -> None:
        """SIGTERM/SIGINT with --shutdown-timeout 0: abort in-flight requests, exit."""
        logger.info("[shutdown] EngineCore: trigger received signal=%s", self.shutdown_requested)
        if self.sched.live:
            logger.info(
                "[shutdown] EngineCore: aborting in-flight requests count=%d", len(self.sched.live)
            )
        self.abort_in_flight()
        if self.sched.has_work():
            self._step()  # the last, empty step: vLLM exits once it has no work

    # --- input

    def _handle_input(self, frames: list[bytes]) -> None:
        type_frame, *data = frames
        if type_frame not in _KNOWN_TYPES:
            raise InputPoisoned(f"ValueError: {type_frame!r} is not a valid EngineCoreRequestType")
        if not data:
            raise InputPoisoned("IndexError: no payload frame")
        if type_frame == RequestType.ADD.value:
            self._on_add(data[0])
        elif type_frame == RequestType.UTILITY.value:
            self._on_utility(data[0])
        elif type_frame == RequestType.ABORT.value:
            self._on_abort(data[0])
        else:
            self._on_other(type_frame, data[0])

    def _on_add(self, payload: bytes) -> None:
        try:
            req = decode_add(payload)
            params = req.sampling_params
            if params is not None:
                normalize(params)
                check(params)  # SamplingParams.__post_init__ runs at decode time
        except (msgspec.DecodeError, ValidationError) as e:
            raise InputPoisoned(f"undecodable or invalid ADD: {e}") from e
        self.counters.adds += 1
        by_client = self.counters.adds_by_client
        by_client[req.client_index] = by_client.get(req.client_index, 0) + 1
        if params is None and req.pooling_params is not None:
            if self.pooler is None:
                raise EngineDead("ValueError: Unsupported task: this model only generates")
            self.pooler.check(req.request_id, req.pooling_params)
            params = SamplingParams(max_tokens=1)  # the request generates nothing
        elif params is not None and self.pooler is not None:
            raise EngineDead("ValueError: This model does not support generation")
        if params is None or params.max_tokens is None or req.prompt_token_ids is None:
            # preprocess_add_request fails: a request-scoped ERROR, not a crash.
            logger.error("Unexpected error pre-processing request %s", req.request_id)
            self._finish_outside_step([(req.client_index, req.request_id)], FinishReason.ERROR)
            return
        if req.lora_request is not None:
            self.loras.on_add(req.lora_request)
        script = self.scripts.match(req.prompt_token_ids) if self.scripts else None
        request = Request(req, params, self.facts, self.args.seed, self.log_stats, script)
        error = self.error_next > 0
        self.error_next -= error
        self.sched.add(request, error=error)

    def _on_abort(self, payload: bytes) -> None:
        try:
            ids = set(decode_abort(payload))
        except msgspec.ValidationError as e:
            raise EngineDead(f"TypeError: bad ABORT payload: {e}") from e
        except msgspec.DecodeError as e:
            raise InputPoisoned(f"undecodable ABORT: {e}") from e
        gone = self.sched.remove(ids)
        self.counters.aborted += len(gone)
        self.counters.remember_finished(r.id for r in gone)
        unknown = ids - {r.id for r in gone}
        after_finish = sum(1 for i in unknown if i in self.counters.finished_ids)
        self.counters.aborts_after_finish += after_finish
        self.counters.aborts_unknown += len(unknown) - after_finish

    def _on_other(self, type_frame: bytes, payload: bytes) -> None:
        try:
            msgspec.msgpack.decode(payload)
        except msgspec.DecodeError as e:
            raise InputPoisoned(f"undecodable payload: {e}") from e
        if type_frame == _EXECUTOR_FAILED:
            raise EngineDead("RuntimeError: Executor failed.")
        if type_frame == RequestType.START_DP_WAVE.value:
            logger.error(
                "Unrecognized input request type encountered: %s", RequestType.START_DP_WAVE
            )

    # --- utilities

    def _on_utility(self, payload: bytes) -> None:
        try:
            client_index, call_id, method, args = decode_utility(payload)
        except msgspec.DecodeError as e:
            raise InputPoisoned(f"malformed UTILITY payload: {e}") from e
        if method == "handle_fault_tolerance":
            raise InputPoisoned(
                "AttributeError: 'EngineCoreProc' object has no attribute 'ft_sentinel'"
            )
        self.counters.utility_calls += 1
        value, failure = None, None
        try:
            value = self._call_utility(method, args)
        except Exception as e:  # noqa: BLE001 - reported to the caller, like vLLM
            logger.warning("Invocation of %s method failed: %s", method, e)
            failure = f"Call to {method} method failed: {e}"
        if isinstance(value, Pending):
            self.pending.append((client_index, call_id, method, value))
            return
        self._reply(client_index, call_id, value, failure)

    def _call_utility(self, method: str, args: list) -> Any:
        func = self.utils.methods.get(method)
        if func is None:
            raise AttributeError(f"'EngineCoreProc' object has no attribute '{method}'")
        if len(args) > len(inspect.signature(func).parameters):
            raise AssertionError()  # vLLM's bare assert: an empty message
        return func(*args)

    def _reply(self, client_index: int, call_id: int, value: Any, failure: str | None) -> None:
        self._send(client_index, utility_reply(call_id, value, failure, timestamp=time.monotonic()))

    def _complete_pending(self) -> None:
        """Answer deferred calls (pause "wait") once the engine has drained."""
        if not self.pending or self.sched.has_work():
            return
        pending, self.pending = self.pending, []
        for client_index, call_id, method, p in pending:
            try:
                self._reply(client_index, call_id, p.complete(), None)
            except Exception as e:  # noqa: BLE001
                self._reply(client_index, call_id, None, f"Call to {method} method failed: {e}")
