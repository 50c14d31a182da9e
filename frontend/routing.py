"""Which engine rank serves a request, under data parallel (``--data-parallel-size``).

All choices of one client request (its prompts x n) go to one rank, so they
share the prompt's prefix cache. Two policies (``--dp-routing``):

* ``load``: the least loaded rank. Load is the larger of this frontend's own
  choices in flight on the rank and the rank's own waiting + running counts
  from its latest scheduler stats (which include other frontend processes'
  requests); ties rotate, so idle ranks share fresh work.
* ``prefix`` (the default): the rank that already holds the longest cached
  prefix of the prompt, unless it is loaded well above the least loaded one
  (more than ``PREFIX_LOAD_SLACK`` choices and ``PREFIX_LOAD_RATIO`` times);
  otherwise as ``load``. What a rank holds is estimated here: the chained
  hashes of every full block (the engine's block size) of every prompt routed
  to it, most recently used last, at most as many blocks as its KV cache has.
  vLLM's own balancer rotates ties after every pick and loses most multi-turn
  reuse (upstream #52463); this keeps a conversation on the rank that has it.

With one rank nothing is computed: every request goes to rank 0.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable

import msgspec

POLICIES = ("prefix", "load")
PREFIX_LOAD_SLACK = 8
PREFIX_LOAD_RATIO = 1.5

_stats_decoder = msgspec.msgpack.Decoder()


class RankLoad:
    """What the router knows of one rank."""

    __slots__ = (
        "in_flight",
        "waiting",
        "running",
        "_raw_stats",
        "blocks",
        "block_size",
        "capacity",
    )

    def __init__(self) -> None:
        self.in_flight = 0  # this frontend's choices on the rank
        self.waiting = 0  # from the rank's latest scheduler stats
        self.running = 0
        self._raw_stats: bytes | None = None  # latest, decoded only when routing
        self.blocks: OrderedDict[int, None] = OrderedDict()
        self.block_size = 0
        self.capacity = 0

    def load(self) -> int:
        raw = self._raw_stats
        if raw is not None:
            self._raw_stats = None
            stats = _stats_decoder.decode(raw)
            if isinstance(stats, dict):
                self.waiting = int(stats.get("num_waiting_reqs") or 0)
                self.running = int(stats.get("num_running_reqs") or 0)
        return max(self.in_flight, self.waiting + self.running)


class Router:
    def __init__(self, data_parallel_size: int = 1, policy: str = "prefix") -> None:
        if policy not in POLICIES:
            raise ValueError(f"--dp-routing must be one of {', '.join(POLICIES)}")
        self.policy = policy
        self.ranks = [RankLoad() for _ in range(data_parallel_size)]
        self._next = 0  # where ties start: rotates

    def configure(self, rank: int, block_size: int, num_blocks: int) -> None:
        """The rank's KV cache geometry, from its ready response."""
        load = self.ranks[rank]
        load.block_size, load.capacity = block_size, num_blocks
        load.blocks.clear()

    def on_stats(self, rank: int, raw: bytes) -> None:
        """A rank's scheduler stats arrived (msgpack, kept raw until needed)."""
        if rank < len(self.ranks):
            self.ranks[rank]._raw_stats = raw

    def forget(self, rank: int) -> None:
        """The rank lost its requests (died, stalled) or restarted: its cache too."""
        load = self.ranks[rank]
        load.blocks.clear()
        load.waiting = load.running = 0

    # ------------------------------------------------------------ routing
    def pick(self, prompts: list[list[int]], candidates: list[int]) -> int:
        """The rank for a request with these prompts, among routable ``candidates``."""
        if len(self.ranks) == 1:
            return 0
        loads = {r: self.ranks[r].load() for r in candidates}
        least = min(loads.values())
        if self.policy == "prefix":
            best, matched = self._longest_prefix(prompts, candidates)
            if matched and loads[best] <= max(least + PREFIX_LOAD_SLACK, least * PREFIX_LOAD_RATIO):
                return best
        # The least loaded, ties rotating from where the last pick started.
        n = len(self.ranks)
        start = self._next
        self._next = (start + 1) % n
        return min(candidates, key=lambda r: (loads[r], (r - start) % n))

    def remember(self, rank: int, prompts: list[list[int]]) -> None:
        """The rank now holds these prompts' blocks (most recently used)."""
        load = self.ranks[rank]
        if len(self.ranks) == 1 or self.policy != "prefix" or not load.block_size:
            return
        blocks = load.blocks
        for prompt in prompts:
            for h in block_hashes(prompt, load.block_size):
                blocks[h] = None
                blocks.move_to_end(h)
        while len(blocks) > load.capacity > 0:
            blocks.popitem(last=False)

    def started(self, rank: int) -> None:
        """One more choice of this frontend in flight on ``rank``."""
        self.ranks[rank].in_flight += 1

    def finished(self, rank: int) -> None:
        self.ranks[rank].in_flight -= 1

    def _longest_prefix(self, prompts: list[list[int]], candidates: list[int]) -> tuple[int, int]:
        """The candidate holding the most leading blocks of the prompts, and how many."""
        best, best_matched = candidates[0], 0
        by_size: dict[int, list[list[int]]] = {}  # block size -> each prompt's hashes
        for r in candidates:
            load = self.ranks[r]
            if not load.block_size or not load.blocks:
                continue
            chains = by_size.get(load.block_size)
            if chains is None:
                chains = by_size[load.block_size] = [
                    list(block_hashes(p, load.block_size)) for p in prompts
                ]
            matched = sum(_leading(chain, load.blocks) for chain in chains)
            if matched > best_matched:
                best, best_matched = r, matched
        return best, best_matched


def block_hashes(token_ids: list[int], block_size: int) -> Iterable[int]:
    """Chained hashes of the full blocks: a block's hash names its whole prefix."""
    h = 0
    for start in range(0, len(token_ids) - block_size + 1, block_size):
        h = hash((h, *token_ids[start : start + block_size]))
        yield h


def _leading(hashes: list[int], held: OrderedDict[int, None]) -> int:
    count = 0
    for h in hashes:
        if h not in held:
            break
        count += 1
    return count
