"""What the engine's outputs say about requests, added up per engine.

:class:`EngineMetrics` is the fan-out table's observer
(``fanout.TableObserver``): called once per engine message and once per
finished choice, it follows vLLM 0.32's counting rules
(``vllm/v1/metrics/stats.py``, ``loggers.py``) with plain ints and
preallocated bucket lists. Nothing here touches prometheus_client:
``frontend/ops/vllm_metrics.py`` turns :class:`EngineStats` into families
when /metrics is scraped.

Everything in an :class:`EngineStats` is a count or a sum (gauges aside), so
the stats of several frontend processes add up field by field.
"""

from __future__ import annotations

import logging
import math
import os
import time
from bisect import bisect_left
from typing import TYPE_CHECKING, Callable, Iterable

import msgspec

from protocol import wire
from protocol.errors import ProtocolError

if TYPE_CHECKING:
    from frontend.fanout import Choice, Group

log = logging.getLogger("frontend.metrics")

# vllm/v1/metrics/buckets.py (0.32)
REQUEST_LATENCY_BUCKETS = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0,
                           40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0)
TIME_TO_FIRST_TOKEN_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5,
                               0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0,
                               640.0, 2560.0)
INTER_TOKEN_LATENCY_BUCKETS = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5,
                               0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0)
ITERATION_TOKENS_BUCKETS = (1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384)
REQUEST_PARAMS_N_BUCKETS = (1, 2, 5, 10, 20)
REQUEST_NUM_PREEMPTIONS_BUCKETS = (1, 2, 3, 4, 5, 10, 20)
KV_CACHE_RESIDENCY_BUCKETS = (0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5,
                              10, 20, 30, 60, 120, 300, 600, 1200, 1800)
# vLLM's bucket families (--custom-histogram-buckets keys); "request_tokens"
# depends on max_model_len.
BUCKET_FAMILIES = {
    "request_latency": REQUEST_LATENCY_BUCKETS,
    "time_to_first_token": TIME_TO_FIRST_TOKEN_BUCKETS,
    "inter_token_latency": INTER_TOKEN_LATENCY_BUCKETS,
    "iteration_tokens": ITERATION_TOKENS_BUCKETS,
    "request_params_n": REQUEST_PARAMS_N_BUCKETS,
    "request_num_preemptions": REQUEST_NUM_PREEMPTIONS_BUCKETS,
    "kv_cache_residency": KV_CACHE_RESIDENCY_BUCKETS,
    "request_tokens": None,
}

FINISH_NAMES = wire.FINISH_REASON_NAMES
# vllm/v1/metrics/cache_hit_source.py, in its order.
CACHE_HIT_SOURCES = ("device", "host", "p2p", "disk", "external_unspecified")
# EngineCoreEventType
QUEUED, SCHEDULED, PREEMPTED = 1, 2, 3
# The gauges before the engine's first stats (or with --disable-log-stats on it).
NO_STATS = wire.SchedulerStats()
NOTHING_COUNTED = wire.NOTHING_COUNTED


def request_token_buckets(max_model_len: int) -> list[int]:
    """1, 2, 5, 10, 20, 50, ... up to ``max_model_len`` (vLLM's 1-2-5 series)."""
    bounds, exponent = [], 0
    while True:
        for mantissa in (1, 2, 5):
            value = mantissa * 10 ** exponent
            if value > max_model_len:
                return bounds
            bounds.append(value)
        exponent += 1


def check_bucket_overrides(value: object) -> dict[str, list[float]]:
    """``--custom-histogram-buckets``, checked as vLLM checks it (its messages)."""
    if not isinstance(value, dict):
        raise ValueError("custom_histogram_buckets: expected a JSON object mapping a "
                         "bucket family to a list of bounds")
    for family, bounds in value.items():
        if family not in BUCKET_FAMILIES:
            raise ValueError(f"custom_histogram_buckets: unknown bucket family {family!r}; "
                             f"known families: {sorted(BUCKET_FAMILIES)}")
        if not isinstance(bounds, list) or not bounds:
            raise ValueError(f"custom_histogram_buckets[{family!r}]: bucket list must not "
                             "be empty")
        for bound in bounds:
            if isinstance(bound, bool) or not isinstance(bound, (int, float)):
                raise ValueError(f"custom_histogram_buckets[{family!r}]: bound {bound!r} "
                                 "must be a number, not a boolean")
            if not math.isfinite(bound) or bound <= 0:
                raise ValueError(f"custom_histogram_buckets[{family!r}]: bound {bound!r} "
                                 "must be finite and greater than 0")
        if any(a >= b for a, b in zip(bounds, bounds[1:])):
            raise ValueError(f"custom_histogram_buckets[{family!r}]: bounds {bounds} must "
                             "be strictly increasing")
    return value


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


