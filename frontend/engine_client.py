"""The frontend's side of the ZMQ link to one vLLM 0.32 EngineCore.

The frontend binds all three sockets (the engine only connects): a handshake
ROUTER at ``--engine-addr``, an input ROUTER (requests to the engine) and an
output PULL (engine outputs). Outputs are read in an event-loop reader
callback, decoded once per message and handed to ``on_outputs``; utility
replies resolve their futures here. Aborts are coalesced into one message per
loop iteration.

The handshake ROUTER stays bound after start-up: an engine that is restarted
(after a crash, or by systemd) says HELLO again and is attached without
restarting the frontend.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import pathlib
import time
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import zmq

from protocol import handshake as hs
from protocol import wire
from protocol.errors import EngineVersionError, ProtocolError

log = logging.getLogger("frontend.engine")

ENGINE_IDENTITY = hs.engine_identity(0)
# Messages handled per reader callback before yielding to other tasks.
MAX_MESSAGES_PER_WAKEUP = 64
# A dropped TCP link to the engine is declared death after this long without
# a reconnect (an engine process that exits drops its connections at once).
DISCONNECT_GRACE_S = 1.0


class EngineUnavailableError(Exception):
    """Nothing can be sent: no engine is attached (not yet, or it died)."""


@dataclass(frozen=True)
class EngineAddresses:
    handshake: str
    input: str
    output: str


def derive_addresses(engine_addr: str, input_addr: str | None = None,
                     output_addr: str | None = None) -> EngineAddresses:
    """Input/output addresses next to the handshake address, so they are stable.

    Stable addresses let a restarted frontend be found again by a running
    engine (its DEALER/PUSH reconnect by themselves).
    """
    if engine_addr.startswith("tcp://"):
        host, _, port = engine_addr[len("tcp://"):].rpartition(":")
        if not port.isdigit() or not host:
            raise ValueError(f"--engine-addr must be tcp://HOST:PORT, got {engine_addr!r}")
        if host in ("*", "0.0.0.0", "[::]"):
            raise ValueError(
                "--engine-addr needs a concrete address the engine can reach "
                f"(it is also sent to the engine), not {host}")
        default_in = f"tcp://{host}:{int(port) + 1}"
        default_out = f"tcp://{host}:{int(port) + 2}"
    elif engine_addr.startswith("ipc://"):
        default_in, default_out = engine_addr + "-input", engine_addr + "-output"
    else:
        raise ValueError(f"--engine-addr must be tcp://HOST:PORT or ipc://PATH, "
                         f"got {engine_addr!r}")
    return EngineAddresses(engine_addr, input_addr or default_in, output_addr or default_out)


class EngineClient:
    """Owns the sockets; knows nothing about HTTP or requests' meaning."""

    def __init__(self, addresses: EngineAddresses, *,
                 on_outputs: Callable[[list[wire.StepOutputs]], None],
                 on_dead: Callable[[str], None],
                 on_ready: Callable[[hs.ReadyResponse], None] | None = None,
                 state_file: str | None = None) -> None:
        self.addresses = addresses
        self.state_file = pathlib.Path(state_file) if state_file else None
        self._on_outputs = on_outputs
        self._on_dead = on_dead
        self._on_ready = on_ready
        self.ready: hs.ReadyResponse | None = None
        self.alive = False
        self.death_reason: str | None = None
        self._ctx = zmq.Context.instance()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._handshake: zmq.Socket | None = None
        self._input: zmq.Socket | None = None
        self._output: zmq.Socket | None = None
        self._monitor: zmq.Socket | None = None
        self._pending_aborts: list[str] = []
        self.num_aborts_sent = 0  # engine ids in ABORT messages sent (for /metrics)
        self._abort_scheduled = False
        self._call_ids = itertools.count(1)
        self._utility_calls: dict[int, asyncio.Future] = {}
        self._disconnect_timer: asyncio.TimerHandle | None = None
        self._attached = asyncio.Event()
        self._start_error: BaseException | None = None
        self._closed = False
        self._supervisor: asyncio.Task | None = None

    # ------------------------------------------------------------ start-up
    def bind(self) -> None:
        self._loop = asyncio.get_running_loop()
        a = self.addresses
        self._handshake = self._socket(zmq.ROUTER, a.handshake)
        self._input = self._socket(zmq.ROUTER, a.input)
        # A ROUTER silently drops messages for an unknown peer; make it raise.
        self._input.setsockopt(zmq.ROUTER_MANDATORY, 1)
        # A restarted engine reuses identity 0: let it take over the old route.
        self._input.setsockopt(zmq.ROUTER_HANDOVER, 1)
        self._output = self._socket(zmq.PULL, a.output)
        self._monitor = self._output.get_monitor_socket(
            zmq.EVENT_ACCEPTED | zmq.EVENT_DISCONNECTED)
        self._loop.add_reader(self._output.getsockopt(zmq.FD), self._on_output_readable)
        self._loop.add_reader(self._monitor.getsockopt(zmq.FD), self._on_monitor_readable)
        # zmq's FD is edge-triggered and only signals once a read has found the
        # socket empty: without this first drain the inproc monitor never wakes
        # the loop, and an engine that exits silently is never noticed.
        self._on_output_readable()
        self._on_monitor_readable()
        log.info("waiting for an engine: handshake %s, input %s, output %s",
                 a.handshake, a.input, a.output)

    def _socket(self, kind: int, addr: str) -> zmq.Socket:
        sock = self._ctx.socket(kind)
        sock.setsockopt(zmq.SNDHWM, 0)
        sock.setsockopt(zmq.RCVHWM, 0)
        sock.setsockopt(zmq.LINGER, 0)
        try:
            sock.bind(addr)
        except zmq.ZMQError as e:
            sock.close()
            raise OSError(f"cannot bind {addr}: {e}") from e
        return sock

    async def start(self, timeout: float | None = 600.0,
                    progress: Callable[[str], None] | None = None) -> hs.ReadyResponse:
        """Bind, then wait for the first engine to finish its handshake."""
        self.bind()
        self._supervisor = asyncio.create_task(self._supervise(progress))
        try:
            await asyncio.wait_for(asyncio.shield(self._attached.wait()), timeout)
        except asyncio.TimeoutError:
            raise TimeoutError(
                f"no engine attached within {timeout:.0f} s; start one with "
                f"`vllm serve MODEL --headless --data-parallel-address HOST "
                f"--data-parallel-rpc-port PORT` (or `engine-core --frontend-addr "
                f"{self.addresses.handshake} --model MODEL`) pointing at "
                f"{self.addresses.handshake}") from None
        if self._start_error is not None:
            raise self._start_error
        assert self.ready is not None
        return self.ready

    async def _supervise(self, progress: Callable[[str], None] | None) -> None:
        """Answer every HELLO: the first engine, and any engine restarted later."""
        reattach = None
        cached = self._load_state()
        if cached is not None:
            reattach = asyncio.create_task(self._reattach(cached))
        try:
            await self._answer_hellos(progress)
        finally:
            if reattach is not None:
                reattach.cancel()

    async def _answer_hellos(self, progress: Callable[[str], None] | None) -> None:
        started = time.monotonic()
        next_report = 10.0
        while not self._closed:
            try:
                hello = await self._poll_handshake(0.05)
            except ProtocolError as e:
                log.warning("ignoring a bad message on the handshake socket: %s", e)
                continue
            if hello is None:
                if self.alive:  # waiting time counts from the engine's death
                    started, next_report = time.monotonic(), 10.0
                    continue
                waited = time.monotonic() - started
                if waited >= next_report:
                    msg = f"still waiting for an engine at {self.addresses.handshake} ({waited:.0f} s)"
                    log.info(msg)
                    if progress:
                        progress(msg)
                    next_report += 10.0
                continue
            identity, status = hello
            if status.status != "HELLO":
                continue  # READY of an earlier handshake arriving late
            if self.alive:
                log.warning("ignoring HELLO from a second engine while one is attached")
                continue
            if progress:
                progress("engine said HELLO; waiting for it to load the model")
            try:
                await self._complete_handshake(identity)
            except EngineVersionError as e:
                log.error("%s", e)
                self._start_error = e
                self._attached.set()
                return
            except ProtocolError as e:
                log.error("handshake failed: %s", e)
                continue
            started, next_report = time.monotonic(), 10.0

    async def _poll_handshake(self, timeout: float):
        assert self._handshake is not None
        if not self._handshake.poll(0):
            await asyncio.sleep(timeout)
            if not self._handshake.poll(0):
                return None
        identity, payload = self._handshake.recv_multipart()[:2]
        return identity, hs.decode_status(payload)

    async def _complete_handshake(self, identity: bytes) -> None:
        a = self.addresses
        log.info("engine %s said HELLO; sending addresses", identity.hex())
        self._handshake.send_multipart([identity, hs.encode_init([a.input], [a.output])])
        ready: hs.ReadyResponse | None = None
        got_ready_response = got_ready = False
        while not (got_ready_response and got_ready):
            if self._input.poll(0):
                frames = self._input.recv_multipart()
                ready = hs.decode_ready_response(frames[1] if len(frames) > 1 else b"")
                got_ready_response = True
                continue
            if self._handshake.poll(0):
                sender, payload = self._handshake.recv_multipart()[:2]
                status = hs.decode_status(payload)
                if status.status == "READY":
                    got_ready = True
                elif status.status == "HELLO":
                    # The engine was restarted before it got ready: start over.
                    log.info("engine %s said HELLO again; sending addresses", sender.hex())
                    self._handshake.send_multipart(
                        [sender, hs.encode_init([a.input], [a.output])])
                    got_ready_response = got_ready = False
                continue
            await asyncio.sleep(0.02)
        hs.check_engine_version(ready)
        if ready is None:
            raise ProtocolError("engine sent an empty ready response; max_model_len unknown")
        self._attach(ready)
        self._save_state(ready)

    def _attach(self, ready: hs.ReadyResponse) -> None:
        self.ready, self.alive, self.death_reason = ready, True, None
        log.info("engine attached: vLLM %s, max_model_len %d, dtype %s, max_num_seqs %d",
                 ready.vllm_version, ready.max_model_len, ready.dtype, ready.max_num_seqs)
        if self._on_ready:
            self._on_ready(ready)
        self._attached.set()

    # ------------------------------------------------------------ re-attaching
    # A headless engine handshakes once. When this frontend restarts on the
    # same addresses, the running engine's DEALER and PUSH reconnect by
    # themselves, but it never says HELLO again and never resends its ready
    # response; so the ready response is kept in a state file, and a utility
    # probe tells when the engine is back on the input socket.

    def _load_state(self) -> hs.ReadyResponse | None:
        if self.state_file is None or not self.state_file.exists():
            return None
        try:
            return hs.decode_ready_response(self.state_file.read_bytes())
        except (OSError, ProtocolError) as e:
            log.warning("ignoring engine state file %s: %s", self.state_file, e)
            return None

    def _save_state(self, ready: hs.ReadyResponse) -> None:
        if self.state_file is None:
            return
        try:
            self.state_file.parent.mkdir(parents=True, exist_ok=True)
            tmp = self.state_file.with_suffix(".tmp")
            tmp.write_bytes(hs.encode_ready_response(ready))
            tmp.replace(self.state_file)
        except OSError as e:
            log.warning("cannot write engine state file %s: %s", self.state_file, e)

    async def _reattach(self, cached: hs.ReadyResponse) -> None:
        """Probe for an engine that is already running; adopt it if it answers."""
        call_id = next(self._call_ids)
        fut = self._loop.create_future()
        self._utility_calls[call_id] = fut
        frames = wire.encode_utility(call_id, "get_supported_tasks")
        try:
            while not self.alive and not fut.done():
                try:
                    self._input.send_multipart([ENGINE_IDENTITY, *frames], zmq.NOBLOCK)
                except zmq.ZMQError:
                    pass  # EHOSTUNREACH: no engine connected (yet)
                try:
                    await asyncio.wait_for(asyncio.shield(fut), 0.1)
                except asyncio.TimeoutError:
                    continue
            if fut.done() and not self.alive:
                hs.check_engine_version(cached)
                log.info("re-attached to a running engine (no new handshake)")
                self._attach(cached)
        except EngineVersionError as e:
            log.error("%s", e)
        finally:
            self._utility_calls.pop(call_id, None)

    # ------------------------------------------------------------ sending
    def send_add(self, frames: list[bytes]) -> None:
        """Send one ADD made by ``wire.encode_add`` (which validated it)."""
        self._send(frames)

    def abort(self, request_ids: Sequence[str]) -> None:
        """Queue engine ids to abort; all queued ids leave in one message."""
        if not request_ids or not self.alive:
            return
        self._pending_aborts.extend(request_ids)
        if not self._abort_scheduled:
            self._abort_scheduled = True
            self._loop.call_soon(self._flush_aborts)

    def _flush_aborts(self) -> None:
        self._abort_scheduled = False
        ids, self._pending_aborts = self._pending_aborts, []
        if ids and self.alive:
            try:
                self._send(wire.encode_abort(ids))
                self.num_aborts_sent += len(ids)
            except EngineUnavailableError:
                pass

    async def call_utility(self, method: str, *args: Any, timeout: float = 10.0) -> Any:
        call_id = next(self._call_ids)
        fut = self._loop.create_future()
        self._utility_calls[call_id] = fut
        try:
            self._send(wire.encode_utility(call_id, method, args))
            out = await asyncio.wait_for(fut, timeout)
        finally:
            self._utility_calls.pop(call_id, None)
        return wire.utility_value(out)

    async def call_utility_all(self, method: str, *args: Any,
                               timeout: float = 10.0) -> list[Any]:
        """The call on every engine, one result per engine (raises if any fails).

        TODO(dp): one engine today; with data parallel this must reach every
        rank (adapters, for one, must be known to all of them).
        """
        return [await self.call_utility(method, *args, timeout=timeout)]

    def _send(self, frames: list[bytes]) -> None:
        if not self.alive:
            raise EngineUnavailableError(self.death_reason or "no engine attached")
        try:
            self._input.send_multipart([ENGINE_IDENTITY, *frames], zmq.NOBLOCK, copy=False)
        except zmq.ZMQError as e:
            # EHOSTUNREACH: the engine's input DEALER is gone (ROUTER_MANDATORY).
            self._declare_dead(f"cannot send to the engine: {e}")
            raise EngineUnavailableError(self.death_reason) from e

    # ------------------------------------------------------------ receiving
    def _on_output_readable(self) -> None:
        """Hand every engine message that is waiting to ``on_outputs`` in one batch,
        so each client gets one write per wake-up however many steps it covers."""
        sock = self._output
        batch: list[wire.StepOutputs] = []
        dead = False
        for _ in range(MAX_MESSAGES_PER_WAKEUP):
            try:
                frames = [sock.recv(zmq.NOBLOCK)]
            except zmq.Again:
                break
            while sock.get(zmq.RCVMORE):  # aux frames (large logprobs arrays)
                frames.append(sock.recv())
            if wire.is_engine_dead(frames):
                dead = True
                break
            outs = self._decode(frames)
            if outs is not None:
                batch.append(outs)
        else:
            # More may be queued: zmq's FD is edge-triggered, so come back ourselves.
            self._loop.call_soon(self._on_output_readable)
        if batch:
            self._on_outputs(batch)
        if dead:
            self._declare_dead("the engine core died (ENGINE_CORE_DEAD)")

    def _decode(self, frames: list[bytes]) -> wire.StepOutputs | None:
        try:
            outs = wire.decode_step(frames)
        except ProtocolError as e:
            log.error("dropping an engine message: %s", e)
            return None
        if outs.utility_output is not None:
            self._resolve_utility(outs.utility_output)
        if outs.outputs or wire.has_scheduler_stats(outs):
            return outs
        return None

    def _resolve_utility(self, out: wire.UtilityOutput) -> None:
        fut = self._utility_calls.get(out.call_id)
        if fut is not None and not fut.done():
            fut.set_result(out)

    def _on_monitor_readable(self) -> None:
        mon = self._monitor
        while True:
            try:
                frames = mon.recv_multipart(zmq.NOBLOCK)
            except zmq.Again:
                return
            event = int.from_bytes(frames[0][:2], "little")
            if event == zmq.EVENT_DISCONNECTED and self.alive:
                if self._disconnect_timer is None:
                    self._disconnect_timer = self._loop.call_later(
                        DISCONNECT_GRACE_S, self._declare_dead,
                        "the engine's output connection closed")
            elif event == zmq.EVENT_ACCEPTED and self._disconnect_timer is not None:
                self._disconnect_timer.cancel()
                self._disconnect_timer = None

    def _declare_dead(self, reason: str) -> None:
        if self._disconnect_timer is not None:
            self._disconnect_timer.cancel()
            self._disconnect_timer = None
        if not self.alive:
            return
        self.alive = False
        self.death_reason = reason
        self._pending_aborts.clear()
        log.error("engine is dead: %s", reason)
        for fut in self._utility_calls.values():
            if not fut.done():
                fut.set_exception(EngineUnavailableError(reason))
        self._on_dead(reason)

    # ------------------------------------------------------------ shutdown
    async def close(self) -> None:
        self._closed = True
        if self._disconnect_timer is not None:
            self._disconnect_timer.cancel()
            self._disconnect_timer = None
        if self._supervisor is not None:
            self._supervisor.cancel()
            try:
                await self._supervisor
            except BaseException:
                pass
        self._flush_aborts()
        for sock in (self._output, self._monitor):
            if sock is not None and self._loop is not None:
                try:
                    self._loop.remove_reader(sock.getsockopt(zmq.FD))
                except Exception:
                    pass
        if self._output is not None:
            self._output.disable_monitor()
        for sock in (self._monitor, self._handshake, self._input, self._output):
            if sock is not None:
                sock.close(linger=100)
