"""Which engine ranks a frontend process is attached to, and whether each lives.

The link (``engine_client.py``) moves bytes; this module decides what they
mean for a rank's state. A rank is attached when its registration (the ready
response, its first message on the link's input socket) arrives, after the
handshake server (``engine_handshake.py``) answered its HELLO: every
registration goes through :meth:`RankLiveness.register`, which checks it
before any state changes.

A rank is lost when
* it dies: its connection drops (the link's socket monitor) and it stays
  unreachable for ``DISCONNECT_GRACE_S`` (a send to its identity fails with
  ROUTER_MANDATORY), or it reports ENGINE_CORE_DEAD (a bare frame that does
  not name the rank: with several ranks, the one that then disconnects);
* it stalls: it has work but sends nothing for ``stall_timeout`` seconds; it
  is routed to again as soon as it sends anything.
Each loss is reported to ``on_rank_lost``: only that rank's requests fail.
A restarted rank registers again and is attached without a frontend restart.

A restarted frontend on the same addresses re-attaches to running ranks: their
DEALER and PUSH reconnect by themselves, but they never register again, so
their ready responses are kept in the engine state file and a probe through
the link tells when each is back (:meth:`RankLiveness.reattach`).
"""

from __future__ import annotations

import asyncio
import logging
import pathlib
import time
from typing import Awaitable, Callable

import msgspec

from frontend.engine_handshake import rank_of
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


class Rank:
    """One engine rank as this process's link sees it."""

    def __init__(self, index: int) -> None:
        self.index = index
        self.identity = hs.engine_identity(index)
        self.ready: hs.ReadyResponse | None = None
        self.alive = False
        self.stalled = False
        self.death_reason: str | None = None
        self.last_heard = 0.0  # monotonic: the last message from it
        self.last_sent = 0.0   # monotonic: the last request to it
        self.pending_aborts: list[str] = []  # the link's, sent once per loop iteration
        self.grace: asyncio.TimerHandle | None = None

    @property
    def routable(self) -> bool:
        """Takes new requests: attached, not stalled, not unreachable (in its grace)."""
        return self.alive and not self.stalled and self.grace is None


class EngineState(msgspec.Struct):
    """The engine state file: every attached rank's ready response."""

    ranks: dict[int, hs.ReadyResponse]


class StateFile:
    """``--engine-state-file``: what a restarted frontend needs to re-attach."""

    def __init__(self, path: str | None, data_parallel_size: int) -> None:
        self.path = pathlib.Path(path) if path else None
        self.data_parallel_size = data_parallel_size

    def load(self) -> dict[int, hs.ReadyResponse]:
        if self.path is None or not self.path.exists():
            return {}
        data = self.path.read_bytes()
        try:
            ranks = msgspec.msgpack.decode(data, type=EngineState).ranks
        except msgspec.DecodeError:
            try:  # the single-engine file of earlier versions
                ready = hs.decode_ready_response(data)
            except ProtocolError as e:
                log.warning("ignoring engine state file %s: %s", self.path, e)
                return {}
            ranks = {0: ready} if ready is not None else {}
        return {r: ready for r, ready in ranks.items() if 0 <= r < self.data_parallel_size}

    def save(self, ranks: list[Rank]) -> None:
        if self.path is None:
            return
        state = EngineState({r.index: r.ready for r in ranks if r.alive and r.ready is not None})
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            tmp = self.path.with_suffix(".tmp")
            tmp.write_bytes(msgspec.msgpack.encode(state))
            tmp.replace(self.path)
        except OSError as e:
            log.warning("cannot write engine state file %s: %s", self.path, e)