class Histogram:
    """Bucket counts in a plain list: ``observe`` is a bisect and two adds."""

    __slots__ = ("bounds", "counts", "sum")

    def __init__(self, bounds: Iterable[float]) -> None:
        self.bounds = tuple(float(b) for b in bounds)
        self.counts = [0] * (len(self.bounds) + 1)  # the last one is +Inf
        self.sum = 0.0

    def observe(self, value: float) -> None:
        self.counts[bisect_left(self.bounds, value)] += 1
        self.sum += value

    @property
    def count(self) -> int:
        return sum(self.counts)


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


class SpecDecodeCounts:
    """vLLM registers these only with a speculative config; a frontend learns
    of one from the first step that drafted."""

    __slots__ = ("drafts", "draft_tokens", "accepted_tokens", "accepted_per_pos")

    def __init__(self, num_spec_tokens: int) -> None:
        self.drafts = self.draft_tokens = self.accepted_tokens = 0
        self.accepted_per_pos = [0] * num_spec_tokens


class EngineStats:
    """One engine's counters, histograms and last scheduler state."""

    def __init__(self, buckets: dict[str, list[float]], kv_cache_metrics: bool) -> None:
        """``buckets``: every bucket family's bounds (vLLM's keys)."""
        # The gauges' source: the engine's last scheduler_stats, still msgpack,
        # and its step's engine timestamp (the latest wins across processes).
        self.last_stats: msgspec.Raw | None = None
        self.last_stats_ts = 0.0
        # Counters.
        self.prefix_cache_queries = 0
        self.prefix_cache_hits = 0
        self.external_prefix_cache_queries = 0
        self.external_prefix_cache_hits = 0
        self.cached_by_source = dict.fromkeys(CACHE_HIT_SOURCES, 0)
        self.preemptions = 0
        self.prompt_tokens = 0
        self.prompt_computed = 0
        self.prompt_local_cache_hit = 0
        self.prompt_external_kv = 0
        self.prompt_cached = 0
        self.generation_tokens = 0
        self.success = dict.fromkeys(FINISH_NAMES, 0)
        self.corrupted = 0
        self.flops = self.read_bytes = self.write_bytes = 0
        self.spec: SpecDecodeCounts | None = None
        # Histograms.
        latency, tokens = buckets["request_latency"], buckets["request_tokens"]
        self.iteration_tokens = Histogram(buckets["iteration_tokens"])
        self.ttft = Histogram(buckets["time_to_first_token"])
        self.itl = Histogram(buckets["inter_token_latency"])
        self.time_per_output_token = Histogram(buckets["inter_token_latency"])
        self.e2e = Histogram(latency)
        self.queue_time = Histogram(latency)
        self.inference_time = Histogram(latency)
        self.prefill_time = Histogram(latency)
        self.decode_time = Histogram(latency)
        self.num_preemptions = Histogram(buckets["request_num_preemptions"])
        self.prompt_len = Histogram(tokens)
        self.generation_len = Histogram(tokens)
        self.max_generation_len = Histogram(tokens)
        self.params_n = Histogram(buckets["request_params_n"])
        self.params_max_tokens = Histogram(tokens)
        self.prefill_kv_computed = Histogram(tokens)
        residency = buckets["kv_cache_residency"]
        self.kv_residency: tuple[Histogram, Histogram, Histogram] | None = (
            (Histogram(residency), Histogram(residency), Histogram(residency))
            if kv_cache_metrics else None)
        # The engine timestamp of this engine's previous message with outputs.
        self.prev_ts: float = math.nan

    @property
    def gauges(self) -> wire.SchedulerStats:
        """The engine's last scheduler state (decoded when /metrics reads it)."""
        try:
            ss = wire.decode_scheduler_stats(self.last_stats or msgspec.Raw())
        except ProtocolError:
            ss = None  # logged when it came, if it counted anything
        return ss or NO_STATS

    # ------------------------------------------------------------ per message
    def count(self, ss: wire.SchedulerStats) -> None:
        """The counters of vLLM's ``PrometheusStatLogger.record`` for a
        message's stats."""
        prefix = ss.prefix_cache_stats
        if prefix is not None:
            self.prefix_cache_queries += prefix.queries
            self.prefix_cache_hits += prefix.hits
            self.cached_by_source["device"] += prefix.hits
        external = ss.connector_prefix_cache_stats
        if external is not None:
            self.external_prefix_cache_queries += external.queries
            self.external_prefix_cache_hits += external.hits
            for tier, tokens in external.hits_by_source.items():
                if tier in self.cached_by_source:
                    self.cached_by_source[tier] += tokens
        spec = ss.spec_decoding_stats
        if spec is not None:
            self._spec_decoding(spec)
        perf = ss.perf_stats
        if perf is not None:
            self.flops += perf.num_flops_per_gpu
            self.read_bytes += perf.num_read_bytes_per_gpu
            self.write_bytes += perf.num_write_bytes_per_gpu
        if self.kv_residency is not None and ss.kv_cache_eviction_events:
            lifetime, idle, reuse = self.kv_residency
            for event in ss.kv_cache_eviction_events:
                lifetime.observe(event.lifetime_seconds)
                idle.observe(event.idle_seconds)
                for gap in event.reuse_gaps_seconds:
                    reuse.observe(gap)

    def _spec_decoding(self, spec: wire.SpecDecodingStats) -> None:
        counts = self.spec
        if counts is None:
            counts = self.spec = SpecDecodeCounts(spec.num_spec_tokens)
        counts.drafts += spec.num_drafts
        counts.draft_tokens += spec.num_draft_tokens
        counts.accepted_tokens += spec.num_accepted_tokens
        per_pos = counts.accepted_per_pos
        for pos, accepted in enumerate(spec.num_accepted_tokens_per_pos[:len(per_pos)]):
            per_pos[pos] += accepted

    def prefill(self, ps: dict[str, int]) -> int:
        """A request's first output: its ``prefill_stats``; returns the
        prompt tokens computed (not cached)."""
        computed = ps.get("num_computed_tokens", 0)
        self.prompt_tokens += ps.get("num_prompt_tokens", 0)
        self.prompt_computed += computed
        self.prompt_local_cache_hit += ps.get("num_local_cached_tokens", 0)
        self.prompt_external_kv += ps.get("num_external_cached_tokens", 0)
        self.prompt_cached += ps.get("num_cached_tokens", 0)
        return computed

    def events(self, rec: RequestStats, events: list) -> None:
        for event in events:
            kind = event["type"]
            if kind == QUEUED:
                rec.queued_ts = event["timestamp"]  # the last one counts, as in vLLM
            elif kind == SCHEDULED:
                if not rec.scheduled_ts:  # the first one (later ones are resumptions)
                    rec.scheduled_ts = event["timestamp"]
            elif kind == PREEMPTED:
                self.preemptions += 1
                rec.num_preemptions += 1

    # ------------------------------------------------------------ per request
    def finished(self, rec: RequestStats, choice: "Choice", now: float) -> None:
        """vLLM's ``update_from_finished_request`` and what ``record`` does with it.

        Up to fourteen observations per request, written out in line (one
        call per request instead of fourteen): ``h.counts[...] += 1; h.sum += v``
        is :meth:`Histogram.observe`."""
        b = bisect_left
        self.success[choice.finish_reason] += 1
        if rec.corrupted:
            self.corrupted += 1
        first, last, scheduled = rec.first_ts, rec.last_ts, rec.scheduled_ts
        v = now - rec.arrival
        h = self.e2e
        h.counts[b(h.bounds, v)] += 1
        h.sum += v
        if scheduled:
            # Only with the engine's events (its log stats); without them
            # vLLM observes differences to 0.0, i.e. raw engine clock values.
            v = scheduled - rec.queued_ts
            h = self.queue_time
            h.counts[b(h.bounds, v)] += 1
            h.sum += v
            v = first - scheduled
            h = self.prefill_time
            h.counts[b(h.bounds, v)] += 1
            h.sum += v
            v = last - scheduled
            h = self.inference_time
            h.counts[b(h.bounds, v)] += 1
            h.sum += v
        decode_time = last - first
        h = self.decode_time
        h.counts[b(h.bounds, decode_time)] += 1
        h.sum += decode_time
        v = rec.num_preemptions
        h = self.num_preemptions
        h.counts[b(h.bounds, v)] += 1
        h.sum += v
        prompt_len = len(choice.prompt_token_ids)
        v = prompt_len - max(choice.num_cached_tokens, 0)
        h = self.prefill_kv_computed
        h.counts[b(h.bounds, v)] += 1
        h.sum += v
        h = self.prompt_len
        h.counts[b(h.bounds, prompt_len)] += 1
        h.sum += prompt_len
        generated = generated_tokens(choice)
        h = self.generation_len
        h.counts[b(h.bounds, generated)] += 1
        h.sum += generated
        v = decode_time / (generated - 1) if generated > 1 else 0
        h = self.time_per_output_token
        h.counts[b(h.bounds, v)] += 1
        h.sum += v
        v = choice.params.max_tokens
        if v:
            h = self.params_max_tokens
            h.counts[b(h.bounds, v)] += 1
            h.sum += v
        parent = rec.parent
        if parent is not None:
            parent.max_generated = max(parent.max_generated, generated)
            parent.remaining -= 1
            if parent.remaining:
                return
            generated = parent.max_generated
        h = self.max_generation_len
        h.counts[b(h.bounds, generated)] += 1
        h.sum += generated
        v = parent.n if parent is not None else 1
        h = self.params_n
        h.counts[b(h.bounds, v)] += 1
        h.sum += v


