"""The frontend's side of the ZMQ link to vLLM 0.32 engine ranks: the sockets.

One link per frontend process (``client_index``): an input ROUTER (requests to
the engines, addressed by each rank's identity) and an output PULL (every
rank's outputs, stamped with ``engine_index``), both bound here; engines only
connect. Outputs are read in an event-loop reader callback, decoded once per
message and handed to ``on_outputs``; utility replies resolve their futures
here. Aborts are coalesced into one message per rank per loop iteration.

What the link hears about a rank -- a registration on the input socket, a
message, ENGINE_CORE_DEAD, a dropped connection -- goes to
:class:`~frontend.engine_ranks.RankLiveness`, which decides what it means
(attached, stalled, lost) and keeps the engine state file.

Nobody authenticates the other end (vLLM's engine speaks plain ZMQ), so every
message is checked before it changes anything: frames that do not decode, an
``engine_index`` outside the ranks, outputs or stats from a rank that is not
attached, a utility reply no call of that rank waits for (call ids are random)
are counted (:mod:`frontend.engine_rejections`) and dropped; the fan-out table
checks the request ids. Each peer's receive queue is bounded, so a peer that
floods is held back by TCP instead of filling memory.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import time
from collections.abc import Callable, MutableSequence, Sequence
from dataclasses import dataclass
from typing import Any, cast

import zmq

from frontend.engine_ranks import Rank, RankLiveness
from frontend.engine_rejections import Rejections
from protocol import handshake as hs
from protocol import wire

log = logging.getLogger("frontend.engine")

# Messages handled per reader callback before yielding to other tasks.
MAX_MESSAGES_PER_WAKEUP = 64
# A re-attach probe is sent again this often until the rank answers.
REATTACH_PROBE_S = 0.1
_PROBE = wire.encode_abort([])  # harmless to a live engine; refused for a gone one
# Messages queued per peer before ZMQ stops reading its connection. The engine
# sends one message on the input socket (its registration); outputs are never
# dropped (a full queue holds the engine's PUSH back, which queues them).
INPUT_RCVHWM = 16
OUTPUT_RCVHWM = 10_000
# TCP on the input socket: a connection whose host went away (no ACKs, or no
# keepalive answers while idle) is closed after about this long, so that its
# stale route cannot block the rank's restarted engine.
TCP_TIMEOUT_MS = 30_000
TCP_KEEPALIVE = (
    (zmq.TCP_KEEPALIVE, 1),
    (zmq.TCP_KEEPALIVE_IDLE, 10),
    (zmq.TCP_KEEPALIVE_INTVL, 5),
    (zmq.TCP_KEEPALIVE_CNT, 4),
    (zmq.TCP_MAXRT, TCP_TIMEOUT_MS),
)
# zmq's flags as plain ints: combining its enum members costs microseconds,
# which counts on paths run per request and per engine message.
_NOBLOCK = int(zmq.NOBLOCK)
_NOBLOCK_MORE = int(zmq.NOBLOCK | zmq.SNDMORE)
_RCVMORE = int(zmq.RCVMORE)
_EVENTS = int(zmq.EVENTS)
_POLLIN = int(zmq.POLLIN)


class EngineUnavailableError(Exception):
    """Nothing can be sent: the rank is not attached (not yet, or it died)."""


@dataclass
class UtilityCall:
    """A utility call waiting for its answer (and the address it came from)."""

    id: int
    rank: int
    fut: asyncio.Future
    peer: str = ""


class EngineClient:
    """Owns the sockets; knows nothing about HTTP or what requests mean."""

    def __init__(
        self,
        input_address: str,
        output_address: str,
        *,
        data_parallel_size: int = 1,
        client_index: int = 0,
        on_outputs: Callable[[list[wire.StepOutputs]], None],
        on_rank_lost: Callable[[int, str], None],
        on_rank_attached: Callable[[int, hs.ReadyResponse], None] | None = None,
        in_flight: Callable[[int], int] | None = None,
        stall_timeout: float = 0.0,
        state_file: str | None = None,
        hellos: MutableSequence[float] | None = None,
        handshake_window: float = 600.0,
    ) -> None:
        """``hellos``: when each rank said HELLO (the handshake server's record);
        a rank registers within ``handshake_window`` seconds after it."""
        self.input_address = input_address
        self.output_address = output_address
        self.data_parallel_size = data_parallel_size
        self.client_index = client_index
        self.rejections = Rejections()
        self.liveness = RankLiveness(
            data_parallel_size,
            self,
            on_rank_lost=on_rank_lost,
            on_rank_attached=on_rank_attached,
            in_flight=in_flight,
            stall_timeout=stall_timeout,
            state_file=state_file,
            hellos=hellos,
            window_s=handshake_window,
            reject=self.rejections,
        )
        self.ranks = self.liveness.ranks
        self._on_outputs = on_outputs
        self.num_aborts_sent = 0  # engine ids in ABORT messages sent (for /metrics)
        self._ctx: zmq.Context = zmq.Context.instance()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._input: zmq.Socket | None = None
        self._output: zmq.Socket | None = None
        self._monitors: list[zmq.Socket] = []
        self._flush_scheduled = False
        self._input_recheck = False
        self._utility_calls: dict[int, UtilityCall] = {}
        self._peers_wanted = 0  # probes waiting: read the outputs' sender addresses
        self._tasks: list[asyncio.Task] = []
        self._closed = False

    # ------------------------------------------------------------ what is known
    @property
    def alive(self) -> bool:
        """Some rank can take requests."""
        return self.liveness.alive

    @property
    def death_reason(self) -> str | None:
        return self.liveness.death_reason

    @property
    def ready(self) -> hs.ReadyResponse | None:
        """The attached ranks' facts (the smallest context where they differ)."""
        return self.liveness.ready

    def routable_ranks(self) -> list[int]:
        return self.liveness.routable_ranks()

    def set_paused(self, paused: bool) -> None:
        """The attached ranks' schedulers were paused or resumed (dev routes)."""
        for rank in self.ranks:
            if rank.alive:
                rank.paused = paused

    def rank_states(self) -> list[str]:
        return self.liveness.rank_states()

    @property
    def rejected(self) -> dict[str, int]:
        """Messages from the engine side dropped, by reason (for /metrics)."""
        return self.rejections.counts

    def reject(self, reason: str, detail: str = "") -> None:
        """Count and drop something the engine side sent (the fan-out table's checks)."""
        self.rejections(reason, detail)

    # ------------------------------------------------------------ start-up
    def bind(self) -> None:
        loop = self._loop = asyncio.get_running_loop()
        inp = self._input = self._socket(
            zmq.ROUTER, self.input_address, INPUT_RCVHWM, TCP_KEEPALIVE
        )
        # A ROUTER silently drops messages for an unknown peer; make it raise.
        inp.setsockopt(zmq.ROUTER_MANDATORY, 1)
        # (ROUTER_HANDOVER stays off but in a handshake window: set_handover)
        out = self._output = self._socket(zmq.PULL, self.output_address, OUTPUT_RCVHWM)
        # (zmq.FD's value is the int file descriptor)
        for sock in (inp, out):
            monitor = sock.get_monitor_socket(zmq.EVENT_DISCONNECTED)
            self._monitors.append(monitor)
            loop.add_reader(cast(int, monitor.getsockopt(zmq.FD)), self._on_monitor_readable)
        loop.add_reader(cast(int, out.getsockopt(zmq.FD)), self._on_output_readable)
        loop.add_reader(cast(int, inp.getsockopt(zmq.FD)), self._on_input_readable)
        # zmq's FD is edge-triggered and only signals once a read has found the
        # socket empty: drain everything once so that the first event wakes us.
        self._on_output_readable()
        self._on_input_readable()
        self._on_monitor_readable()
        log.info(
            "engine link (client %d): input %s, output %s",
            self.client_index,
            self.input_address,
            self.output_address,
        )

    def _socket(
        self, kind: int, addr: str, rcvhwm: int, options: tuple[tuple[int, int], ...] = ()
    ) -> zmq.Socket:
        sock = self._ctx.socket(kind)
        sock.setsockopt(zmq.SNDHWM, 0)
        sock.setsockopt(zmq.RCVHWM, rcvhwm)
        sock.setsockopt(zmq.LINGER, 0)
        for option, value in options:
            sock.setsockopt(option, value)
        try:
            sock.bind(addr)
        except zmq.ZMQError as e:
            sock.close()
            raise OSError(f"cannot bind {addr}: {e}") from e
        return sock

    async def start(
        self, timeout: float | None = 600.0, progress: Callable[[str], None] | None = None
    ) -> hs.ReadyResponse:
        """Bind, then wait until every rank is attached."""
        self.bind()
        liveness = self.liveness
        self._tasks.append(asyncio.create_task(liveness.reattach()))
        self._tasks.append(asyncio.create_task(liveness.watch_windows()))
        if liveness.stall_timeout > 0:
            self._tasks.append(asyncio.create_task(liveness.watch_stalls()))
        waiter = asyncio.create_task(self._report_while_waiting(progress))
        try:
            await asyncio.wait_for(asyncio.shield(liveness.all_attached.wait()), timeout)
        except TimeoutError:
            missing = [r.index for r in self.ranks if not r.alive]
            raise TimeoutError(
                f"engine rank(s) {missing} not attached within {timeout:.0f} s; start the "
                f"engine with `vllm serve MODEL --headless --data-parallel-address HOST "
                f"--data-parallel-rpc-port PORT` (or `engine-core --frontend-addr "
                f"tcp://HOST:PORT --model MODEL`) pointing at this frontend's --engine-addr"
            ) from None
        finally:
            waiter.cancel()
        if liveness.start_error is not None:
            raise liveness.start_error
        ready = self.ready
        assert ready is not None
        return ready

    async def _report_while_waiting(self, progress: Callable[[str], None] | None) -> None:
        started = time.monotonic()
        while True:
            await asyncio.sleep(10.0)
            attached = sum(r.alive for r in self.ranks)
            msg = (
                f"still waiting for engine ranks: {attached} of {self.data_parallel_size} "
                f"attached ({time.monotonic() - started:.0f} s)"
            )
            log.info(msg)
            if progress:
                progress(msg)

    def _on_input_readable(self) -> None:
        """Registrations: a rank's first (and only) message on this input socket."""
        sock = cast(zmq.Socket, self._input)  # (bound before any read)
        while True:
            try:
                frames = sock.recv_multipart(zmq.NOBLOCK, copy=False)
            except zmq.Again:
                return
            try:
                identity = frames[0].bytes
                if len(frames) != 2:
                    self.rejections(
                        "unexpected_registration",
                        f"input socket: {len(frames) - 1} frames from {identity[:8].hex()}",
                    )
                    continue
                self.liveness.register(identity, frames[1].bytes, _peer(frames[1]))
            except Exception as e:  # whatever it was, the socket must be drained
                self.rejections("malformed", f"input socket: {type(e).__name__}: {e}")

    # ------------------------------------------------------------ liveness's questions
    def reachable(self, rank: Rank) -> bool:
        """Whether a send to the rank's identity goes through (ROUTER_MANDATORY)."""
        try:
            cast(zmq.Socket, self._input).send_multipart([rank.identity, *_PROBE], zmq.NOBLOCK)
            return True
        except zmq.ZMQError:
            return False
        finally:
            self._recheck_input()

    async def probe(
        self, rank: Rank, timeout: float | None, give_up: Callable[[], bool]
    ) -> str | None:
        """The address that answered a utility call to ``rank`` ("" if unknown),
        sent again every REATTACH_PROBE_S while it cannot be delivered; None when
        no answer came within ``timeout``, ``give_up()`` or the link closed."""
        call = self._new_call(rank.index)
        frames = wire.encode_utility(call.id, "get_supported_tasks", client_index=self.client_index)
        deadline = None if timeout is None else time.monotonic() + timeout
        self._peers_wanted += 1
        try:
            while not call.fut.done() and not give_up() and not self._closed:
                if deadline is not None and time.monotonic() >= deadline:
                    return None
                try:
                    cast(zmq.Socket, self._input).send_multipart(
                        [rank.identity, *frames], zmq.NOBLOCK
                    )
                except zmq.ZMQError:
                    pass  # EHOSTUNREACH: not connected (yet)
                self._recheck_input()
                try:
                    await asyncio.wait_for(asyncio.shield(call.fut), REATTACH_PROBE_S)
                except TimeoutError:
                    continue
                except Exception:  # the rank died meanwhile (fail_calls)
                    return None
            return call.peer if call.fut.done() and not call.fut.exception() else None
        finally:
            self._peers_wanted -= 1
            self._utility_calls.pop(call.id, None)

    def set_handover(self, on: bool) -> None:
        """Let a new connection take over an identity on the input socket (or not)."""
        if self._input is not None:
            self._input.setsockopt(zmq.ROUTER_HANDOVER, int(on))
        log.debug(
            "input socket: a new connection may %stake over an engine identity",
            "" if on else "no longer ",
        )

    def fail_calls(self, rank: Rank, reason: str) -> None:
        """A rank died: its utility calls get no answer."""
        for call in self._utility_calls.values():
            if call.rank == rank.index and not call.fut.done():
                call.fut.set_exception(EngineUnavailableError(reason))
                call.fut.exception()  # (retrieved: a probe may not wait for it)

    def _new_call(self, rank: int) -> UtilityCall:
        """A call with a random id: a reply can only come from where it was sent."""
        while True:
            call_id = secrets.randbits(63)
            if call_id not in self._utility_calls:
                break
        loop = cast(asyncio.AbstractEventLoop, self._loop)  # (bound before any call)
        call = self._utility_calls[call_id] = UtilityCall(call_id, rank, loop.create_future())
        return call

    # ------------------------------------------------------------ sending
    def send_add(
        self,
        frames: list[bytes],
        rank: int = 0,
        on_failed: Callable[[str], None] | None = None,
    ) -> None:
        """Queue one ADD made by ``wire.encode_add`` (which validated it) for ``rank``.

        The ADDs (and ABORTs) of one loop iteration leave together at its end:
        a send that finds zmq's I/O thread asleep wakes it, and on a frontend
        pinned to one core that wake-up cost ~35 us a request (a few us each
        when they come in a burst). A rank not attached raises at once; a send
        the socket refuses later (the rank's DEALER gone) calls ``on_failed``.
        """
        target = self.ranks[rank]
        if not target.alive:
            raise EngineUnavailableError(target.death_reason or "no engine attached")
        target.pending_adds.append((frames, on_failed))
        self._schedule_flush()

    def abort(self, rank: int, request_ids: Sequence[str]) -> bool:
        """Queue engine ids to abort on ``rank``; they leave in one message per rank,
        after the ADDs queued before them. False when the rank is not attached
        (nothing can be sent to it)."""
        target = self.ranks[rank]
        if not target.alive:
            return False
        target.pending_aborts.extend(request_ids)
        self._schedule_flush()
        return True

    def _schedule_flush(self) -> None:
        if not self._flush_scheduled:
            self._flush_scheduled = True
            cast(asyncio.AbstractEventLoop, self._loop).call_soon(self._flush)

    def _flush(self) -> None:
        """Send what this loop iteration queued: per rank its ADDs, then one ABORT
        (an id aborted right after its ADD is then known to the engine)."""
        self._flush_scheduled = False
        for rank in self.ranks:
            adds, rank.pending_adds = rank.pending_adds, []
            for i, (frames, _) in enumerate(adds):
                try:
                    self._send(rank, frames)
                except EngineUnavailableError as e:
                    for _, on_failed in adds[i:]:
                        if on_failed is not None:
                            on_failed(str(e))
                    break
            if adds:
                rank.last_sent = time.monotonic()
            ids, rank.pending_aborts = rank.pending_aborts, []
            if ids and rank.alive:
                try:
                    self._send(rank, wire.encode_abort(ids))
                    self.num_aborts_sent += len(ids)
                except EngineUnavailableError:
                    pass

    async def call_utility(
        self, method: str, *args: Any, rank: int | None = None, timeout: float | None = 10.0
    ) -> Any:
        """Call ``method`` on one rank (default: the first that takes requests);
        ``timeout`` None waits as long as the engine takes (vLLM never times out)."""
        if rank is None:
            routable = self.routable_ranks()
            if not routable:
                raise EngineUnavailableError(self.death_reason)
            rank = routable[0]
        call = self._new_call(rank)
        try:
            self._send(
                self.ranks[rank],
                wire.encode_utility(call.id, method, args, client_index=self.client_index),
            )
            out = await asyncio.wait_for(call.fut, timeout)
        finally:
            self._utility_calls.pop(call.id, None)
        return wire.utility_value(out)

    async def call_utility_all(
        self, method: str, *args: Any, timeout: float | None = 10.0
    ) -> list[Any]:
        """Call ``method`` on every attached rank (vLLM's call_utility_all)."""
        ranks = [r.index for r in self.ranks if r.alive]
        if not ranks:
            raise EngineUnavailableError(self.death_reason)
        return list(
            await asyncio.gather(
                *(self.call_utility(method, *args, rank=r, timeout=timeout) for r in ranks)
            )
        )

    def _send(self, rank: Rank, frames: list[bytes]) -> None:
        if not rank.alive:
            raise EngineUnavailableError(rank.death_reason or "no engine attached")
        # Frame by frame rather than send_multipart, whose per-frame checks
        # and flag arithmetic cost more than the sends (small frames are
        # copied either way). Only the first send can fail (the ROUTER
        # refuses an unknown identity), so no partial message goes out.
        send = cast(zmq.Socket, self._input).send  # (bound: a rank is alive)
        try:
            send(rank.identity, _NOBLOCK_MORE)
            for frame in frames[:-1]:
                send(frame, _NOBLOCK_MORE)
            send(frames[-1], _NOBLOCK)
        except zmq.ZMQError as e:
            self._recheck_input()
            # EHOSTUNREACH: the rank's input DEALER is gone (ROUTER_MANDATORY).
            self.liveness.suspect(rank)
            raise EngineUnavailableError(f"cannot send to engine rank {rank.index}: {e}") from e
        self._recheck_input()

    def _recheck_input(self) -> None:
        """A send processes the socket's pending commands, and with them can take
        the edge of its (edge-triggered) FD for a message that arrived meanwhile:
        a restarted rank's registration would then wait unread for good. Look at
        the input socket once more after this loop iteration."""
        if not self._input_recheck:
            self._input_recheck = True
            cast(asyncio.AbstractEventLoop, self._loop).call_soon(self._input_rechecked)

    def _input_rechecked(self) -> None:
        self._input_recheck = False
        self._on_input_readable()

    # ------------------------------------------------------------ receiving
    def _on_output_readable(self) -> None:
        """Hand every engine message that is waiting to ``on_outputs`` in one batch,
        so each client gets one write per wake-up however many steps it covers."""
        sock = cast(zmq.Socket, self._output)  # (bound before any read)
        batch: list[wire.StepOutputs] = []
        dead = False
        now = time.monotonic()
        ranks = self.ranks
        # (EVENTS and RCVMORE are int options)
        get, recv = cast("Callable[[int], int]", sock.get), sock.recv
        for _ in range(MAX_MESSAGES_PER_WAKEUP):
            # Asking first is cheaper than a recv that raises Again, once per
            # wake-up (and it re-arms the edge-triggered FD just the same).
            if not get(_EVENTS) & _POLLIN:
                break
            peer = ""
            try:
                if self._peers_wanted:  # a probe asks who answers
                    first = recv(_NOBLOCK, copy=False)
                    peer, frames = _peer(first), [first.bytes]
                else:
                    frames = [recv(_NOBLOCK)]
            except zmq.Again:
                break
            while get(_RCVMORE):  # aux frames (large logprobs arrays)
                frames.append(recv())
            if wire.is_engine_dead(frames):
                dead = True
                continue
            try:
                outs = wire.decode_step(frames)
                index = outs.engine_index
                if not 0 <= index < len(ranks):
                    self.rejections("unknown_rank", f"output socket: engine_index {index}")
                    continue
                if outs.utility_output is not None:
                    self._on_utility_output(outs, peer)
                rank = ranks[index]
                if not rank.alive:
                    if outs.outputs or wire.has_scheduler_stats(outs):
                        self.rejections(
                            "rank_not_attached",
                            f"output socket: {len(outs.outputs)} outputs from rank {index}",
                        )
                    continue
                rank.last_heard = now
                if rank.stalled:
                    self.liveness.resume(rank)
                if outs.outputs or wire.has_scheduler_stats(outs):
                    batch.append(outs)
            except Exception as e:  # ProtocolError, or anything a crafted message causes
                self.rejections("malformed", f"output socket: {e}")
        else:
            # More may be queued: zmq's FD is edge-triggered, so come back ourselves.
            cast(asyncio.AbstractEventLoop, self._loop).call_soon(self._on_output_readable)
        if batch:
            self._on_outputs(batch)
        if dead:
            self.liveness.engine_core_dead()

    def _on_utility_output(self, outs: wire.StepOutputs, peer: str) -> None:
        """Resolve the call it answers: only a call sent to that rank."""
        reply = cast(wire.UtilityOutput, outs.utility_output)  # (the caller's test)
        call = self._utility_calls.get(reply.call_id)
        if call is None or call.rank != outs.engine_index or call.fut.done():
            self.rejections(
                "unexpected_utility", f"rank {outs.engine_index}, call id {reply.call_id}"
            )
            return
        call.peer = peer
        call.fut.set_result(reply)

    # ------------------------------------------------------------ connections
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
            self.liveness.disconnected()

    # ------------------------------------------------------------ shutdown
    async def close(self) -> None:
        self._closed = True
        self.liveness.close()
        for task in self._tasks:
            task.cancel()
            try:
                await task
            except BaseException:
                pass
        self._flush()
        for sock in (self._output, self._input, *self._monitors):
            if sock is not None and self._loop is not None:
                try:
                    self._loop.remove_reader(cast(int, sock.getsockopt(zmq.FD)))
                except Exception:
                    pass
        for sock in (self._input, self._output):
            if sock is not None:
                sock.disable_monitor()
        for sock in (*self._monitors, self._input, self._output):
            if sock is not None:
                sock.close(linger=100)


def _peer(frame: zmq.Frame) -> str:
    """The address a message came from (ZMQ's Peer-Address: the IP for TCP;
    user, group and process for IPC)."""
    try:
        return cast(str, frame.get("Peer-Address")) or ""  # (a string property)
    except zmq.ZMQError:
        return ""
