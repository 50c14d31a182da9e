"""What the engine's outputs say about requests, added up per engine rank.

:class:`StatsRecorder` is the fan-out table's observer
(``fanout.TableObserver``): called once per engine message and once per
finished choice, it keeps each running request's :class:`RequestStats` and
each rank's :class:`RankStats`, and applies vLLM 0.32's counting rules
(``counting.py``) to them. Nothing here touches prometheus_client: /metrics
builds the families from the stats when it is scraped.
"""

from __future__ import annotations

import logging
import math
import os
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

import msgspec

from frontend.ops.buckets import bucket_bounds
from frontend.ops.counting import (
    PREEMPTED,
    QUEUED,
    SCHEDULED,
    Parent,
    RequestStats,
    count_events,
    count_finished,
    count_prefill,
    count_scheduler_stats,
)
from frontend.ops.rank_stats import RankStats
from frontend.ops.vllm_metrics import GENERATION_TOKENS, ITERATION_TOKENS, ITL, TTFT, VLLM_FAMILIES
from protocol import wire
from protocol.errors import ProtocolError

if TYPE_CHECKING:
    from frontend.choices import Choice, Group
    from frontend.ops.tracing import RequestTracer

log = logging.getLogger("frontend.metrics")

NOTHING_COUNTED = wire.NOTHING_COUNTED
NAN = math.nan  # no previous message yet (never the same object as a timestamp)


def compute_nans_in_logits() -> bool:
    """vLLM's VLLM_COMPUTE_NANS_IN_LOGITS (or VLLM_RAISE_ON_LOGIT_NANS): with it,
    the engine counts NaNs in logits and the API server exports
    vllm:corrupted_requests."""
    return any(
        os.environ.get(name, "0").strip() not in ("", "0")
        for name in ("VLLM_COMPUTE_NANS_IN_LOGITS", "VLLM_RAISE_ON_LOGIT_NANS")
    )