class EngineMetrics:
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
        self._buckets: dict[str, list[float]] | None = None
        self.kv_cache_metrics = kv_cache_metrics
        self.count_nans = count_nans  # VLLM_COMPUTE_NANS_IN_LOGITS, as in vLLM
        self.engines: dict[int, EngineStats] = {}
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
        # The engine of the message being routed.
        self._engine: EngineStats | None = None
        self._bad_stats_logged = False

    def engine(self, index: int) -> EngineStats:
        """An engine's stats, created on first use (the engine has attached by
        then: request-token buckets need its max_model_len)."""
        stats = self.engines.get(index)
        if stats is None:
            stats = self.engines[index] = self.new_engine_stats()
        return stats

    def new_engine_stats(self) -> EngineStats:
        if self._buckets is None:
            defaults = {**BUCKET_FAMILIES,
                        "request_tokens": request_token_buckets(self._max_model_len())}
            self._buckets = {**defaults, **self._bucket_overrides}
        return EngineStats(self._buckets, self.kv_cache_metrics)

    # -------------------------------------------------------- table hooks
    def on_submit(self, group: "Group") -> None:
        choices = group.choices
        if not choices:
            return
        n = len(choices) // (choices[-1].prompt_index + 1)
        arrival = group.arrival
        lora = (group.lora.lora_name if group.lora is not None and self.lora_info is not None
                else None)
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
        es = self.engines.get(outs.engine_index) or self.engine(outs.engine_index)
        self._engine = es
        raw = outs.scheduler_stats
        if len(raw) > 1:  # present (nil is one byte)
            es.last_stats = raw  # the gauges, read at scrape time
            es.last_stats_ts = outs.timestamp
            if self.lora_info is not None:  # set on every stats, as vLLM's record does
                self.lora_info[",".join(self._lora_requests)] = time.time()
            if not bytes(raw).endswith(NOTHING_COUNTED):  # (most steps count nothing)
                self._count(es, raw)
        outputs = outs.outputs
        if not outputs:
            return
        ts = outs.timestamp or time.monotonic()
        requests = self._requests
        prev = es.prev_ts
        same = generated = computed = 0
        for out in outputs:
            rec = requests.get(out.request_id)
            if rec is None:
                continue  # finished or aborted here: vLLM ignores it too
            generated += len(out.new_token_ids)
            if out.events is not None:
                es.events(rec, out.events)
                if rec.lora is not None:
                    self._lora_events(out.request_id, rec.lora, out.events)
            last = rec.last_ts
            if last is prev:
                # The common case: its previous output came in this engine's
                # previous message (the same float object). Counted here,
                # bucketed once below.
                same += 1
            elif last is None:  # its first output
                ps = out.prefill_stats
                if ps is not None:
                    computed += es.prefill(ps)
                rec.ttft = time.monotonic() - rec.arrival
                es.ttft.observe(rec.ttft)
                rec.first_ts = ts
            else:
                es.itl.observe(ts - last)
            rec.last_ts = ts
        # Histogram.observe, in line (once per message).
        if same:
            gap = ts - prev
            h = es.itl
            h.counts[bisect_left(h.bounds, gap)] += same
            h.sum += gap * same
        es.generation_tokens += generated
        step_tokens = computed + generated
        h = es.iteration_tokens
        h.counts[bisect_left(h.bounds, step_tokens)] += 1
        h.sum += step_tokens
        es.prev_ts = ts
        if self.count_nans:
            for out in outputs:
                if out.num_nans_in_logits > 0:
                    rec = requests.get(out.request_id)
                    if rec is not None:
                        rec.corrupted = True

    def _count(self, es: EngineStats, raw: msgspec.Raw) -> None:
        try:
            ss = wire.decode_scheduler_stats(raw)
        except ProtocolError as e:
            if not self._bad_stats_logged:  # once: it would repeat every step
                self._bad_stats_logged = True
                log.error("ignoring the engine's scheduler stats: %s", e)
            return
        if ss is not None:
            es.count(ss)

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

    def on_choice_finished(self, choice: "Choice") -> None:
        rec = self._requests.pop(choice.engine_id, None)
        if rec is not None and rec.lora is not None:
            self._lora_update(choice.engine_id, rec.lora, running=False, done=True)
        if rec is None or self._engine is None:
            return
        now = time.monotonic()
        self._engine.finished(rec, choice, now)
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
