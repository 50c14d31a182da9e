"""What one process counted for one engine rank, as typed data.

A :class:`RankStats` is both what the stats recorder adds to on the hot path
and what a worker's snapshot holds (``service_metrics.py``): plain lists of
numbers, laid out by the family table (``vllm_metrics.py`` gives every counter
series and every histogram its slot). Everything in it is a count or a sum,
except the engine's last scheduler stats (the gauges), so the stats of several
frontend processes merge slot by slot; the gauges come from the latest stats.
"""

from __future__ import annotations

from bisect import bisect_left

import msgspec

from protocol import wire
from protocol.errors import ProtocolError

# Msgpack nil: no scheduler stats yet (how the engine's messages say it too).
NO_STATS_RAW = msgspec.Raw(b"\xc0")
# The gauges before the engine's first stats (or with --disable-log-stats on it).
NO_STATS = wire.SchedulerStats()


class Histogram(msgspec.Struct, array_like=True, gc=False):
    """Bucket counts in a plain list: ``observe`` is a bisect and two adds."""

    bounds: tuple[float, ...]
    counts: list[int]  # one per bound, and the last one for +Inf
    sum: float = 0.0

    @classmethod
    def empty(cls, bounds: tuple[float, ...]) -> Histogram:
        return cls(bounds, [0] * (len(bounds) + 1))

    def observe(self, value: float) -> None:
        self.counts[bisect_left(self.bounds, value)] += 1
        self.sum += value

    def observe_many(self, value: float, times: int) -> None:
        """``times`` observations of ``value`` (several choices' equal gaps at once)."""
        self.counts[bisect_left(self.bounds, value)] += times
        self.sum += value * times

    @property
    def count(self) -> int:
        return sum(self.counts)

    def merge(self, other: Histogram) -> Histogram:
        return Histogram(
            self.bounds, [a + b for a, b in zip(self.counts, other.counts)], self.sum + other.sum
        )


class SpecDecodeCounts(msgspec.Struct, array_like=True, gc=False):
    """vLLM registers these only with a speculative config; a frontend learns
    of one from the first step that drafted."""

    drafts: int = 0
    draft_tokens: int = 0
    accepted_tokens: int = 0
    accepted_per_pos: list[int] = []

    def merge(self, other: SpecDecodeCounts | None) -> SpecDecodeCounts:
        if other is None:
            return self
        return SpecDecodeCounts(
            self.drafts + other.drafts,
            self.draft_tokens + other.draft_tokens,
            self.accepted_tokens + other.accepted_tokens,
            [a + b for a, b in zip(self.accepted_per_pos, other.accepted_per_pos)],
        )


class RankStats(msgspec.Struct, gc=False):
    """One engine rank's counters, histograms and last scheduler state."""

    counters: list[int | float]  # by counter slot (vllm_metrics.VLLM_FAMILIES)
    histograms: list[Histogram]  # by histogram slot
    spec: SpecDecodeCounts | None = None
    # The gauges' source: the engine's last scheduler_stats, still msgpack,
    # and its step's engine timestamp (the latest wins across processes).
    last_stats: msgspec.Raw = NO_STATS_RAW
    last_stats_ts: float = 0.0

    @property
    def has_stats(self) -> bool:
        return len(self.last_stats) > 1

    @property
    def gauges(self) -> wire.SchedulerStats:
        """The engine's last scheduler state (decoded when /metrics reads it)."""
        try:
            ss = wire.decode_scheduler_stats(self.last_stats)
        except ProtocolError:
            ss = None  # logged when it came, if it counted anything
        return ss or NO_STATS

    def merge(self, other: RankStats) -> RankStats:
        """Two processes' stats of the same rank as one (neither is changed)."""
        latest = (
            other
            if other.has_stats and (not self.has_stats or other.last_stats_ts > self.last_stats_ts)
            else self
        )
        return RankStats(
            [a + b for a, b in zip(self.counters, other.counters)],
            [a.merge(b) for a, b in zip(self.histograms, other.histograms)],
            other.spec if self.spec is None else self.spec.merge(other.spec),
            latest.last_stats,
            latest.last_stats_ts,
        )
