"""vLLM 0.32's ``vllm:*`` families: one table, from which /metrics is built.

Names, HELP texts, types, labels and bucket bounds are those of vLLM's
``PrometheusStatLogger`` (``vllm/v1/metrics/loggers.py``, ``perf.py``,
``spec_decode/metrics.py``), in its registration order. Every family has one
child per engine rank (``engine="0"``, ``"1"``, ...), and label-valued families
have all their children from the start, in vLLM's order (label value, then
rank).

:data:`VLLM_FAMILIES` is the table. A counter or histogram row takes its slot
in :class:`RankStats` (the constant it returns is what the counting rules add
to); a gauge row reads the engine's scheduler stats. Adding a family is one
row here, plus, for a counter or histogram, the line that observes it
(``counting.py``). The multi-process sum follows from the slots:
counters and histograms add up, gauges come from the latest scheduler stats
(``rank_stats.py``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING, Any

from prometheus_client.metrics_core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.samples import Sample
from prometheus_client.utils import floatToGoString

from frontend.ops.buckets import BUCKET_FAMILIES
from frontend.ops.rank_stats import Histogram, RankStats
from protocol import wire

if TYPE_CHECKING:
    from protocol.handshake import ReadyResponse

FINISH_NAMES = wire.FINISH_REASON_NAMES
# vllm/v1/metrics/cache_hit_source.py, in its order.
CACHE_HIT_SOURCES = ("device", "host", "p2p", "disk", "external_unspecified")
LABELS = ("model_name", "engine")
SLEEP_STATES = ("awake", "weights_offloaded", "discard_all")
ADMISSION_REASONS = ("max_num_queued_reqs", "max_num_queued_tokens")


def cache_config_labels(
    ready: ReadyResponse, num_engines: int, flags: Mapping[str, Any]
) -> dict[str, str]:
    """The labels of ``vllm:cache_config_info``: what this frontend knows.

    vLLM's API server labels it with its whole ``CacheConfig``: its own
    command line's engine settings (``gpu_memory_utilization``,
    ``cache_dtype``, ...), some rewritten for the host by vLLM's platform
    code, with what the engines' ready responses say patched in
    (``core_client._apply_ready_response``). Here a label comes from the
    engines (their ready responses) or from an engine flag the operator gave
    this frontend (``flags``: ``RecordedFlags.cache_config()``, ``str()`` of
    the value as vLLM's ``metrics_info`` writes it); the engines win where
    both say (they report what they use). A setting neither said is left
    out, never stated as a default the frontend did not see; so is a flag's
    ``auto``, which vLLM resolves (from the model, for the host) to a value
    only the engine knows.
    """
    labels = ready_response_labels(ready, num_engines)
    return labels | {
        name: str(value) for name, value in flags.items() if name not in labels and value != "auto"
    }


def ready_response_labels(ready: ReadyResponse, num_engines: int) -> dict[str, str]:
    """As vLLM's API server sets them from the ready responses, in its
    CacheConfig's order; ``num_gpu_blocks`` is the sum over the engines (all
    alike under data parallel)."""
    return {
        "block_size": str(ready.block_size),
        "mamba_block_size": str(ready.mamba_block_size),
        "num_gpu_blocks": str(ready.num_gpu_blocks * num_engines),
        "effective_attention_block_size": str(ready.effective_attention_block_size),
        "kv_cache_size_tokens": str(ready.kv_cache_size_tokens),
        "kv_cache_max_concurrency": str(ready.kv_cache_max_concurrency),
    }


class Exposition:
    """The families of one scrape, from every engine's stats."""

    def __init__(self, ranks: list[tuple[str, RankStats]], model_name: str, created: float) -> None:
        self.ranks = ranks  # (engine label, stats), in rank order
        self.model_name = model_name
        self.created = created
        self.cache_config: dict[str, str] | None = None
        self.count_nans = self.kv_cache_metrics = False
        self.lora_info: tuple[int, dict[str, float]] | None = None

    def families(
        self,
        *,
        cache_config: dict[str, str] | None,
        count_nans: bool,
        kv_cache_metrics: bool,
        lora_info: tuple[int, dict[str, float]] | None = None,
    ) -> Iterator[Metric]:
        """``lora_info``: with LoRA on, the engine's max_loras and every adapter
        list seen with the time it was last seen (``StatsRecorder.lora_info``)."""
        self.cache_config, self.count_nans = cache_config, count_nans
        self.kv_cache_metrics, self.lora_info = kv_cache_metrics, lora_info
        for row in VLLM_FAMILIES.rows:
            if row.when is None or row.when(self):
                yield from row.render(self)

    @cached_property
    def gauges(self) -> list[wire.SchedulerStats]:
        """Each rank's last scheduler state, decoded once per scrape."""
        return [stats.gauges for _, stats in self.ranks]


