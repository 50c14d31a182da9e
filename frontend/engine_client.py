"""The frontend's side of the ZMQ link to vLLM 0.32 engine ranks.

One link per frontend process (``client_index``): an input ROUTER (requests to
the engines, addressed by each rank's identity) and an output PULL (every
rank's outputs, stamped with ``engine_index``), both bound here; engines only
connect. A rank is attached when its registration (the ready response, its
first message on the input socket) arrives, after the handshake server
(``engine_handshake.py``) answered its HELLO. Outputs are read in an
event-loop reader callback, decoded once per message and handed to
``on_outputs``; utility replies resolve their futures here. Aborts are
coalesced into one message per rank per loop iteration.

A rank is lost when
* it dies: its connection drops (socket monitor) and it stays unreachable
  for ``DISCONNECT_GRACE_S`` (a send to its identity fails with
  ROUTER_MANDATORY), or it reports ENGINE_CORE_DEAD (a bare frame that does
  not name the rank: with several ranks, the one that then disconnects);
* it stalls: it has work but sends nothing for ``stall_timeout`` seconds; it
  is routed to again as soon as it sends anything.
Each loss is reported to ``on_rank_lost``: only that rank's requests fail.
A restarted rank registers again and is attached without a frontend restart.

A restarted frontend on the same addresses re-attaches to running ranks: their
DEALER and PUSH reconnect by themselves, but they never register again, so
their ready responses are kept in a state file and a utility probe tells when
each is back.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import pathlib
import time
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import msgspec
import zmq

from frontend.engine_handshake import rank_of
from protocol import handshake as hs
from protocol import wire
from protocol.errors import EngineVersionError, ProtocolError

log = logging.getLogger("frontend.engine")

# Messages handled per reader callback before yielding to other tasks.
MAX_MESSAGES_PER_WAKEUP = 64
# A rank whose connection dropped is declared dead after this long without a
# reconnect (an engine process that exits drops its connections at once).
DISCONNECT_GRACE_S = 1.0
# After ENGINE_CORE_DEAD from one of several ranks: when to look for the one
# that disconnects.
DEAD_RANK_CHECKS_S = (0.05, 0.2, 0.5, 1.0, 2.0, 4.0)
# After a disconnect: when to probe the ranks.
DISCONNECT_CHECKS_S = (0.0, 0.1, 0.5)
_PROBE = wire.encode_abort([])  # harmless to a live engine; refused for a gone one
# zmq's flags as plain ints: combining its enum members costs microseconds,
# which counts on paths run per request and per engine message.
_NOBLOCK = int(zmq.NOBLOCK)
_NOBLOCK_MORE = int(zmq.NOBLOCK | zmq.SNDMORE)
_RCVMORE = int(zmq.RCVMORE)
_EVENTS = int(zmq.EVENTS)
_POLLIN = int(zmq.POLLIN)


class EngineUnavailableError(Exception):
    """Nothing can be sent: the rank is not attached (not yet, or it died)."""


@dataclass(frozen=True)
class EngineAddresses:
    handshake: str
    inputs: list[str]   # one per frontend client, index = client_index
    outputs: list[str]


def derive_addresses(engine_addr: str, input_addr: str | None = None,
                     output_addr: str | None = None, clients: int = 1) -> EngineAddresses:
    """Input/output addresses next to the handshake address, so they are stable.

    Stable addresses let a restarted frontend be found again by running
    engines (their DEALER/PUSH reconnect by themselves). Client ``i`` of
    several (``--api-server-count``) gets the pair ``2 i`` ports further (TCP)
    or ``-i`` appended (IPC).
    """
    if engine_addr.startswith("tcp://"):
        host, _, port = engine_addr[len("tcp://"):].rpartition(":")
        if not port.isdigit() or not host:
            raise ValueError(f"--engine-addr must be tcp://HOST:PORT, got {engine_addr!r}")
        if host in ("*", "0.0.0.0", "[::]"):
            raise ValueError(
                "--engine-addr needs a concrete address the engine can reach "
                f"(it is also sent to the engine), not {host}")
        input_addr = input_addr or f"tcp://{host}:{int(port) + 1}"
        output_addr = output_addr or f"tcp://{host}:{int(port) + 2}"
    elif engine_addr.startswith("ipc://"):
        input_addr = input_addr or engine_addr + "-input"
        output_addr = output_addr or engine_addr + "-output"
    else:
        raise ValueError(f"--engine-addr must be tcp://HOST:PORT or ipc://PATH, "
                         f"got {engine_addr!r}")
    return EngineAddresses(engine_addr,
                           [_nth(input_addr, i) for i in range(clients)],
                           [_nth(output_addr, i) for i in range(clients)])


def _nth(address: str, i: int) -> str:
    if i == 0:
        return address
    if address.startswith("tcp://"):
        host, _, port = address.rpartition(":")
        return f"{host}:{int(port) + 2 * i}"
    return f"{address}-{i}"


class EngineState(msgspec.Struct):
    """The state file: every attached rank's ready response."""

    ranks: dict[int, hs.ReadyResponse]


