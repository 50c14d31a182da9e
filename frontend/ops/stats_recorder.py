"""What the engine's outputs say about requests, added up per engine rank.

:class:`StatsRecorder` is the fan-out table's observer
(``fanout.TableObserver``): called once per engine message and once per
finished choice, it follows vLLM 0.32's counting rules
(``vllm/v1/metrics/stats.py``, ``loggers.py``), adding to each rank's
:class:`RankStats` (plain lists, in the slots the family table gives,
``vllm_metrics.py``). Nothing here touches prometheus_client: /metrics builds
the families from the stats when it is scraped.
"""

from __future__ import annotations

import logging
import math
import os
import time
from typing import TYPE_CHECKING, Callable

import msgspec

from frontend.ops.buckets import bucket_bounds
from frontend.ops.rank_stats import RankStats, SpecDecodeCounts
from frontend.ops.vllm_metrics import (
    CORRUPTED_REQUESTS,
    DECODE_TIME,
    E2E,
    EXTERNAL_PREFIX_CACHE_HITS,
    EXTERNAL_PREFIX_CACHE_QUERIES,
    FLOPS,
    GENERATION_LEN,
    GENERATION_TOKENS,
    INFERENCE_TIME,
    ITERATION_TOKENS,
    ITL,
    KV_BLOCK_IDLE,
    KV_BLOCK_LIFETIME,
    KV_BLOCK_REUSE_GAP,
    MAX_GENERATION_LEN,
    NUM_PREEMPTIONS,
    PARAMS_MAX_TOKENS,
    PARAMS_N,
    PREEMPTIONS,
    PREFILL_KV_COMPUTED,
    PREFILL_TIME,
    PREFIX_CACHE_HITS,
    PREFIX_CACHE_QUERIES,
    PROMPT_LEN,
    PROMPT_TOKENS,
    PROMPT_TOKENS_BY_SOURCE,
    PROMPT_TOKENS_CACHED,
    PROMPT_TOKENS_CACHED_BY_SOURCE,
    QUEUE_TIME,
    READ_BYTES,
    REQUEST_SUCCESS,
    TIME_PER_OUTPUT_TOKEN,
    TTFT,
    VLLM_FAMILIES,
    WRITE_BYTES,
)
from protocol import wire
from protocol.errors import ProtocolError

if TYPE_CHECKING:
    from frontend.fanout import Choice, Group

log = logging.getLogger("frontend.metrics")

# EngineCoreEventType
QUEUED, SCHEDULED, PREEMPTED = 1, 2, 3
NOTHING_COUNTED = wire.NOTHING_COUNTED
NAN = math.nan  # no previous message yet (never the same object as a timestamp)
CACHED_ON_DEVICE = PROMPT_TOKENS_CACHED_BY_SOURCE["device"]
PROMPT_COMPUTED = PROMPT_TOKENS_BY_SOURCE["local_compute"]
PROMPT_LOCAL_CACHE_HIT = PROMPT_TOKENS_BY_SOURCE["local_cache_hit"]
PROMPT_EXTERNAL_KV = PROMPT_TOKENS_BY_SOURCE["external_kv_transfer"]


def compute_nans_in_logits() -> bool:
    """vLLM's VLLM_COMPUTE_NANS_IN_LOGITS (or VLLM_RAISE_ON_LOGIT_NANS): with it,
    the engine counts NaNs in logits and the API server exports
    vllm:corrupted_requests."""
    return any(os.environ.get(name, "0").strip() not in ("", "0")
               for name in ("VLLM_COMPUTE_NANS_IN_LOGITS", "VLLM_RAISE_ON_LOGIT_NANS"))


def generated_tokens(choice: "Choice") -> int:
    """The tokens the engine generated for a choice, as vLLM counts them: with
    those of its last step past a matched stop string."""
    return len(choice.token_ids) + choice.num_dropped


class Parent:
    """The ``n`` choices of one prompt: vLLM observes ``n`` and their largest
    generation once, when the last of them finishes."""

    __slots__ = ("n", "remaining", "max_generated")

    def __init__(self, n: int) -> None:
        self.n = n
        self.remaining = n
        self.max_generated = 0


class RequestStats:
    """One engine request while it runs (vLLM's ``RequestStateStats``).

    ``*_ts`` are engine clock readings (``time.monotonic()`` in the engine):
    events and step timestamps. ``arrival`` and ``ttft`` are this process's."""

    __slots__ = ("arrival", "parent", "lora", "last_ts", "first_ts", "queued_ts",
                 "scheduled_ts", "num_preemptions", "ttft", "corrupted")

    def __init__(self, arrival: float, parent: Parent | None, lora: str | None = None) -> None:
        self.arrival = arrival
        self.parent = parent
        self.lora = lora  # the adapter's name (vllm:lora_requests_info)
        self.last_ts: float | None = None  # None until the first output
        self.first_ts = 0.0
        self.queued_ts = 0.0
        self.scheduled_ts = 0.0
        self.num_preemptions = 0
        self.ttft = 0.0
        self.corrupted = False


