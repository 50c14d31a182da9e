"""One service's metrics from several frontend processes (``--api-server-count``).

Each worker writes a snapshot of what its /metrics would show -- every
engine's counters, histograms and latest scheduler stats, the HTTP counters
and the frontend's gauges -- to the service's metrics directory, every second
and whenever it is scraped. The worker that answers /metrics adds up every
worker's snapshot: counters and histograms are summed, each engine's gauges
come from the most recent scheduler stats any worker received (the engine
attaches them to one client per step), the frontend's gauges are summed. A
replacement worker starts from its predecessor's last snapshot, so the
service's counters never go down when a worker dies.

Snapshots are msgpack of plain data: only numbers, lists and the stats bytes.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

import msgspec

from frontend.ops.stats import EngineStats, Histogram, SpecDecodeCounts

log = logging.getLogger("frontend.metrics")

_NOT_SUMMED = frozenset({"prev_ts", "last_stats", "last_stats_ts"})


# ---------------------------------------------------------------- engines
def engine_snapshot(es: EngineStats) -> dict:
    """An engine's counters ("c"), counters by label ("d"), histograms ("h"),
    histogram groups ("hs"), spec-decode counts and latest stats."""
    snap: dict[str, Any] = {"c": {}, "d": {}, "h": {}, "hs": {}, "spec": None,
                            "stats": None}
    for name, value in vars(es).items():
        if name in _NOT_SUMMED or value is None:
            continue
        if isinstance(value, Histogram):
            snap["h"][name] = [value.counts, value.sum]
        elif isinstance(value, tuple):  # (Histogram, ...)
            snap["hs"][name] = [[h.counts, h.sum] for h in value]
        elif isinstance(value, dict):
            snap["d"][name] = value
        elif isinstance(value, SpecDecodeCounts):
            snap["spec"] = [value.drafts, value.draft_tokens, value.accepted_tokens,
                            value.accepted_per_pos]
        else:
            snap["c"][name] = value
    if es.last_stats is not None:
        snap["stats"] = [es.last_stats_ts, bytes(es.last_stats)]
    return snap


def _add_counts(a: list, b: list) -> list:
    return [x + y for x, y in zip(a, b)]


def merge_engine(a: dict, b: dict) -> dict:
    out: dict[str, Any] = {
        "c": {k: a["c"].get(k, 0) + b["c"].get(k, 0) for k in {*a["c"], *b["c"]}},
        "d": {k: {label: a["d"].get(k, {}).get(label, 0) + b["d"].get(k, {}).get(label, 0)
                  for label in {*a["d"].get(k, {}), *b["d"].get(k, {})}}
              for k in {*a["d"], *b["d"]}},
        "h": {}, "hs": {}}
    for k in {*a["h"], *b["h"]}:
        ha, hb = a["h"].get(k), b["h"].get(k)
        out["h"][k] = (hb if ha is None else ha if hb is None
                       else [_add_counts(ha[0], hb[0]), ha[1] + hb[1]])
    for k in {*a["hs"], *b["hs"]}:
        ga, gb = a["hs"].get(k), b["hs"].get(k)
        out["hs"][k] = (gb if ga is None else ga if gb is None else
                        [[_add_counts(x[0], y[0]), x[1] + y[1]] for x, y in zip(ga, gb)])
    sa, sb = a["spec"], b["spec"]
    out["spec"] = (sb if sa is None else sa if sb is None else
                   [sa[0] + sb[0], sa[1] + sb[1], sa[2] + sb[2], _add_counts(sa[3], sb[3])])
    ta, tb = a["stats"], b["stats"]
    out["stats"] = tb if ta is None or (tb is not None and tb[0] > ta[0]) else ta
    return out


def fill_engine(es: EngineStats, snap: dict) -> EngineStats:
    """``es`` (fresh, of the same bucket layout) holding ``snap``."""
    for name, value in snap["c"].items():
        setattr(es, name, value)
    for name, value in snap["d"].items():
        getattr(es, name).update(value)
    for name, (counts, total) in snap["h"].items():
        h = getattr(es, name)
        h.counts, h.sum = list(counts), total
    for name, group in snap["hs"].items():
        for h, (counts, total) in zip(getattr(es, name), group):
            h.counts, h.sum = list(counts), total
    if snap["spec"] is not None:
        drafts, draft_tokens, accepted, per_pos = snap["spec"]
        es.spec = SpecDecodeCounts(len(per_pos))
        es.spec.drafts, es.spec.draft_tokens = drafts, draft_tokens
        es.spec.accepted_tokens, es.spec.accepted_per_pos = accepted, list(per_pos)
    if snap["stats"] is not None:
        es.last_stats_ts, raw = snap["stats"]
        es.last_stats = msgspec.Raw(raw)
    return es


# ---------------------------------------------------------------- service
def merge(a: dict, b: dict) -> dict:
    """Two snapshots of the whole frontend (see ``Metrics.snapshot``) as one."""
    engines = {}
    for idx in {*a["engines"], *b["engines"]}:
        ea, eb = a["engines"].get(idx), b["engines"].get(idx)
        engines[idx] = eb if ea is None else ea if eb is None else merge_engine(ea, eb)
    requests: dict[tuple, int] = {}  # (handler, method, status) -> count
    for *key, value in (*a["http_requests"], *b["http_requests"]):
        requests[tuple(key)] = requests.get(tuple(key), 0) + value
    return {
        "engines": engines,
        "http_requests": [[*key, value] for key, value in requests.items()],
        "rejected": {k: a["rejected"].get(k, 0) + b["rejected"].get(k, 0)
                     for k in {*a["rejected"], *b["rejected"]}},
        # (vLLM's multiprocess mode adds these timestamps up; the latest is what
        # the series means)
        "lora_info": {k: max(a["lora_info"].get(k, 0.0), b["lora_info"].get(k, 0.0))
                      for k in {*a["lora_info"], *b["lora_info"]}},
        **{k: a[k] + b[k] for k in SUMMED}}


# Numbers of a snapshot that are summed over processes (counters and gauges).
SUMMED = ("disconnects", "open_streams", "requests_in_flight", "choices_in_flight",
          "fanout_entries", "engine_aborts", "slow_consumer_aborts")


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

    def write(self, snapshot: dict) -> dict:
        """Store this worker's snapshot (its predecessor's counts included); returns it."""
        if self.base is not None:
            snapshot = merge(self.base, snapshot)
        tmp = self.path.with_suffix(".tmp")
        try:
            tmp.write_bytes(msgspec.msgpack.encode(snapshot))
            os.replace(tmp, self.path)
        except OSError as e:
            log.warning("cannot write the metrics snapshot %s: %s", self.path, e)
        return snapshot

    def service(self, own: dict) -> dict:
        """Every worker's latest snapshot, with ``own`` (fresh) for this one."""
        total = own
        for path in sorted(self.directory.glob("worker-*.msgpack")):
            if path != self.path:
                other = self._read(path)
                if other is not None:
                    total = merge(total, other)
        return total

    @staticmethod
    def _read(path: Path) -> dict | None:
        try:
            snap = msgspec.msgpack.decode(path.read_bytes())
        except (OSError, msgspec.DecodeError):
            return None
        snap["engines"] = {int(k): v for k, v in snap["engines"].items()}
        return snap