class RankLiveness:
    """Every rank's state: attached, stalled, lost; the callbacks about them."""

    def __init__(self, data_parallel_size: int, *, reachable: Callable[[Rank], bool],
                 on_rank_lost: Callable[[int, str], None],
                 on_rank_attached: Callable[[int, hs.ReadyResponse], None] | None = None,
                 on_rank_dead: Callable[[Rank, str], None] | None = None,
                 in_flight: Callable[[int], int] | None = None,
                 stall_timeout: float = 0.0, state_file: str | None = None) -> None:
        """``reachable``: whether a send to the rank's identity goes through
        (the link's probe). ``on_rank_dead``: the link's own clean-up, before
        ``on_rank_lost`` is told."""
        self.data_parallel_size = data_parallel_size
        self.ranks = [Rank(i) for i in range(data_parallel_size)]
        self.state_file = StateFile(state_file, data_parallel_size)
        self.stall_timeout = stall_timeout
        self.all_attached = asyncio.Event()
        self.start_error: BaseException | None = None  # the start must fail (version)
        self._reachable = reachable
        self._on_rank_lost = on_rank_lost
        self._on_rank_attached = on_rank_attached
        self._on_rank_dead = on_rank_dead
        self._in_flight = in_flight
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

    # ------------------------------------------------------------ attaching
    def register(self, identity: bytes, payload: bytes) -> None:
        """A registration from the engine ``identity``: checked, then attached."""
        index = rank_of(identity)
        if index is None or index >= self.data_parallel_size:
            log.warning("ignoring a registration from engine identity %s (this frontend "
                        "serves --data-parallel-size %d)", identity.hex(),
                        self.data_parallel_size)
            return
        try:
            ready = hs.decode_ready_response(payload)
            if ready is None:
                raise ProtocolError("engine sent an empty ready response; "
                                    "max_model_len unknown")
            hs.check_engine_version(ready)
        except EngineVersionError as e:
            log.error("%s", e)
            self.start_error = e
            self.all_attached.set()
            return
        except ProtocolError as e:
            log.error("engine rank %d: %s", index, e)
            return
        self.attach(self.ranks[index], ready)

    def attach(self, rank: Rank, ready: hs.ReadyResponse) -> None:
        if rank.alive:  # re-registered before its old connection was seen to close
            self.lose(rank, "the engine rank restarted")
        self._cancel_grace(rank)
        rank.ready, rank.alive, rank.stalled, rank.death_reason = ready, True, False, None
        rank.last_heard = time.monotonic()
        log.info("engine rank %d attached: vLLM %s, max_model_len %d, dtype %s, "
                 "max_num_seqs %d", rank.index, ready.vllm_version, ready.max_model_len,
                 ready.dtype, ready.max_num_seqs)
        self.state_file.save(self.ranks)
        if self._on_rank_attached:
            self._on_rank_attached(rank.index, ready)
        if all(r.alive for r in self.ranks):
            self.all_attached.set()

    async def reattach(self, answers: Callable[[Rank], Awaitable[bool]]) -> None:
        """Adopt the ranks of the state file that are still running: each one
        that answers the link's probe (``answers``) before it registers anew."""
        await asyncio.gather(*(self._reattach(self.ranks[index], ready, answers)
                               for index, ready in self.state_file.load().items()))

    async def _reattach(self, rank: Rank, cached: hs.ReadyResponse,
                        answers: Callable[[Rank], Awaitable[bool]]) -> None:
        if not await answers(rank) or rank.alive:
            return
        try:
            hs.check_engine_version(cached)
        except EngineVersionError as e:
            log.error("%s", e)
            return
        log.info("re-attached to running engine rank %d (no new handshake)", rank.index)
        self.attach(rank, cached)

    # ------------------------------------------------------------ losing ranks
    @staticmethod
    def resume(rank: Rank) -> None:
        """A stalled rank sent something (the link keeps ``last_heard``)."""
        rank.stalled = False
        log.warning("engine rank %d sends again after a stall; routing to it again",
                    rank.index)

    def engine_core_dead(self) -> None:
        reason = "the engine core died (ENGINE_CORE_DEAD)"
        alive = [r for r in self.ranks if r.alive]
        if len(alive) == 1:
            self.lose(alive[0], reason)
            return
        # The frame does not name the rank: the one that dies drops its connections.
        log.warning("an engine rank reported ENGINE_CORE_DEAD; finding which")
        loop = asyncio.get_running_loop()
        for delay in DEAD_RANK_CHECKS_S:
            loop.call_later(delay, self.check)

    def disconnected(self) -> None:
        """A peer of the link's sockets disconnected: probe once the socket has
        noticed the closed peer (it does when it next processes its commands,
        at the latest on the next send)."""
        loop = asyncio.get_running_loop()
        for delay in DISCONNECT_CHECKS_S:
            loop.call_later(delay, self.check)

    def check(self) -> None:
        """Probe every attached rank: one that cannot be reached gets a grace period."""
        for rank in self.ranks:
            if rank.alive and not self._reachable(rank):
                self.suspect(rank)

    def suspect(self, rank: Rank) -> None:
        if rank.grace is None and rank.alive:
            rank.grace = asyncio.get_running_loop().call_later(
                DISCONNECT_GRACE_S, self._grace_over, rank)

    def _grace_over(self, rank: Rank) -> None:
        rank.grace = None
        if rank.alive and not self._reachable(rank):
            self.lose(rank, "the engine's connection closed")

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
        rank.pending_aborts.clear()
        log.error("engine rank %d is dead: %s", rank.index, reason)
        if self._on_rank_dead is not None:
            self._on_rank_dead(rank, reason)
        self._on_rank_lost(rank.index, reason)

    # ------------------------------------------------------------ stalls
    async def watch_stalls(self) -> None:
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

    def close(self) -> None:
        for rank in self.ranks:
            self._cancel_grace(rank)