# ---------------------------------------------------------------- rows
Condition = Callable[[Exposition], bool]


def _extra_labels(label: str | None, values: tuple[str, ...]) -> list[tuple[str, ...]]:
    return [()] if label is None else [(value,) for value in values]


@dataclass(frozen=True)
class Counter:
    """A counter per rank, optionally by one more label: the rank's counter
    ``slot + i`` holds label value ``values[i]``."""

    name: str
    help: str
    slot: int
    label: str | None = None
    values: tuple[str, ...] = ()
    when: Condition | None = None

    def render(self, x: Exposition) -> Iterator[Metric]:
        c = CounterMetricFamily(
            self.name, self.help, labels=[*LABELS, self.label] if self.label else LABELS
        )
        for i, extra in enumerate(_extra_labels(self.label, self.values)):
            for label, stats in x.ranks:
                c.add_metric(
                    [x.model_name, label, *extra], stats.counters[self.slot + i], created=x.created
                )
        yield c


@dataclass(frozen=True)
class Gauge:
    """A gauge per rank read from its last scheduler stats, optionally by one
    more label (one reader per label value)."""

    name: str
    help: str
    reads: tuple[Callable[[wire.SchedulerStats], float], ...]
    label: str | None = None
    values: tuple[str, ...] = ()
    when: Condition | None = None

    def render(self, x: Exposition) -> Iterator[Metric]:
        g = GaugeMetricFamily(
            self.name, self.help, labels=[*LABELS, self.label] if self.label else LABELS
        )
        for read, extra in zip(self.reads, _extra_labels(self.label, self.values)):
            for (label, _), ss in zip(x.ranks, x.gauges):
                g.add_metric([x.model_name, label, *extra], read(ss))
        yield g


@dataclass(frozen=True)
class HistogramRow:
    """A histogram per rank: the rank's histogram ``slot``, with the bounds of
    vLLM's bucket family ``buckets`` (``buckets.py``)."""

    name: str
    help: str
    slot: int
    buckets: str
    when: Condition | None = None

    def render(self, x: Exposition) -> Iterator[Metric]:
        fam = HistogramMetricFamily(self.name, self.help, labels=LABELS)
        for label, stats in x.ranks:
            h = stats.histograms[self.slot]
            cumulative, buckets = 0, []
            for bound, n in zip(h.bounds, h.counts):
                cumulative += n
                buckets.append((floatToGoString(bound), cumulative))
            buckets.append(("+Inf", cumulative + h.counts[-1]))
            fam.add_metric([x.model_name, label], buckets, h.sum)
            fam.samples.append(
                Sample(
                    self.name + "_created", {"model_name": x.model_name, "engine": label}, x.created
                )
            )
        yield fam


@dataclass(frozen=True)
class Custom:
    """Families of their own shape (not one child per rank)."""

    render: Callable[[Exposition], Iterator[Metric]]
    when: Condition | None = None