class StatsRecorder:
    """The fan-out table's observer (``fanout.TableObserver``).

    ``on_step`` sees each engine message before the table routes it; the
    finish of a choice (``on_choice_finished``) comes while it is routed, so
    the finishing output's timestamp is known by then.
    """

    def __init__(
        self,
        max_model_len: Callable[[], int],
        *,
        kv_cache_metrics: bool = False,
        count_nans: bool = False,
        bucket_overrides: dict[str, list[float]] | None = None,
        data_parallel_size: int = 1,
    ) -> None:
        self._max_model_len = max_model_len
        # With one rank the link has checked every output's engine_index.
        self._several_ranks = data_parallel_size > 1
        self._bucket_overrides = bucket_overrides or {}
        self._bounds: dict[str, tuple[float, ...]] | None = None
        self.kv_cache_metrics = kv_cache_metrics
        self.count_nans = count_nans  # VLLM_COMPUTE_NANS_IN_LOGITS, as in vLLM
        self.ranks: dict[int, RankStats] = {}
        self.slow_consumer_aborts = 0
        # With LoRA on (the engine supports it): vLLM's LoRARequestStates, adapter
        # -> (waiting, running) engine ids, and lora_requests_info's series.
        self.lora_info: dict[str, float] | None = None
        self.max_loras = 0
        self._lora_requests: dict[str, tuple[set[str], set[str]]] = {}
        # Set by frontend/ops/tracing.py: told of every finished request.
        self.tracer: RequestTracer | None = None
        # engine request id -> its stats, from submit until it finishes or is released.
        self._requests: dict[str, RequestStats] = {}
        # The rank of the message being routed.
        self._rank: RankStats | None = None
        # Each rank's engine timestamp of its previous message with outputs.
        self._prev_ts: dict[int, float] = {}
        self._bad_stats_logged = False

    def rank(self, index: int) -> RankStats:
        """A rank's stats, created on first use (the engine has attached by
        then: request-token buckets need its max_model_len)."""
        stats = self.ranks.get(index)
        if stats is None:
            stats = self.ranks[index] = self.new_rank_stats()
        return stats

    def new_rank_stats(self) -> RankStats:
        if self._bounds is None:
            self._bounds = bucket_bounds(self._max_model_len(), self._bucket_overrides)
        return VLLM_FAMILIES.new_rank_stats(self._bounds)

    # -------------------------------------------------------- table hooks
    def on_submit(self, group: Group) -> None:
        choices = group.choices
        if not choices:
            return
        n = len(choices) // (choices[-1].prompt_index + 1)
        arrival = group.arrival
        lora = (
            group.lora.lora_name if group.lora is not None and self.lora_info is not None else None
        )
        requests = self._requests
        parents: dict[int, Parent] = {}
        for c in choices:
            parent = None
            if n > 1:
                parent = parents.get(c.prompt_index)
                if parent is None:
                    parent = parents[c.prompt_index] = Parent(n)
            requests[c.engine_id] = RequestStats(arrival, parent, lora, c.engine_index)

    def on_step(self, outs: wire.StepOutputs) -> None:
        index = outs.engine_index
        stats = self._rank = self.ranks.get(index) or self.rank(index)
        raw = outs.scheduler_stats
        if len(raw) > 1:  # present (nil is one byte)
            stats.last_stats = raw  # the gauges, read at scrape time
            stats.last_stats_ts = outs.timestamp
            if self.lora_info is not None:  # set on every stats, as vLLM's record does
                self.lora_info[",".join(self._lora_requests)] = time.time()
            if not bytes(raw).endswith(NOTHING_COUNTED):  # (most steps count nothing)
                self._count(stats, raw)
        outputs = outs.outputs
        if not outputs:
            return
        ts = outs.timestamp or time.monotonic()
        requests = self._requests
        hists = stats.histograms
        prev = self._prev_ts.get(index, NAN)
        same = generated = computed = 0
        several_ranks = self._several_ranks
        for out in outputs:
            rec = requests.get(out.request_id)
            if rec is None or several_ranks and rec.rank != index:
                continue  # finished or aborted here (vLLM ignores it too), or not its rank
            generated += len(out.new_token_ids)
            if out.events is not None:
                count_events(stats, rec, out.events)
                if rec.lora is not None:
                    self._lora_events(out.request_id, rec.lora, out.events)
            last = rec.last_ts
            if last is prev:
                # The common case: its previous output came in this rank's
                # previous message (the same float object). Counted here,
                # observed once below.
                same += 1
            elif last is None:  # its first output
                ps = out.prefill_stats
                if ps is not None:
                    computed += count_prefill(stats, ps)
                rec.ttft = time.monotonic() - rec.arrival
                hists[TTFT].observe(rec.ttft)
                rec.first_ts = ts
            else:
                hists[ITL].observe(ts - last)
            rec.last_ts = ts
        if same:
            hists[ITL].observe_many(ts - prev, same)
        stats.counters[GENERATION_TOKENS] += generated
        hists[ITERATION_TOKENS].observe(computed + generated)
        self._prev_ts[index] = ts
        if self.count_nans:
            for out in outputs:
                if out.num_nans_in_logits > 0:
                    rec = requests.get(out.request_id)
                    if rec is not None and rec.rank == index:
                        rec.corrupted = True

    def on_choice_finished(self, choice: Choice) -> None:
        rec = self._requests.pop(choice.engine_id, None)
        if rec is not None and rec.lora is not None:
            self._lora_update(choice.engine_id, rec.lora, running=False, done=True)
        if rec is None or self._rank is None:
            return
        now = time.monotonic()
        count_finished(self._rank, rec, choice, now)
        if self.tracer is not None:
            try:
                self.tracer.finished(choice, rec, now)
            except Exception:  # tracing must never stop the engine reader
                log.exception("tracing %s failed", choice.engine_id)

    def on_slow_consumer(self, group: Group) -> None:
        self.slow_consumer_aborts += 1

    def on_release(self, group: Group) -> None:
        requests = self._requests
        for c in group.choices:
            rec = requests.pop(c.engine_id, None)
            if rec is not None and rec.lora is not None:
                self._lora_update(c.engine_id, rec.lora, running=False, done=True)

    def _count(self, stats: RankStats, raw: msgspec.Raw) -> None:
        try:
            ss = wire.decode_scheduler_stats(raw)
        except ProtocolError as e:
            if not self._bad_stats_logged:  # once: it would repeat every step
                self._bad_stats_logged = True
                log.error("ignoring the engine's scheduler stats: %s", e)
            return
        if ss is not None:
            count_scheduler_stats(stats, ss, self.kv_cache_metrics)

    # -------------------------------------------------------- LoRA
    def enable_lora(self, max_loras: int) -> None:
        """The engine supports LoRA: vllm:lora_requests_info exists."""
        if self.lora_info is None:
            self.lora_info, self.max_loras = {}, max_loras

    def _lora_events(self, request_id: str, lora: str, events: list) -> None:
        """QUEUED and PREEMPTED: waiting; SCHEDULED: running (vLLM's LoRARequestStates)."""
        for event in events:
            kind = event["type"]
            if kind in (QUEUED, PREEMPTED, SCHEDULED):
                self._lora_update(request_id, lora, running=kind == SCHEDULED, done=False)

    def _lora_update(self, request_id: str, lora: str, *, running: bool, done: bool) -> None:
        waiting_ids, running_ids = self._lora_requests.setdefault(lora, (set(), set()))
        waiting_ids.discard(request_id)
        running_ids.discard(request_id)
        if not done:
            (running_ids if running else waiting_ids).add(request_id)
        if not (waiting_ids or running_ids):
            del self._lora_requests[lora]
