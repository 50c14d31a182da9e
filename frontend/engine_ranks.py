"""Which engine ranks a frontend process is attached to, and whether each lives.

The link (``engine_client.py``) moves bytes; this module decides what they
mean for a rank's state. The link has no authentication: anyone who reaches
the engine ports can send there, so nothing changes a rank's state on one
message alone.

A rank is attached only through the handshake: its HELLO (answered by
``engine_handshake.py``, which notes when it came) opens the rank's window,
and within it the rank's registration -- the ready response, its first
message on the link's input socket -- is checked (:meth:`RankLiveness.register`)
before any state changes. A registration without a HELLO before it, a second
one, a malformed or empty one are refused and the ranks serving are left
alone. The input socket lets a new connection take over an identity
(ZMQ's ROUTER_HANDOVER, so that a restarted engine can displace whatever holds
its identity) only during a handshake window while no rank is attached:
a connection that claims a serving rank's identity never replaces it.

A rank is lost when
* it dies: its connection drops (the link's socket monitor) and it stays
  unreachable for ``DISCONNECT_GRACE_S`` (a send to its identity fails with
  ROUTER_MANDATORY); or, after a disconnect, an ENGINE_CORE_DEAD (a bare frame
  that names no rank: anyone could have sent it) or a HELLO as a rank that is
  attached, it does not answer a utility call within ``CONFIRM_S`` from the
  address it registered from (whoever took its identity when its connection
  dropped does not count; a rank back after its grace is not routed to until
  it answers);
* it stalls: it has work but sends nothing for ``stall_timeout`` seconds; it
  is routed to again as soon as it sends anything.
Each loss is reported to ``on_rank_lost``: only that rank's requests fail.
A restarted rank says HELLO and registers again and is attached without a
frontend restart.

A restarted frontend on the same addresses re-attaches to running ranks: their
DEALER and PUSH reconnect by themselves, but they never say HELLO again, so
their ready responses are kept in the engine state file with the address each
registered from, and a rank is adopted when a utility call sent to its identity
is answered from that address (:meth:`RankLiveness.reattach`).
"""

from __future__ import annotations

import asyncio
import logging
import pathlib
import time
from collections.abc import Callable, MutableSequence
from typing import Protocol, cast

import msgspec

from frontend.engine_handshake import rank_of
from frontend.engine_rejections import Rejections
from protocol import handshake as hs
from protocol.errors import EngineVersionError, ProtocolError

log = logging.getLogger("frontend.engine")

# A rank whose connection dropped is declared dead after this long without a
# reconnect (an engine process that exits drops its connections at once).
DISCONNECT_GRACE_S = 1.0
# After ENGINE_CORE_DEAD from one of several ranks: when to look for the one
# that disconnects.
DEAD_RANK_CHECKS_S = (0.05, 0.2, 0.5, 1.0, 2.0, 4.0)
# After a disconnect: when to probe the ranks.
DISCONNECT_CHECKS_S = (0.0, 0.1, 0.5)
# A rank said to be dead (ENGINE_CORE_DEAD, a new HELLO) has this long to answer
# a utility call (the engine answers between two steps).
CONFIRM_S = 5.0
# How often the handshake windows are looked at (HELLOs heard by another
# process with --api-server-count; windows that end).
WINDOW_CHECK_S = 0.1
DEAD_REASON = "the engine core died (ENGINE_CORE_DEAD)"