class FamilyTable:
    """vLLM's families in registration order, and the slots of their data."""

    def __init__(self) -> None:
        self.rows: list[Counter | Gauge | HistogramRow | Custom] = []
        self.counter_slots = 0
        self.histogram_buckets: list[str] = []  # the bucket family of each histogram slot

    def counter(self, name: str, help: str, when: Condition | None = None) -> int:
        """Returns the counter's slot in ``RankStats.counters``."""
        self.rows.append(Counter(name, help, self.counter_slots, when=when))
        self.counter_slots += 1
        return self.counter_slots - 1

    def labelled_counter(
        self, name: str, help: str, label: str, values: tuple[str, ...]
    ) -> dict[str, int]:
        """Returns each label value's slot in ``RankStats.counters``."""
        first = self.counter_slots
        self.rows.append(Counter(name, help, first, label, values))
        self.counter_slots += len(values)
        return {value: first + i for i, value in enumerate(values)}

    def gauge(self, name: str, help: str, read: Callable[[wire.SchedulerStats], float]) -> None:
        self.rows.append(Gauge(name, help, (read,)))

    def labelled_gauge(
        self,
        name: str,
        help: str,
        label: str,
        reads: dict[str, Callable[[wire.SchedulerStats], float]],
    ) -> None:
        self.rows.append(Gauge(name, help, tuple(reads.values()), label, tuple(reads)))

    def histogram(self, name: str, help: str, buckets: str, when: Condition | None = None) -> int:
        """Returns the histogram's slot in ``RankStats.histograms``; ``buckets``:
        one of vLLM's bucket families (``--custom-histogram-buckets`` keys)."""
        if buckets not in BUCKET_FAMILIES:
            raise ValueError(f"{name}: unknown bucket family {buckets!r}")
        self.rows.append(HistogramRow(name, help, len(self.histogram_buckets), buckets, when))
        self.histogram_buckets.append(buckets)
        return len(self.histogram_buckets) - 1

    def custom(
        self, render: Callable[[Exposition], Iterator[Metric]], when: Condition | None = None
    ) -> None:
        self.rows.append(Custom(render, when))

    def new_rank_stats(self, bounds: dict[str, tuple[float, ...]]) -> RankStats:
        """A rank's stats at zero; ``bounds``: every bucket family's bounds."""
        return RankStats(
            [0] * self.counter_slots,
            [Histogram.empty(bounds[family]) for family in self.histogram_buckets],
        )


# ------------------------------------------------------ families of their own shape
def spec_decode(x: Exposition) -> Iterator[Metric]:
    """Once any engine reported a drafting step (vLLM: from start-up when a
    speculative config is set)."""
    spec_ranks = [(label, stats.spec) for label, stats in x.ranks if stats.spec is not None]
    if not spec_ranks:
        return
    for name, doc, field in (
        ("vllm:spec_decode_num_drafts", "Number of spec decoding drafts.", "drafts"),
        ("vllm:spec_decode_num_draft_tokens", "Number of draft tokens.", "draft_tokens"),
        ("vllm:spec_decode_num_accepted_tokens", "Number of accepted tokens.", "accepted_tokens"),
    ):
        c = CounterMetricFamily(name, doc, labels=LABELS)
        for label, spec in spec_ranks:
            c.add_metric([x.model_name, label], getattr(spec, field), created=x.created)
        yield c
    c = CounterMetricFamily(
        "vllm:spec_decode_num_accepted_tokens_per_pos",
        "Accepted tokens per draft position.",
        labels=[*LABELS, "position"],
    )
    for label, spec in spec_ranks:
        for pos, accepted in enumerate(spec.accepted_per_pos):
            c.add_metric([x.model_name, label, str(pos)], accepted, created=x.created)
    yield c


def admission_rejections(x: Exposition) -> Iterator[Metric]:
    """vLLM's --max-num-queued-reqs/-tokens (HTTP 503) are not flags of this
    frontend: the family is there, at 0, as on a vLLM server without them."""
    c = CounterMetricFamily(
        "vllm:admission_rejections",
        "Number of admission attempts rejected by a queue limit, by reason.",
        labels=["model_name", "reason"],
    )
    for reason in ADMISSION_REASONS:
        c.add_metric([x.model_name, reason], 0, created=x.created)
    yield c


def lora_requests_info(x: Exposition) -> Iterator[Metric]:
    """vLLM's labels: both lists hold every adapter with a request waiting or
    running; each list ever seen stays a series, valued when last seen."""
    assert x.lora_info is not None
    max_lora, seen = x.lora_info
    g = GaugeMetricFamily(
        "vllm:lora_requests_info",
        "Running stats on lora requests.",
        labels=["max_lora", "waiting_lora_adapters", "running_lora_adapters"],
    )
    for adapters, when in seen.items():
        g.add_metric([str(max_lora), adapters, adapters], when)
    yield g


def cache_config_info(x: Exposition) -> Iterator[Metric]:
    cache_config = x.cache_config
    assert cache_config is not None
    g = GaugeMetricFamily(
        "vllm:cache_config_info",
        "Information of the LLMEngine CacheConfig",
        labels=[*cache_config, "engine"],
    )
    for label, _ in x.ranks:
        g.add_metric([*cache_config.values(), label], 1)
    yield g