class StatsRecorder:
    """The fan-out table's observer (``fanout.TableObserver``).

    ``on_step`` sees each engine message before the table routes it; the
    finish of a choice (``on_choice_finished``) comes while it is routed, so
    the finishing output's timestamp is known by then.
    """

    def __init__(self, max_model_len: Callable[[], int], *, kv_cache_metrics: bool = False,
                 count_nans: bool = False,
                 bucket_overrides: dict[str, list[float]] | None = None) -> None:
        self._max_model_len = max_model_len
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
        self.tracer = None
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
    def on_submit(self, group: "Group") -> None:
        choices = group.choices
        if not choices:
            return
        n = len(choices) // (choices[-1].prompt_index + 1)
        arrival = group.arrival
        lora = group.lora.lora_name if group.lora is not None and self.lora_info else None
        requests = self._requests
        parents: dict[int, Parent] = {}
        for c in choices:
            parent = None
            if n > 1:
                parent = parents.get(c.prompt_index)
                if parent is None:
                    parent = parents[c.prompt_index] = Parent(n)
            requests[c.engine_id] = RequestStats(arrival, parent, lora)

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
        for out in outputs:
            rec = requests.get(out.request_id)
            if rec is None:
                continue  # finished or aborted here: vLLM ignores it too
            generated += len(out.new_token_ids)
            if out.events is not None:
                self._events(stats, rec, out.events)
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
                    computed += self._prefill(stats, ps)
                rec.ttft = time.monotonic() - rec.arrival
                hists[TTFT].observe(rec.ttft)
                rec.first_ts = ts
            else:
                hists[ITL].observe(ts - last)
            rec.last_ts = ts
        if same:
            hists[ITL].observe(ts - prev, same)
        stats.counters[GENERATION_TOKENS] += generated
        hists[ITERATION_TOKENS].observe(computed + generated)
        self._prev_ts[index] = ts
        if self.count_nans:
            for out in outputs:
                if out.num_nans_in_logits > 0:
                    rec = requests.get(out.request_id)
                    if rec is not None:
                        rec.corrupted = True

    def on_choice_finished(self, choice: "Choice") -> None:
        rec = self._requests.pop(choice.engine_id, None)
        if rec is not None and rec.lora is not None:
            self._lora_update(choice.engine_id, rec.lora, running=False, done=True)
        if rec is None or self._rank is None:
            return
        now = time.monotonic()
        self._finished(self._rank, rec, choice, now)
        if self.tracer is not None:
            try:
                self.tracer.finished(choice, rec, now)
            except Exception:  # tracing must never stop the engine reader
                log.exception("tracing %s failed", choice.engine_id)

    def on_slow_consumer(self, group: "Group") -> None:
        self.slow_consumer_aborts += 1

    def on_release(self, group: "Group") -> None:
        requests = self._requests
        for c in group.choices:
            rec = requests.pop(c.engine_id, None)
            if rec is not None and rec.lora is not None:
                self._lora_update(c.engine_id, rec.lora, running=False, done=True)

    # -------------------------------------------------------- per message
    def _count(self, stats: RankStats, raw: msgspec.Raw) -> None:
        """The counters of vLLM's ``PrometheusStatLogger.record`` for a
        message's scheduler stats."""
        try:
            ss = wire.decode_scheduler_stats(raw)
        except ProtocolError as e:
            if not self._bad_stats_logged:  # once: it would repeat every step
                self._bad_stats_logged = True
                log.error("ignoring the engine's scheduler stats: %s", e)
            return
        if ss is None:
            return
        c = stats.counters
        prefix = ss.prefix_cache_stats
        if prefix is not None:
            c[PREFIX_CACHE_QUERIES] += prefix.queries
            c[PREFIX_CACHE_HITS] += prefix.hits
            c[CACHED_ON_DEVICE] += prefix.hits
        external = ss.connector_prefix_cache_stats
        if external is not None:
            c[EXTERNAL_PREFIX_CACHE_QUERIES] += external.queries
            c[EXTERNAL_PREFIX_CACHE_HITS] += external.hits
            for tier, tokens in external.hits_by_source.items():
                slot = PROMPT_TOKENS_CACHED_BY_SOURCE.get(tier)
                if slot is not None:
                    c[slot] += tokens
        if ss.spec_decoding_stats is not None:
            self._spec_decoding(stats, ss.spec_decoding_stats)
        perf = ss.perf_stats
        if perf is not None:
            c[FLOPS] += perf.num_flops_per_gpu
            c[READ_BYTES] += perf.num_read_bytes_per_gpu
            c[WRITE_BYTES] += perf.num_write_bytes_per_gpu
        if self.kv_cache_metrics and ss.kv_cache_eviction_events:
            lifetime, idle, reuse = (stats.histograms[KV_BLOCK_LIFETIME],
                                     stats.histograms[KV_BLOCK_IDLE],
                                     stats.histograms[KV_BLOCK_REUSE_GAP])
            for event in ss.kv_cache_eviction_events:
                lifetime.observe(event.lifetime_seconds)
                idle.observe(event.idle_seconds)
                for gap in event.reuse_gaps_seconds:
                    reuse.observe(gap)

    @staticmethod
    def _spec_decoding(stats: RankStats, spec: wire.SpecDecodingStats) -> None:
        counts = stats.spec
        if counts is None:
            counts = stats.spec = SpecDecodeCounts(
                accepted_per_pos=[0] * spec.num_spec_tokens)
        counts.drafts += spec.num_drafts
        counts.draft_tokens += spec.num_draft_tokens
        counts.accepted_tokens += spec.num_accepted_tokens
        per_pos = counts.accepted_per_pos
        for pos, accepted in enumerate(spec.num_accepted_tokens_per_pos[:len(per_pos)]):
            per_pos[pos] += accepted

    @staticmethod
    def _prefill(stats: RankStats, ps: dict[str, int]) -> int:
        """A request's first output: its ``prefill_stats``; returns the
        prompt tokens computed (not cached)."""
        c = stats.counters
        computed = ps.get("num_computed_tokens", 0)
        c[PROMPT_TOKENS] += ps.get("num_prompt_tokens", 0)
        c[PROMPT_COMPUTED] += computed
        c[PROMPT_LOCAL_CACHE_HIT] += ps.get("num_local_cached_tokens", 0)
        c[PROMPT_EXTERNAL_KV] += ps.get("num_external_cached_tokens", 0)
        c[PROMPT_TOKENS_CACHED] += ps.get("num_cached_tokens", 0)
        return computed

    @staticmethod
    def _events(stats: RankStats, rec: RequestStats, events: list) -> None:
        for event in events:
            kind = event["type"]
            if kind == QUEUED:
                rec.queued_ts = event["timestamp"]  # the last one counts, as in vLLM
            elif kind == SCHEDULED:
                if not rec.scheduled_ts:  # the first one (later ones are resumptions)
                    rec.scheduled_ts = event["timestamp"]
            elif kind == PREEMPTED:
                stats.counters[PREEMPTIONS] += 1
                rec.num_preemptions += 1

    # -------------------------------------------------------- per request
    @staticmethod
    def _finished(stats: RankStats, rec: RequestStats, choice: "Choice", now: float) -> None:
        """vLLM's ``update_from_finished_request`` and what ``record`` does with it."""
        c, h = stats.counters, stats.histograms
        c[REQUEST_SUCCESS[choice.finish_reason]] += 1
        if rec.corrupted:
            c[CORRUPTED_REQUESTS] += 1
        first, last, scheduled = rec.first_ts, rec.last_ts, rec.scheduled_ts
        h[E2E].observe(now - rec.arrival)
        if scheduled:
            # Only with the engine's events (its log stats); without them
            # vLLM observes differences to 0.0, i.e. raw engine clock values.
            h[QUEUE_TIME].observe(scheduled - rec.queued_ts)
            h[PREFILL_TIME].observe(first - scheduled)
            h[INFERENCE_TIME].observe(last - scheduled)
        decode_time = last - first
        h[DECODE_TIME].observe(decode_time)
        h[NUM_PREEMPTIONS].observe(rec.num_preemptions)
        prompt_len = len(choice.prompt_token_ids)
        h[PREFILL_KV_COMPUTED].observe(prompt_len - max(choice.num_cached_tokens, 0))
        h[PROMPT_LEN].observe(prompt_len)
        generated = generated_tokens(choice)
        h[GENERATION_LEN].observe(generated)
        h[TIME_PER_OUTPUT_TOKEN].observe(decode_time / (generated - 1) if generated > 1 else 0)
        if choice.params.max_tokens:
            h[PARAMS_MAX_TOKENS].observe(choice.params.max_tokens)
        parent = rec.parent
        if parent is not None:
            parent.max_generated = max(parent.max_generated, generated)
            parent.remaining -= 1
            if parent.remaining:
                return
            generated = parent.max_generated
        h[MAX_GENERATION_LEN].observe(generated)
        h[PARAMS_N].observe(parent.n if parent is not None else 1)

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