class Rank:
    """One engine rank as this process's link sees it."""

    def __init__(self, index: int) -> None:
        self.index = index
        self.identity = hs.engine_identity(index)
        self.ready: hs.ReadyResponse | None = None
        self.peer = ""  # the address it registered from (ZMQ's Peer-Address)
        self.alive = False
        self.stalled = False
        # Its scheduler is paused (/pause, /sleep): requests wait, silence is no stall.
        self.paused = False
        self.death_reason: str | None = None
        self.last_heard = 0.0  # monotonic: the last message from it
        self.last_sent = 0.0  # monotonic: the last request to it
        # The link's, sent once per loop iteration: ADDs (frames, on_failed), ABORTs.
        self.pending_adds: list[tuple[list[bytes], Callable[[str], None] | None]] = []
        self.pending_aborts: list[str] = []
        self.grace: asyncio.TimerHandle | None = None
        self.hello_seen = 0.0  # the latest HELLO of this rank this process acted on
        self.hello_used = 0.0  # the HELLO its accepted registration followed
        self.confirming = False  # a utility call asks whether it still lives
        self.hello_to_confirm = False  # ... after a HELLO as it
        self.reconnected = False  # its connection came back: is it its engine's?
        self.attachment = 0  # counts attaches: a probe's verdict is about one of them

    def asked(self) -> Callable[[], bool]:
        """For a probe of this attachment: true once it is over (the rank was
        lost, or a new engine attached as it meanwhile)."""
        attachment = self.attachment
        return lambda: not self.alive or self.attachment != attachment

    @property
    def routable(self) -> bool:
        """Takes new requests: attached, not stalled, not unreachable (in its
        grace), not back on a connection that has yet to prove it is the engine's."""
        return self.alive and not self.stalled and self.grace is None and not self.reconnected


class Link(Protocol):
    """What liveness asks of the link (``engine_client.EngineClient``)."""

    def reachable(self, rank: Rank) -> bool:
        """Whether a send to the rank's identity goes through."""

    async def probe(
        self, rank: Rank, timeout: float | None, give_up: Callable[[], bool]
    ) -> str | None:
        """The address that answered a utility call to the rank, or None."""

    def set_handover(self, on: bool) -> None:
        """Whether a new connection may take over an identity on the input socket."""

    def fail_calls(self, rank: Rank, reason: str) -> None:
        """The rank died: its utility calls get no answer."""


class EngineState(msgspec.Struct):
    """The engine state file: every attached rank's ready response and address."""

    ranks: dict[int, hs.ReadyResponse]
    peers: dict[int, str] = {}


class StateFile:
    """``--engine-state-file``: what a restarted frontend needs to re-attach."""

    def __init__(self, path: str | None, data_parallel_size: int) -> None:
        self.path = pathlib.Path(path) if path else None
        self.data_parallel_size = data_parallel_size

    def load(self) -> EngineState:
        if self.path is None or not self.path.exists():
            return EngineState({})
        data = self.path.read_bytes()
        try:
            state = msgspec.msgpack.decode(data, type=EngineState)
        except msgspec.DecodeError:
            try:  # the single-engine file of earlier versions
                ready = hs.decode_ready_response(data)
            except ProtocolError as e:
                log.warning("ignoring engine state file %s: %s", self.path, e)
                return EngineState({})
            state = EngineState({0: ready} if ready is not None else {})
        state.ranks = {
            r: ready for r, ready in state.ranks.items() if 0 <= r < self.data_parallel_size
        }
        return state

    def save(self, ranks: list[Rank]) -> None:
        if self.path is None:
            return
        attached = [r for r in ranks if r.alive and r.ready is not None]
        state = EngineState(
            {r.index: cast(hs.ReadyResponse, r.ready) for r in attached},  # (not None: above)
            {r.index: r.peer for r in attached if r.peer},
        )
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            tmp = self.path.with_suffix(".tmp")
            tmp.write_bytes(msgspec.msgpack.encode(state))
            tmp.replace(self.path)
        except OSError as e:
            log.warning("cannot write engine state file %s: %s", self.path, e)