# ---------------------------------------------------------------- the table
VLLM_FAMILIES = t = FamilyTable()
FLOPS = t.counter(
    "vllm:estimated_flops_per_gpu_total",
    "Estimated number of floating point "
    "operations per GPU (for Model Flops Utilization calculations).",
)
READ_BYTES = t.counter(
    "vllm:estimated_read_bytes_per_gpu_total",
    "Estimated number of bytes "
    "read from memory per GPU (for Model Flops Utilization calculations).",
)
WRITE_BYTES = t.counter(
    "vllm:estimated_write_bytes_per_gpu_total",
    "Estimated number of "
    "bytes written to memory per GPU (for Model Flops Utilization "
    "calculations).",
)
t.custom(spec_decode)
t.gauge(
    "vllm:num_requests_running",
    "Number of requests in model execution batches.",
    lambda ss: ss.num_running_reqs,
)
t.gauge(
    "vllm:num_requests_waiting",
    "Number of requests waiting to be processed.",
    lambda ss: ss.num_waiting_reqs + ss.num_skipped_waiting_reqs,
)
t.labelled_gauge(
    "vllm:num_requests_waiting_by_reason",
    "Number of waiting requests by reason. Reason labels: 'capacity' = waiting for "
    "scheduling capacity; 'deferred' = deferred by transient constraints (LoRA "
    "budget, KV transfer, blocked status). Sum of all reasons equals "
    "vllm:num_requests_waiting.",
    "reason",
    {
        "capacity": lambda ss: ss.num_waiting_reqs,
        "deferred": lambda ss: ss.num_skipped_waiting_reqs,
    },
)
t.labelled_gauge(
    "vllm:engine_sleep_state",
    "Engine sleep state; awake = 0 means engine is sleeping; awake = 1 means engine "
    "is awake; weights_offloaded = 1 means sleep level 1; discard_all = 1 means "
    "sleep level 2.",
    "sleep_state",
    # This frontend never puts an engine to sleep.
    {state: (lambda ss: 1) if state == "awake" else (lambda ss: 0) for state in SLEEP_STATES},
)
t.gauge(
    "vllm:kv_cache_usage_perc",
    "KV-cache usage. 1 means 100 percent usage.",
    lambda ss: ss.kv_cache_usage,
)
CORRUPTED_REQUESTS = t.counter(
    "vllm:corrupted_requests",
    "Corrupted requests, in terms of total number of requests with NaNs in logits.",
    when=lambda x: x.count_nans,
)
PREFIX_CACHE_QUERIES = t.counter(
    "vllm:prefix_cache_queries", "Prefix cache queries, in terms of number of queried tokens."
)
PREFIX_CACHE_HITS = t.counter(
    "vllm:prefix_cache_hits", "Prefix cache hits, in terms of number of cached tokens."
)
EXTERNAL_PREFIX_CACHE_QUERIES = t.counter(
    "vllm:external_prefix_cache_queries",
    "External prefix cache queries from KV connector "
    "cross-instance cache sharing, in terms of number of queried tokens.",
)
EXTERNAL_PREFIX_CACHE_HITS = t.counter(
    "vllm:external_prefix_cache_hits",
    "External prefix cache hits from KV connector "
    "cross-instance cache sharing, in terms of number of cached tokens.",
)
# No multi-modal inputs here: vLLM's text-only servers show these at 0 too.
t.counter(
    "vllm:mm_cache_queries", "Multi-modal cache queries, in terms of number of queried items."
)
t.counter("vllm:mm_cache_hits", "Multi-modal cache hits, in terms of number of cached items.")
PREEMPTIONS = t.counter("vllm:num_preemptions", "Cumulative number of preemption from the engine.")
PROMPT_TOKENS = t.counter("vllm:prompt_tokens", "Number of prefill tokens processed.")
PROMPT_TOKENS_BY_SOURCE = t.labelled_counter(
    "vllm:prompt_tokens_by_source",
    "Number of prompt tokens by source.",
    "source",
    ("local_compute", "local_cache_hit", "external_kv_transfer"),
)
PROMPT_TOKENS_CACHED = t.counter(
    "vllm:prompt_tokens_cached", "Number of cached prompt tokens (local + external)."
)
PROMPT_TOKENS_CACHED_BY_SOURCE = t.labelled_counter(
    "vllm:prompt_tokens_cached_by_source",
    "Prefix-cache hit tokens by the cache tier that supplied them: device (local "
    "HBM), host (offloaded to DRAM), disk, p2p (transferred from another vLLM "
    "instance) or external_unspecified. Counted at admission; sums to "
    "vllm:prefix_cache_hits + vllm:external_prefix_cache_hits.",
    "source",
    CACHE_HIT_SOURCES,
)
GENERATION_TOKENS = t.counter("vllm:generation_tokens", "Number of generation tokens processed.")
REQUEST_SUCCESS = t.labelled_counter(
    "vllm:request_success",
    "Count of successfully processed requests.",
    "finished_reason",
    FINISH_NAMES,
)
t.custom(admission_rejections)
PROMPT_LEN = t.histogram(
    "vllm:request_prompt_tokens", "Number of prefill tokens processed.", "request_tokens"
)
GENERATION_LEN = t.histogram(
    "vllm:request_generation_tokens", "Number of generation tokens processed.", "request_tokens"
)
ITERATION_TOKENS = t.histogram(
    "vllm:iteration_tokens_total",
    "Histogram of number of tokens per engine_step.",
    "iteration_tokens",
)
MAX_GENERATION_LEN = t.histogram(
    "vllm:request_max_num_generation_tokens",
    "Histogram of maximum number of requested generation tokens.",
    "request_tokens",
)
PARAMS_N = t.histogram(
    "vllm:request_params_n", "Histogram of the n request parameter.", "request_params_n"
)
PARAMS_MAX_TOKENS = t.histogram(
    "vllm:request_params_max_tokens",
    "Histogram of the max_tokens request parameter.",
    "request_tokens",
)
TTFT = t.histogram(
    "vllm:time_to_first_token_seconds",
    "Histogram of time to first token in seconds.",
    "time_to_first_token",
)
ITL = t.histogram(
    "vllm:inter_token_latency_seconds",
    "Histogram of inter-token latency in seconds.",
    "inter_token_latency",
)
TIME_PER_OUTPUT_TOKEN = t.histogram(
    "vllm:request_time_per_output_token_seconds",
    "Histogram of time_per_output_token_seconds per request.",
    "inter_token_latency",
)
E2E = t.histogram(
    "vllm:e2e_request_latency_seconds",
    "Histogram of e2e request latency in seconds.",
    "request_latency",
)
QUEUE_TIME = t.histogram(
    "vllm:request_queue_time_seconds",
    "Histogram of time spent in WAITING phase for request.",
    "request_latency",
)
INFERENCE_TIME = t.histogram(
    "vllm:request_inference_time_seconds",
    "Histogram of time spent in RUNNING phase for request.",
    "request_latency",
)
PREFILL_TIME = t.histogram(
    "vllm:request_prefill_time_seconds",
    "Histogram of time spent in PREFILL phase for request.",
    "request_latency",
)
DECODE_TIME = t.histogram(
    "vllm:request_decode_time_seconds",
    "Histogram of time spent in DECODE phase for request.",
    "request_latency",
)
NUM_PREEMPTIONS = t.histogram(
    "vllm:request_num_preemptions",
    "Histogram of the number of times a request was preempted.",
    "request_num_preemptions",
)
PREFILL_KV_COMPUTED = t.histogram(
    "vllm:request_prefill_kv_computed_tokens",
    "Histogram of new KV tokens computed during prefill (excluding cached tokens).",
    "request_tokens",
)
_SAMPLED = " Sampled metrics (controlled by --kv-cache-metrics-sample)."
KV_BLOCK_LIFETIME = t.histogram(
    "vllm:kv_block_lifetime_seconds",
    "Histogram of KV cache block lifetime from allocation to eviction." + _SAMPLED,
    "kv_cache_residency",
    when=lambda x: x.kv_cache_metrics,
)
KV_BLOCK_IDLE = t.histogram(
    "vllm:kv_block_idle_before_evict_seconds",
    "Histogram of idle time before KV cache block eviction." + _SAMPLED,
    "kv_cache_residency",
    when=lambda x: x.kv_cache_metrics,
)
KV_BLOCK_REUSE_GAP = t.histogram(
    "vllm:kv_block_reuse_gap_seconds",
    "Histogram of time gaps "
    "between consecutive KV cache block accesses. Only the most "
    "recent accesses are recorded (ring buffer)." + _SAMPLED,
    "kv_cache_residency",
    when=lambda x: x.kv_cache_metrics,
)
t.custom(lora_requests_info, when=lambda x: x.lora_info is not None)
t.custom(cache_config_info, when=lambda x: x.cache_config is not None)
del t