class Rank:
    """One engine rank as this link sees it."""

    def __init__(self, index: int) -> None:
        self.index = index
        self.identity = hs.engine_identity(index)
        self.ready: hs.ReadyResponse | None = None
        self.alive = False
        self.stalled = False
        self.death_reason: str | None = None
        self.last_heard = 0.0  # monotonic: the last message from it
        self.last_sent = 0.0   # monotonic: the last request to it
        self.pending_aborts: list[str] = []
        self.grace: asyncio.TimerHandle | None = None

    @property
    def routable(self) -> bool:
        """Takes new requests: attached, not stalled, not unreachable (in its grace)."""
        return self.alive and not self.stalled and self.grace is None


class EngineClient:
    """Owns the sockets; knows nothing about HTTP or what requests mean."""

    def __init__(self, input_address: str, output_address: str, *,
                 data_parallel_size: int = 1, client_index: int = 0,
                 on_outputs: Callable[[list[wire.StepOutputs]], None],
                 on_rank_lost: Callable[[int, str], None],
                 on_rank_attached: Callable[[int, hs.ReadyResponse], None] | None = None,
                 in_flight: Callable[[int], int] | None = None,
                 stall_timeout: float = 0.0, state_file: str | None = None) -> None:
        self.input_address = input_address
        self.output_address = output_address
        self.data_parallel_size = data_parallel_size
        self.client_index = client_index
        self.ranks = [Rank(i) for i in range(data_parallel_size)]
        self.state_file = pathlib.Path(state_file) if state_file else None
        self._on_outputs = on_outputs
        self._on_rank_lost = on_rank_lost
        self._on_rank_attached = on_rank_attached
        self._in_flight = in_flight
        self.stall_timeout = stall_timeout
        self.num_aborts_sent = 0  # engine ids in ABORT messages sent (for /metrics)
        self._ctx = zmq.Context.instance()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._input: zmq.Socket | None = None
        self._output: zmq.Socket | None = None
        self._monitors: list[zmq.Socket] = []
        self._aborts_scheduled = False
        self._call_ids = itertools.count(1)
        self._utility_calls: dict[int, tuple[int, asyncio.Future]] = {}  # id -> (rank, fut)
        self._all_attached = asyncio.Event()
        self._start_error: BaseException | None = None
        self._tasks: list[asyncio.Task] = []
        self._closed = False
        self._last_death: str | None = None

    # ------------------------------------------------------------ what is known
    @property
    def alive(self) -> bool:
        """Some rank can take requests."""
        return any(r.routable for r in self.ranks)

    @property
    def death_reason(self) -> str | None:
        return None if self.alive else (self._last_death or "no engine attached")

    @property
    def ready(self) -> hs.ReadyResponse | None:
        """The attached ranks' facts (the smallest context where they differ)."""
        readies = [r.ready for r in self.ranks if r.ready is not None]
        if not readies:
            return None
        first = readies[0]
        shortest = min(r.max_model_len for r in readies)
        if shortest == first.max_model_len:
            return first
        return msgspec.structs.replace(first, max_model_len=shortest)

    def routable_ranks(self) -> list[int]:
        return [r.index for r in self.ranks if r.routable]

    def rank_states(self) -> list[str]:
        """Each rank's state: ``serving``, ``stalled`` or ``dead`` (never attached too)."""
        return ["stalled" if r.stalled else "serving" if r.alive else "dead"
                for r in self.ranks]

    # ------------------------------------------------------------ start-up
    def bind(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._input = self._socket(zmq.ROUTER, self.input_address)
        # A ROUTER silently drops messages for an unknown peer; make it raise.
        self._input.setsockopt(zmq.ROUTER_MANDATORY, 1)
        # A restarted rank reuses its identity: let it take over the old route.
        self._input.setsockopt(zmq.ROUTER_HANDOVER, 1)
        self._output = self._socket(zmq.PULL, self.output_address)
        for sock in (self._input, self._output):
            monitor = sock.get_monitor_socket(zmq.EVENT_DISCONNECTED)
            self._monitors.append(monitor)
            self._loop.add_reader(monitor.getsockopt(zmq.FD), self._on_monitor_readable)
        self._loop.add_reader(self._output.getsockopt(zmq.FD), self._on_output_readable)
        self._loop.add_reader(self._input.getsockopt(zmq.FD), self._on_input_readable)
        # zmq's FD is edge-triggered and only signals once a read has found the
        # socket empty: drain everything once so that the first event wakes us.
        self._on_output_readable()
        self._on_input_readable()
        self._on_monitor_readable()
        log.info("engine link (client %d): input %s, output %s", self.client_index,
                 self.input_address, self.output_address)

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
        """Bind, then wait until every rank is attached."""
        self.bind()
        cached = self._load_state()
        if cached:
            self._tasks.append(asyncio.create_task(self._reattach(cached)))
        if self.stall_timeout > 0:
            self._tasks.append(asyncio.create_task(self._watch_stalls()))
        waiter = asyncio.create_task(self._report_while_waiting(progress))
        try:
            await asyncio.wait_for(asyncio.shield(self._all_attached.wait()), timeout)
        except asyncio.TimeoutError:
            missing = [r.index for r in self.ranks if not r.alive]
            raise TimeoutError(
                f"engine rank(s) {missing} not attached within {timeout:.0f} s; start the "
                f"engine with `vllm serve MODEL --headless --data-parallel-address HOST "
                f"--data-parallel-rpc-port PORT` (or `engine-core --frontend-addr "
                f"tcp://HOST:PORT --model MODEL`) pointing at this frontend's --engine-addr"
                ) from None
        finally:
            waiter.cancel()
        if self._start_error is not None:
            raise self._start_error
        ready = self.ready
        assert ready is not None
        return ready

    async def _report_while_waiting(self, progress: Callable[[str], None] | None) -> None:
        started = time.monotonic()
        while True:
            await asyncio.sleep(10.0)
            attached = sum(r.alive for r in self.ranks)
            msg = (f"still waiting for engine ranks: {attached} of {self.data_parallel_size} "
                   f"attached ({time.monotonic() - started:.0f} s)")
            log.info(msg)
            if progress:
                progress(msg)

    def _on_input_readable(self) -> None:
        """Registrations: a rank's first message on this input socket."""
        sock = self._input
        while True:
            try:
                frames = sock.recv_multipart(zmq.NOBLOCK)
            except zmq.Again:
                return
            rank = rank_of(frames[0])
            if rank is None or rank >= self.data_parallel_size:
                log.warning("ignoring a registration from engine identity %s (this frontend "
                            "serves --data-parallel-size %d)", frames[0].hex(),
                            self.data_parallel_size)
                continue
            try:
                ready = hs.decode_ready_response(frames[1] if len(frames) > 1 else b"")
                if ready is None:
                    raise ProtocolError("engine sent an empty ready response; "
                                        "max_model_len unknown")
                hs.check_engine_version(ready)
            except EngineVersionError as e:
                log.error("%s", e)
                self._start_error = e
                self._all_attached.set()
                continue
            except ProtocolError as e:
                log.error("engine rank %d: %s", rank, e)
                continue
            self._attach(self.ranks[rank], ready)

    def _attach(self, rank: Rank, ready: hs.ReadyResponse) -> None:
        if rank.alive:  # re-registered before its old connection was seen to close
            self._lose(rank, "the engine rank restarted")
        self._cancel_grace(rank)
        rank.ready, rank.alive, rank.stalled, rank.death_reason = ready, True, False, None
        rank.last_heard = time.monotonic()
        log.info("engine rank %d attached: vLLM %s, max_model_len %d, dtype %s, "
                 "max_num_seqs %d", rank.index, ready.vllm_version, ready.max_model_len,
                 ready.dtype, ready.max_num_seqs)
        self._save_state()
        if self._on_rank_attached:
            self._on_rank_attached(rank.index, ready)
        if all(r.alive for r in self.ranks):
            self._all_attached.set()

    # ------------------------------------------------------------ re-attaching
    def _load_state(self) -> dict[int, hs.ReadyResponse]:
        if self.state_file is None or not self.state_file.exists():
            return {}
        data = self.state_file.read_bytes()
        try:
            ranks = msgspec.msgpack.decode(data, type=EngineState).ranks
        except msgspec.DecodeError:
            try:  # the single-engine file of earlier versions
                ready = hs.decode_ready_response(data)
            except ProtocolError as e:
                log.warning("ignoring engine state file %s: %s", self.state_file, e)
                return {}
            ranks = {0: ready} if ready is not None else {}
        return {r: ready for r, ready in ranks.items() if 0 <= r < self.data_parallel_size}

    def _save_state(self) -> None:
        if self.state_file is None:
            return
        state = EngineState({r.index: r.ready for r in self.ranks
                             if r.alive and r.ready is not None})
        try:
            self.state_file.parent.mkdir(parents=True, exist_ok=True)
            tmp = self.state_file.with_suffix(".tmp")
            tmp.write_bytes(msgspec.msgpack.encode(state))
            tmp.replace(self.state_file)
        except OSError as e:
            log.warning("cannot write engine state file %s: %s", self.state_file, e)

    async def _reattach(self, cached: dict[int, hs.ReadyResponse]) -> None:
        """Probe ranks that may already be running; adopt each one that answers."""
        await asyncio.gather(*(self._reattach_rank(self.ranks[r], ready)
                               for r, ready in cached.items()))

    async def _reattach_rank(self, rank: Rank, cached: hs.ReadyResponse) -> None:
        call_id = next(self._call_ids)
        fut = self._loop.create_future()
        self._utility_calls[call_id] = (rank.index, fut)
        frames = wire.encode_utility(call_id, "get_supported_tasks",
                                     client_index=self.client_index)
        try:
            while not rank.alive and not fut.done() and not self._closed:
                try:
                    self._input.send_multipart([rank.identity, *frames], zmq.NOBLOCK)
                except zmq.ZMQError:
                    pass  # EHOSTUNREACH: not connected (yet)
                try:
                    await asyncio.wait_for(asyncio.shield(fut), 0.1)
                except asyncio.TimeoutError:
                    continue
            if fut.done() and not rank.alive:
                hs.check_engine_version(cached)
                log.info("re-attached to running engine rank %d (no new handshake)",
                         rank.index)
                self._attach(rank, cached)
        except EngineVersionError as e:
            log.error("%s", e)
        finally:
            self._utility_calls.pop(call_id, None)

    # ------------------------------------------------------------ sending
    def send_add(self, frames: list[bytes], rank: int = 0) -> None:
        """Send one ADD made by ``wire.encode_add`` (which validated it) to ``rank``."""
        target = self.ranks[rank]
        self._send(target, frames)
        target.last_sent = time.monotonic()

    def abort(self, rank: int, request_ids: Sequence[str]) -> bool:
        """Queue engine ids to abort on ``rank``; they leave in one message per rank.
        False when the rank is not attached (nothing can be sent to it)."""
        target = self.ranks[rank]
        if not target.alive:
            return False
        target.pending_aborts.extend(request_ids)
        if not self._aborts_scheduled:
            self._aborts_scheduled = True
            self._loop.call_soon(self._flush_aborts)
        return True

    def _flush_aborts(self) -> None:
        self._aborts_scheduled = False
        for rank in self.ranks:
            ids, rank.pending_aborts = rank.pending_aborts, []
            if ids and rank.alive:
                try:
                    self._send(rank, wire.encode_abort(ids))
                    self.num_aborts_sent += len(ids)
                except EngineUnavailableError:
                    pass

    async def call_utility(self, method: str, *args: Any, rank: int | None = None,
                           timeout: float = 10.0) -> Any:
        """Call ``method`` on one rank (default: the first that takes requests)."""
        if rank is None:
            routable = self.routable_ranks()
            if not routable:
                raise EngineUnavailableError(self.death_reason)
            rank = routable[0]
        call_id = next(self._call_ids)
        fut = self._loop.create_future()
        self._utility_calls[call_id] = (rank, fut)
        try:
            self._send(self.ranks[rank], wire.encode_utility(
                call_id, method, args, client_index=self.client_index))
            out = await asyncio.wait_for(fut, timeout)
        finally:
            self._utility_calls.pop(call_id, None)
        return wire.utility_value(out)

    async def call_utility_all(self, method: str, *args: Any,
                               timeout: float = 10.0) -> list[Any]:
        """Call ``method`` on every attached rank (vLLM's call_utility_all)."""
        ranks = [r.index for r in self.ranks if r.alive]
        if not ranks:
            raise EngineUnavailableError(self.death_reason)
        return list(await asyncio.gather(*(
            self.call_utility(method, *args, rank=r, timeout=timeout) for r in ranks)))

    def _send(self, rank: Rank, frames: list[bytes]) -> None:
        if not rank.alive:
            raise EngineUnavailableError(rank.death_reason or "no engine attached")
        # Frame by frame rather than send_multipart, whose per-frame checks
        # and flag arithmetic cost more than the sends (small frames are
        # copied either way). Only the first send can fail (the ROUTER
        # refuses an unknown identity), so no partial message goes out.
        send = self._input.send
        try:
            send(rank.identity, _NOBLOCK_MORE)
            for frame in frames[:-1]:
                send(frame, _NOBLOCK_MORE)
            send(frames[-1], _NOBLOCK)
        except zmq.ZMQError as e:
            # EHOSTUNREACH: the rank's input DEALER is gone (ROUTER_MANDATORY).
            self._suspect(rank)
            raise EngineUnavailableError(f"cannot send to engine rank {rank.index}: "
                                         f"{e}") from e

    # ------------------------------------------------------------ receiving
    def _on_output_readable(self) -> None:
        """Hand every engine message that is waiting to ``on_outputs`` in one batch,
        so each client gets one write per wake-up however many steps it covers."""
        sock = self._output
        batch: list[wire.StepOutputs] = []
        dead = False
        now = time.monotonic()
        ranks = self.ranks
        get, recv = sock.get, sock.recv
        for _ in range(MAX_MESSAGES_PER_WAKEUP):
            # Asking first is cheaper than a recv that raises Again, once per
            # wake-up (and it re-arms the edge-triggered FD just the same).
            if not get(_EVENTS) & _POLLIN:
                break
            try:
                frames = [recv(_NOBLOCK)]
            except zmq.Again:
                break
            while get(_RCVMORE):  # aux frames (large logprobs arrays)
                frames.append(recv())
            if wire.is_engine_dead(frames):
                dead = True
                break
            outs = self._decode(frames)
            if outs is None:
                continue
            if outs.engine_index < len(ranks):
                rank = ranks[outs.engine_index]
                rank.last_heard = now
                if rank.stalled:
                    self._resume(rank)
            if outs.outputs or wire.has_scheduler_stats(outs):
                batch.append(outs)
        else:
            # More may be queued: zmq's FD is edge-triggered, so come back ourselves.
            self._loop.call_soon(self._on_output_readable)
        if batch:
            self._on_outputs(batch)
        if dead:
            self._on_engine_core_dead()

    def _decode(self, frames: list[bytes]) -> wire.StepOutputs | None:
        try:
            outs = wire.decode_step(frames)
        except ProtocolError as e:
            log.error("dropping an engine message: %s", e)
            return None
        if outs.utility_output is not None:
            _, fut = self._utility_calls.get(outs.utility_output.call_id, (None, None))
            if fut is not None and not fut.done():
                fut.set_result(outs.utility_output)
        return outs

    # ------------------------------------------------------------ losing ranks
    def _on_engine_core_dead(self) -> None:
        reason = "the engine core died (ENGINE_CORE_DEAD)"
        alive = [r for r in self.ranks if r.alive]
        if len(alive) == 1:
            self._lose(alive[0], reason)
            return
        # The frame does not name the rank: the one that dies drops its connections.
        log.warning("an engine rank reported ENGINE_CORE_DEAD; finding which")
        for delay in DEAD_RANK_CHECKS_S:
            self._loop.call_later(delay, self._check_ranks)

    def _on_monitor_readable(self) -> None:
        disconnected = False
        for monitor in self._monitors:
            while True:
                try:
                    frames = monitor.recv_multipart(zmq.NOBLOCK)
                except zmq.Again:
                    break
                if int.from_bytes(frames[0][:2], "little") == zmq.EVENT_DISCONNECTED:
                    disconnected = True
        if disconnected:
            # Probe once the socket has noticed the closed peer (it does when
            # it next processes its commands, at the latest on our next send).
            for delay in DISCONNECT_CHECKS_S:
                self._loop.call_later(delay, self._check_ranks)

    def _check_ranks(self) -> None:
        """Probe every attached rank: one that cannot be reached gets a grace period."""
        for rank in self.ranks:
            if rank.alive and not self._reachable(rank):
                self._suspect(rank)

    def _reachable(self, rank: Rank) -> bool:
        try:
            self._input.send_multipart([rank.identity, *_PROBE], zmq.NOBLOCK)
            return True
        except zmq.ZMQError:
            return False

    def _suspect(self, rank: Rank) -> None:
        if rank.grace is None and rank.alive:
            rank.grace = self._loop.call_later(DISCONNECT_GRACE_S, self._grace_over, rank)

    def _grace_over(self, rank: Rank) -> None:
        rank.grace = None
        if rank.alive and not self._reachable(rank):
            self._lose(rank, "the engine's connection closed")

    def _cancel_grace(self, rank: Rank) -> None:
        if rank.grace is not None:
            rank.grace.cancel()
            rank.grace = None

    def _lose(self, rank: Rank, reason: str) -> None:
        self._cancel_grace(rank)
        if not rank.alive:
            return
        rank.alive = rank.stalled = False
        rank.death_reason = self._last_death = reason
        rank.pending_aborts.clear()
        log.error("engine rank %d is dead: %s", rank.index, reason)
        for index, fut in self._utility_calls.values():
            if index == rank.index and not fut.done():
                fut.set_exception(EngineUnavailableError(reason))
        self._on_rank_lost(rank.index, reason)

    # ------------------------------------------------------------ stalls
    async def _watch_stalls(self) -> None:
        """A rank with work that sends nothing for ``stall_timeout`` s is stalled."""
        interval = min(1.0, self.stall_timeout / 4)
        while True:
            await asyncio.sleep(interval)
            now = time.monotonic()
            for rank in self.ranks:
                if (rank.routable and self._in_flight is not None
                        and now - max(rank.last_heard, rank.last_sent) > self.stall_timeout
                        and self._in_flight(rank.index) > 0):
                    self._stall(rank)

    def _stall(self, rank: Rank) -> None:
        rank.stalled = True
        reason = (f"engine rank {rank.index} sent nothing for {self.stall_timeout:g} s "
                  "while it had requests (--engine-stall-timeout); they were aborted")
        self._last_death = reason
        log.error("%s", reason)
        self._on_rank_lost(rank.index, reason)

    def _resume(self, rank: Rank) -> None:
        rank.stalled = False
        log.warning("engine rank %d sends again after a stall; routing to it again",
                    rank.index)

    # ------------------------------------------------------------ shutdown
    async def close(self) -> None:
        self._closed = True
        for rank in self.ranks:
            self._cancel_grace(rank)
        for task in self._tasks:
            task.cancel()
            try:
                await task
            except BaseException:
                pass
        self._flush_aborts()
        for sock in (self._output, self._input, *self._monitors):
            if sock is not None and self._loop is not None:
                try:
                    self._loop.remove_reader(sock.getsockopt(zmq.FD))
                except Exception:
                    pass
        for sock in (self._input, self._output):
            if sock is not None:
                sock.disable_monitor()
        for sock in (*self._monitors, self._input, self._output):
            if sock is not None:
                sock.close(linger=100)
