"""One service's metrics from several frontend processes (``--api-server-count``).

Each worker writes a :class:`Snapshot` of what its /metrics would show --
every engine rank's :class:`RankStats`, the LoRA series and the frontend's
summed families -- to the service's metrics directory, every second and
whenever it is scraped. The worker that answers /metrics merges every
worker's snapshot: counters and histograms are summed, each rank's gauges
come from the most recent scheduler stats any worker received (the engine
attaches them to one client per step), the frontend's families are summed. A
replacement worker starts from its predecessor's last snapshot, so the
service's counters never go down when a worker dies.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

import msgspec

from frontend.ops.rank_stats import RankStats

log = logging.getLogger("frontend.metrics")

# A family's series: label values -> value (one series with no labels: ``()``).
Series = dict[tuple[str, ...], float]


class Snapshot(msgspec.Struct):
    """What one process counts, or, merged, the whole service."""

    ranks: dict[int, RankStats] = {}
    # vllm:lora_requests_info: every adapter list seen -> when last seen.
    lora_info: dict[str, float] = {}
    # The frontend's summed families (``metrics.FRONTEND_FAMILIES``) by name.
    frontend: dict[str, Series] = {}

    def merge(self, other: Snapshot) -> Snapshot:
        """Two snapshots as one (neither is changed)."""
        ranks = {**self.ranks, **other.ranks}
        for index in self.ranks.keys() & other.ranks.keys():
            ranks[index] = self.ranks[index].merge(other.ranks[index])
        # (vLLM's multiprocess mode adds these timestamps up; the latest is what
        # the series means)
        lora_info = {**self.lora_info, **other.lora_info}
        for key in self.lora_info.keys() & other.lora_info.keys():
            lora_info[key] = max(self.lora_info[key], other.lora_info[key])
        frontend = {
            name: _add(self.frontend.get(name, {}), other.frontend.get(name, {}))
            for name in {*self.frontend, *other.frontend}
        }
        return Snapshot(ranks, lora_info, frontend)


def _add(a: Series, b: Series) -> Series:
    return {key: a.get(key, 0) + b.get(key, 0) for key in {*a, *b}}


_decode = msgspec.msgpack.Decoder(Snapshot).decode


class ServiceMetrics:
    """This worker's part in the service's metrics directory."""

    def __init__(self, directory: str, worker: int) -> None:
        self.directory = Path(directory)
        self.worker = worker
        self.path = self.directory / f"worker-{worker}.msgpack"
        # What a predecessor of this worker had counted (it died).
        self.base = self._read(self.path)
        if self.base is not None:
            log.info("metrics: carrying on from the last snapshot of worker %d", worker)

    def write(self, snapshot: Snapshot) -> Snapshot:
        """Store this worker's snapshot (its predecessor's counts included); returns it."""
        if self.base is not None:
            snapshot = self.base.merge(snapshot)
        tmp = self.path.with_suffix(".tmp")
        try:
            tmp.write_bytes(msgspec.msgpack.encode(snapshot))
            os.replace(tmp, self.path)
        except OSError as e:
            log.warning("cannot write the metrics snapshot %s: %s", self.path, e)
        return snapshot

    def service(self, own: Snapshot) -> Snapshot:
        """Every worker's latest snapshot, with ``own`` (fresh) for this one."""
        total = own
        for path in sorted(self.directory.glob("worker-*.msgpack")):
            if path != self.path:
                other = self._read(path)
                if other is not None:
                    total = total.merge(other)
        return total

    @staticmethod
    def _read(path: Path) -> Snapshot | None:
        try:
            return _decode(path.read_bytes())
        except (OSError, msgspec.DecodeError):
            return None