class RankLiveness:
    """Every rank's state: attached, stalled, lost; the callbacks about them."""

    def __init__(
        self,
        data_parallel_size: int,
        link: Link,
        *,
        on_rank_lost: Callable[[int, str], None],
        on_rank_attached: Callable[[int, hs.ReadyResponse], None] | None = None,
        in_flight: Callable[[int], int] | None = None,
        stall_timeout: float = 0.0,
        state_file: str | None = None,
        hellos: MutableSequence[float] | None = None,
        window_s: float = 600.0,
        reject: Rejections | None = None,
    ) -> None:
        """``hellos[rank]``: when the rank last said HELLO (the handshake
        server's, shared memory with --api-server-count); ``window_s``: how long
        after its HELLO a rank may register (--engine-ready-timeout)."""
        self.data_parallel_size = data_parallel_size
        self.ranks = [Rank(i) for i in range(data_parallel_size)]
        self.state_file = StateFile(state_file, data_parallel_size)
        self.stall_timeout = stall_timeout
        self.hellos = hellos if hellos is not None else [0.0] * data_parallel_size
        self.window_s = window_s
        self.all_attached = asyncio.Event()
        self.start_error: BaseException | None = None  # the start must fail (version)
        self._link = link
        self._reject = reject or Rejections()
        self._on_rank_lost = on_rank_lost
        self._on_rank_attached = on_rank_attached
        self._in_flight = in_flight
        self._last_death: str | None = None
        self._handover = False
        self._dead_frames = 0  # ENGINE_CORE_DEAD frames of the current round
        self._dead_heard = -CONFIRM_S  # monotonic: when the last round began
        self._tasks: set[asyncio.Task] = set()

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
        return ["stalled" if r.stalled else "serving" if r.alive else "dead" for r in self.ranks]

    # ------------------------------------------------------------ the handshake
    def window_open(self, rank: Rank) -> bool:
        """The rank said HELLO, and has not registered since, within the window."""
        said = self.hellos[rank.index]
        return said > rank.hello_used and time.monotonic() - said <= self.window_s

    def hello(self, index: int) -> None:
        """Rank ``index`` said HELLO (told by the handshake server, or seen in
        ``hellos``). A rank that is attached is asked whether it still lives:
        its engine restarted, or someone else speaks for it."""
        rank = self.ranks[index]
        said = self.hellos[index]
        if said <= rank.hello_seen:
            return
        rank.hello_seen = said
        if rank.alive and rank.grace is None:
            self._confirm(rank, hello=True)
        self.update_handover()

    def update_handover(self) -> None:
        """ROUTER_HANDOVER only while a rank may register and none is attached:
        then a restarted engine displaces whatever holds its identity, and no
        serving rank can be displaced."""
        on = not any(r.alive for r in self.ranks) and any(self.window_open(r) for r in self.ranks)
        if on != self._handover:
            self._handover = on
            self._link.set_handover(on)

    async def watch_windows(self) -> None:
        """HELLOs another process heard (--api-server-count), and windows that end."""
        while True:
            await asyncio.sleep(WINDOW_CHECK_S)
            for rank in self.ranks:
                self.hello(rank.index)
            self.update_handover()

    def register(self, identity: bytes, payload: bytes, peer: str = "") -> None:
        """A message on the input socket from the engine ``identity``: attached
        if it is the registration of a rank that has just said HELLO."""
        index = rank_of(identity)
        if index is None or index >= self.data_parallel_size:
            self._reject(
                "unknown_rank",
                f"input socket: identity {identity[:8].hex()} "
                f"(this frontend serves --data-parallel-size "
                f"{self.data_parallel_size})",
            )
            return
        rank = self.ranks[index]
        self.hello(index)
        if not self.window_open(rank):
            self._reject(
                "unexpected_registration",
                f"input socket: rank {index} sent {len(payload)} bytes without a "
                "HELLO before (a rank registers once, after its handshake)",
            )
            return
        try:
            ready = hs.decode_ready_response(payload)
            if ready is None:
                raise ProtocolError("an empty ready response")
            hs.check_engine_version(ready)
        except EngineVersionError as e:
            if self.all_attached.is_set():  # serving: refused, the others go on
                self._reject("bad_registration", f"rank {index}: {e}")
                return
            log.error("%s", e)
            self.start_error = e
            self.all_attached.set()
            return
        except ProtocolError as e:
            self._reject("bad_registration", f"rank {index}: {e}")
            return
        rank.hello_used = self.hellos[index]
        rank.peer = peer
        self.attach(rank, ready)

    def attach(self, rank: Rank, ready: hs.ReadyResponse) -> None:
        if rank.alive:  # re-registered before its old connection was seen to close
            self.lose(rank, "the engine rank restarted")
        self._cancel_grace(rank)
        rank.ready, rank.alive, rank.stalled, rank.death_reason = ready, True, False, None
        rank.reconnected = False
        rank.paused = False  # an engine starts unpaused
        rank.attachment += 1
        rank.last_heard = time.monotonic()
        log.info(
            "engine rank %d attached: vLLM %s, max_model_len %d, dtype %s, max_num_seqs %d",
            rank.index,
            ready.vllm_version,
            ready.max_model_len,
            ready.dtype,
            ready.max_num_seqs,
        )
        self.state_file.save(self.ranks)
        self.update_handover()
        if self._on_rank_attached:
            self._on_rank_attached(rank.index, ready)
        if all(r.alive for r in self.ranks):
            self.all_attached.set()

    # ------------------------------------------------------------ re-attaching
    async def reattach(self) -> None:
        """Adopt the ranks of the state file that are still running: each one
        whose probe is answered from the address it registered from, before it
        registers anew."""
        state = self.state_file.load()
        await asyncio.gather(
            *(
                self._reattach(self.ranks[index], ready, state.peers.get(index))
                for index, ready in state.ranks.items()
            )
        )

    async def _reattach(
        self, rank: Rank, cached: hs.ReadyResponse, registered_from: str | None
    ) -> None:
        while True:
            peer = await self._link.probe(rank, None, lambda: rank.alive)
            if peer is None or rank.alive:
                return
            if registered_from is None or peer == registered_from:
                break
            self._reject(
                "wrong_peer",
                f"rank {rank.index}'s re-attach probe was answered "
                f"from {peer}, but it registered from {registered_from}",
            )
        try:
            hs.check_engine_version(cached)
        except EngineVersionError as e:
            log.error("%s", e)
            return
        log.info("re-attached to running engine rank %d (no new handshake)", rank.index)
        rank.peer = peer
        self.attach(rank, cached)

    # ------------------------------------------------------------ losing ranks
    @staticmethod
    def resume(rank: Rank) -> None:
        """A stalled rank sent something (the link keeps ``last_heard``)."""
        rank.stalled = False
        log.warning("engine rank %d sends again after a stall; routing to it again", rank.index)

    def engine_core_dead(self) -> None:
        """ENGINE_CORE_DEAD: a frame that names no rank, and anyone can send it.
        The rank that died drops its connections (the probes see it) or stops
        answering (a utility call); the others answer and serve on. One round
        of questions at a time: frames during it are its news too."""
        self._dead_frames += 1
        if self._dead_frames > 1:
            return
        log.warning("ENGINE_CORE_DEAD on the output socket; asking the ranks")
        self._dead_heard = time.monotonic()
        loop = asyncio.get_running_loop()
        for delay in DEAD_RANK_CHECKS_S:
            loop.call_later(delay, self.check)
        self._spawn(self._confirm_dead())

    async def _confirm_dead(self) -> None:
        alive = [(r, r.asked()) for r in self.ranks if r.alive]
        lost = 0
        try:
            for (rank, over), peer in zip(
                alive,
                await asyncio.gather(*(self._link.probe(r, CONFIRM_S, over) for r, over in alive)),
            ):
                if peer is None:
                    lost += 1
                    if not over():  # else already lost, or replaced by a new engine
                        self.lose(rank, DEAD_REASON)
        finally:
            frames, self._dead_frames = self._dead_frames, 0
        if not lost:
            self._reject(
                "false_engine_dead",
                f"{frames} ENGINE_CORE_DEAD frame(s) while every attached rank still answers",
                count=frames,
            )

    def _confirm(self, rank: Rank, hello: bool = False) -> None:
        """Does ``rank``'s engine still answer? Asked after a HELLO as the rank
        (its engine restarted, or someone else speaks for it) and after a
        disconnect (its connection may have dropped and someone else taken its
        identity at once). Lost if no answer comes in time from the address it
        registered from; it is routed to meanwhile."""
        rank.hello_to_confirm |= hello
        if rank.confirming:  # the answer on its way answers this too
            return
        rank.confirming = True

        over = rank.asked()

        async def confirm() -> None:
            try:
                peer = await self._link.probe(rank, CONFIRM_S, over)
            finally:
                rank.confirming = False
            hello, rank.hello_to_confirm = rank.hello_to_confirm, False
            if over():
                return
            if self._is_engine(rank, peer):
                if hello:
                    self._reject(
                        "live_rank_hello",
                        f"a HELLO as engine rank {rank.index}, whose engine still answers",
                    )
            elif hello:
                self.lose(
                    rank,
                    f"engine rank {rank.index} said HELLO again and the "
                    "attached engine does not answer (a new engine replaces it)",
                )
            else:
                self.lose(
                    rank,
                    "the engine's connection closed (what holds its identity "
                    "does not answer as the engine)",
                )

        self._spawn(confirm())

    def _is_engine(self, rank: Rank, peer: str | None) -> bool:
        """A probe of ``rank`` was answered (``peer``: from where) by its engine."""
        if peer is None:
            return False
        if rank.peer and peer and peer != rank.peer:
            self._reject(
                "wrong_peer",
                f"rank {rank.index}'s probe was answered from "
                f"{peer}, but it registered from {rank.peer}",
            )
            return False
        return True

    def disconnected(self) -> None:
        """A peer of the link's sockets disconnected: probe once the socket has
        noticed the closed peer (it does when it next processes its commands,
        at the latest on the next send). Reachable is not enough: whoever
        connected as a rank the moment its engine's connection dropped holds
        its identity, so each attached rank's engine must also answer."""
        loop = asyncio.get_running_loop()
        for delay in DISCONNECT_CHECKS_S:
            loop.call_later(delay, self.check)
        for rank in self.ranks:
            if rank.alive:
                self._confirm(rank)

    def check(self) -> None:
        """Probe every attached rank: one that cannot be reached gets a grace period."""
        for rank in self.ranks:
            if rank.alive and not self._link.reachable(rank):
                self.suspect(rank)

    def suspect(self, rank: Rank) -> None:
        if rank.grace is None and rank.alive:
            rank.grace = asyncio.get_running_loop().call_later(
                DISCONNECT_GRACE_S, self._grace_over, rank
            )

    def _grace_over(self, rank: Rank) -> None:
        rank.grace = None
        if not rank.alive:
            return
        if not self._link.reachable(rank):
            died = time.monotonic() - self._dead_heard < CONFIRM_S
            self.lose(rank, DEAD_REASON if died else "the engine's connection closed")
            return
        # Something holds the identity again: the engine reconnected, or anyone
        # who connected as it meanwhile. Routed to again only once its engine
        # answers a utility call from the address it registered from.
        rank.reconnected = True
        self._spawn(self._confirm_reconnect(rank))

    async def _confirm_reconnect(self, rank: Rank) -> None:
        over = rank.asked()
        try:
            peer = await self._link.probe(rank, CONFIRM_S, over)
        finally:
            rank.reconnected = False
        if over():
            return
        if self._is_engine(rank, peer):
            log.info("engine rank %d reconnected", rank.index)
            return
        self.lose(
            rank,
            "the engine's connection closed (what connected again as "
            "it does not answer as the engine)",
        )

    def _cancel_grace(self, rank: Rank) -> None:
        if rank.grace is not None:
            rank.grace.cancel()
            rank.grace = None

    def lose(self, rank: Rank, reason: str) -> None:
        self._cancel_grace(rank)
        if not rank.alive:
            return
        rank.alive = rank.stalled = False
        rank.death_reason = self._last_death = reason
        rank.pending_adds.clear()  # (their groups fail with the rank)
        rank.pending_aborts.clear()
        log.error("engine rank %d is dead: %s", rank.index, reason)
        self._link.fail_calls(rank, reason)
        self.update_handover()
        self._on_rank_lost(rank.index, reason)

    # ------------------------------------------------------------ stalls
    async def watch_stalls(self) -> None:
        """A rank with work that sends nothing for ``stall_timeout`` s is stalled."""
        interval = min(1.0, self.stall_timeout / 4)
        while True:
            await asyncio.sleep(interval)
            now = time.monotonic()
            for rank in self.ranks:
                if (
                    rank.routable
                    and not rank.paused
                    and self._in_flight is not None
                    and now - max(rank.last_heard, rank.last_sent) > self.stall_timeout
                    and self._in_flight(rank.index) > 0
                ):
                    self._stall(rank)

    def _stall(self, rank: Rank) -> None:
        rank.stalled = True
        reason = (
            f"engine rank {rank.index} sent nothing for {self.stall_timeout:g} s "
            "while it had requests (--engine-stall-timeout); they were aborted"
        )
        self._last_death = reason
        log.error("%s", reason)
        self._on_rank_lost(rank.index, reason)

    # ------------------------------------------------------------ shutdown
    def _spawn(self, coro) -> None:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._done)

    def _done(self, task: asyncio.Task) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("engine rank check failed", exc_info=task.exception())

    def close(self) -> None:
        for rank in self.ranks:
            self._cancel_grace(rank)
        for task in list(self._tasks):
            task.cancel()
