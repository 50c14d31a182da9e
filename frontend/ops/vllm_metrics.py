"""vLLM 0.32's ``vllm:*`` families, built from :class:`EngineStats` at scrape time.

Names, HELP texts, types, labels and bucket bounds are those of vLLM's
``PrometheusStatLogger`` (``vllm/v1/metrics/loggers.py``, ``perf.py``,
``spec_decode/metrics.py``), in its registration order. Every family has one
child per engine (``engine="0"``, ``"1"``, ...), and label-valued families have
all their children from the start, as in vLLM.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable, Iterator

from prometheus_client.metrics_core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.samples import Sample
from prometheus_client.utils import floatToGoString

from frontend.ops.stats import CACHE_HIT_SOURCES, FINISH_NAMES, EngineStats, Histogram

if TYPE_CHECKING:
    from protocol.handshake import ReadyResponse

LABELS = ("model_name", "engine")
SLEEP_STATES = ("awake", "weights_offloaded", "discard_all")
ADMISSION_REASONS = ("max_num_queued_reqs", "max_num_queued_tokens")


def cache_config_labels(ready: "ReadyResponse", num_engines: int) -> dict[str, str]:
    """The labels of ``vllm:cache_config_info`` that this frontend knows.

    vLLM's API server labels it with its whole ``CacheConfig``: the engine
    settings from its own command line (``gpu_memory_utilization``,
    ``cache_dtype``, ...), some rewritten for the host by vLLM's platform
    code, and what it patches in from the engines' ready responses
    (``core_client._apply_ready_response``). Only the latter reach this
    frontend; a label it was not told is left out rather than guessed.
    Another source of labels (engine flags given to the frontend) merges here.
    """
    return ready_response_labels(ready, num_engines)


def ready_response_labels(ready: "ReadyResponse", num_engines: int) -> dict[str, str]:
    """As vLLM's API server sets them from the ready responses, in its
    CacheConfig's order; ``num_gpu_blocks`` is the sum over the engines (all
    alike under data parallel)."""
    return {"block_size": str(ready.block_size),
            "mamba_block_size": str(ready.mamba_block_size),
            "num_gpu_blocks": str(ready.num_gpu_blocks * num_engines),
            "effective_attention_block_size": str(ready.effective_attention_block_size),
            "kv_cache_size_tokens": str(ready.kv_cache_size_tokens),
            "kv_cache_max_concurrency": str(ready.kv_cache_max_concurrency)}


class Exposition:
    """The families of one scrape, from every engine's stats."""

    def __init__(self, engines: list[tuple[str, EngineStats]], model_name: str,
                 created: float) -> None:
        self.engines = engines  # (engine label, stats), in engine order
        self.model_name = model_name
        self.created = created

    # ------------------------------------------------------------ helpers
    def gauge(self, name: str, doc: str, value: Callable[[str], float]) -> Metric:
        """One child per engine; ``value`` gets the engine's label."""
        g = GaugeMetricFamily(name, doc, labels=LABELS)
        for label, _ in self.engines:
            g.add_metric([self.model_name, label], value(label))
        return g

    def counter(self, name: str, doc: str, value: Callable[[EngineStats], float]) -> Metric:
        c = CounterMetricFamily(name, doc, labels=LABELS)
        for label, es in self.engines:
            c.add_metric([self.model_name, label], value(es), created=self.created)
        return c

    def labelled_counter(self, name: str, doc: str, label_name: str,
                         values: dict[str, Callable[[EngineStats], float]]) -> Metric:
        c = CounterMetricFamily(name, doc, labels=[*LABELS, label_name])
        for label, es in self.engines:
            for value_label, value in values.items():
                c.add_metric([self.model_name, label, value_label], value(es),
                             created=self.created)
        return c

    def histogram(self, name: str, doc: str, hist: Callable[[EngineStats], Histogram]
                  ) -> Metric:
        fam = HistogramMetricFamily(name, doc, labels=LABELS)
        for label, es in self.engines:
            h = hist(es)
            cumulative, buckets = 0, []
            for bound, n in zip(h.bounds, h.counts):
                cumulative += n
                buckets.append((floatToGoString(bound), cumulative))
            buckets.append(("+Inf", cumulative + h.counts[-1]))
            fam.add_metric([self.model_name, label], buckets, h.sum)
            fam.samples.append(Sample(name + "_created",
                                      {"model_name": self.model_name, "engine": label},
                                      self.created))
        return fam

    # ------------------------------------------------------------ families
    def families(self, *, cache_config: dict[str, str] | None, count_nans: bool,
                 kv_cache_metrics: bool,
                 lora_info: tuple[int, dict[str, float]] | None = None) -> Iterator[Metric]:
        """``lora_info``: with LoRA on, the engine's max_loras and every adapter
        list seen with the time it was last seen (``EngineMetrics.lora_info``)."""
        yield self.counter("vllm:estimated_flops_per_gpu_total",
                           "Estimated number of floating point operations per GPU "
                           "(for Model Flops Utilization calculations).", lambda es: es.flops)
        yield self.counter("vllm:estimated_read_bytes_per_gpu_total",
                           "Estimated number of bytes read from memory per GPU "
                           "(for Model Flops Utilization calculations).",
                           lambda es: es.read_bytes)
        yield self.counter("vllm:estimated_write_bytes_per_gpu_total",
                           "Estimated number of bytes written to memory per GPU "
                           "(for Model Flops Utilization calculations).",
                           lambda es: es.write_bytes)
        yield from self.spec_decode()
        gauges = {label: es.gauges for label, es in self.engines}
        yield self.gauge("vllm:num_requests_running",
                         "Number of requests in model execution batches.",
                         lambda label: gauges[label].num_running_reqs)
        yield self.gauge("vllm:num_requests_waiting",
                         "Number of requests waiting to be processed.",
                         lambda label: gauges[label].num_waiting_reqs
                         + gauges[label].num_skipped_waiting_reqs)
        g = GaugeMetricFamily(
            "vllm:num_requests_waiting_by_reason",
            "Number of waiting requests by reason. Reason labels: 'capacity' = waiting for "
            "scheduling capacity; 'deferred' = deferred by transient constraints (LoRA "
            "budget, KV transfer, blocked status). Sum of all reasons equals "
            "vllm:num_requests_waiting.", labels=[*LABELS, "reason"])
        for label, _ in self.engines:
            g.add_metric([self.model_name, label, "capacity"], gauges[label].num_waiting_reqs)
        for label, _ in self.engines:
            g.add_metric([self.model_name, label, "deferred"],
                         gauges[label].num_skipped_waiting_reqs)
        yield g
        g = GaugeMetricFamily(
            "vllm:engine_sleep_state",
            "Engine sleep state; awake = 0 means engine is sleeping; awake = 1 means engine "
            "is awake; weights_offloaded = 1 means sleep level 1; discard_all = 1 means "
            "sleep level 2.", labels=[*LABELS, "sleep_state"])
        for state in SLEEP_STATES:
            for label, _ in self.engines:
                # This frontend never puts an engine to sleep.
                g.add_metric([self.model_name, label, state], 1 if state == "awake" else 0)
        yield g
        yield self.gauge("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent "
                         "usage.", lambda label: gauges[label].kv_cache_usage)
        if count_nans:
            yield self.counter("vllm:corrupted_requests", "Corrupted requests, in terms of "
                               "total number of requests with NaNs in logits.",
                               lambda es: es.corrupted)
        yield self.counter("vllm:prefix_cache_queries", "Prefix cache queries, in terms of "
                           "number of queried tokens.", lambda es: es.prefix_cache_queries)
        yield self.counter("vllm:prefix_cache_hits", "Prefix cache hits, in terms of number "
                           "of cached tokens.", lambda es: es.prefix_cache_hits)
        yield self.counter("vllm:external_prefix_cache_queries",
                           "External prefix cache queries from KV connector cross-instance "
                           "cache sharing, in terms of number of queried tokens.",
                           lambda es: es.external_prefix_cache_queries)
        yield self.counter("vllm:external_prefix_cache_hits",
                           "External prefix cache hits from KV connector cross-instance "
                           "cache sharing, in terms of number of cached tokens.",
                           lambda es: es.external_prefix_cache_hits)
        # No multi-modal inputs here: vLLM's text-only servers show these at 0 too.
        yield self.counter("vllm:mm_cache_queries", "Multi-modal cache queries, in terms of "
                           "number of queried items.", lambda es: 0)
        yield self.counter("vllm:mm_cache_hits", "Multi-modal cache hits, in terms of "
                           "number of cached items.", lambda es: 0)
        yield self.counter("vllm:num_preemptions", "Cumulative number of preemption from "
                           "the engine.", lambda es: es.preemptions)
        yield self.counter("vllm:prompt_tokens", "Number of prefill tokens processed.",
                           lambda es: es.prompt_tokens)
        yield self.labelled_counter(
            "vllm:prompt_tokens_by_source", "Number of prompt tokens by source.", "source",
            {"local_compute": lambda es: es.prompt_computed,
             "local_cache_hit": lambda es: es.prompt_local_cache_hit,
             "external_kv_transfer": lambda es: es.prompt_external_kv})
        yield self.counter("vllm:prompt_tokens_cached", "Number of cached prompt tokens "
                           "(local + external).", lambda es: es.prompt_cached)
        c = CounterMetricFamily(
            "vllm:prompt_tokens_cached_by_source",
            "Prefix-cache hit tokens by the cache tier that supplied them: device (local "
            "HBM), host (offloaded to DRAM), disk, p2p (transferred from another vLLM "
            "instance) or external_unspecified. Counted at admission; sums to "
            "vllm:prefix_cache_hits + vllm:external_prefix_cache_hits.",
            labels=[*LABELS, "source"])
        for source in CACHE_HIT_SOURCES:
            for label, es in self.engines:
                c.add_metric([self.model_name, label, source], es.cached_by_source[source],
                             created=self.created)
        yield c
        yield self.counter("vllm:generation_tokens", "Number of generation tokens "
                           "processed.", lambda es: es.generation_tokens)
        c = CounterMetricFamily("vllm:request_success", "Count of successfully processed "
                                "requests.", labels=[*LABELS, "finished_reason"])
        for reason in FINISH_NAMES:
            for label, es in self.engines:
                c.add_metric([self.model_name, label, reason], es.success[reason],
                             created=self.created)
        yield c
        # vLLM's --max-num-queued-reqs/-tokens (HTTP 503) are not flags of this
        # frontend: the family is there, at 0, as on a vLLM server without them.
        c = CounterMetricFamily("vllm:admission_rejections", "Number of admission attempts "
                                "rejected by a queue limit, by reason.",
                                labels=["model_name", "reason"])
        for reason in ADMISSION_REASONS:
            c.add_metric([self.model_name, reason], 0, created=self.created)
        yield c
        h = self.histogram
        yield h("vllm:request_prompt_tokens", "Number of prefill tokens processed.",
                lambda es: es.prompt_len)
        yield h("vllm:request_generation_tokens", "Number of generation tokens processed.",
                lambda es: es.generation_len)
        yield h("vllm:iteration_tokens_total", "Histogram of number of tokens per "
                "engine_step.", lambda es: es.iteration_tokens)
        yield h("vllm:request_max_num_generation_tokens", "Histogram of maximum number of "
                "requested generation tokens.", lambda es: es.max_generation_len)
        yield h("vllm:request_params_n", "Histogram of the n request parameter.",
                lambda es: es.params_n)
        yield h("vllm:request_params_max_tokens", "Histogram of the max_tokens request "
                "parameter.", lambda es: es.params_max_tokens)
        yield h("vllm:time_to_first_token_seconds", "Histogram of time to first token in "
                "seconds.", lambda es: es.ttft)
        yield h("vllm:inter_token_latency_seconds", "Histogram of inter-token latency in "
                "seconds.", lambda es: es.itl)
        yield h("vllm:request_time_per_output_token_seconds", "Histogram of "
                "time_per_output_token_seconds per request.",
                lambda es: es.time_per_output_token)
        yield h("vllm:e2e_request_latency_seconds", "Histogram of e2e request latency in "
                "seconds.", lambda es: es.e2e)
        yield h("vllm:request_queue_time_seconds", "Histogram of time spent in WAITING "
                "phase for request.", lambda es: es.queue_time)
        yield h("vllm:request_inference_time_seconds", "Histogram of time spent in RUNNING "
                "phase for request.", lambda es: es.inference_time)
        yield h("vllm:request_prefill_time_seconds", "Histogram of time spent in PREFILL "
                "phase for request.", lambda es: es.prefill_time)
        yield h("vllm:request_decode_time_seconds", "Histogram of time spent in DECODE "
                "phase for request.", lambda es: es.decode_time)
        yield h("vllm:request_num_preemptions", "Histogram of the number of times a request "
                "was preempted.", lambda es: es.num_preemptions)
        yield h("vllm:request_prefill_kv_computed_tokens", "Histogram of new KV tokens "
                "computed during prefill (excluding cached tokens).",
                lambda es: es.prefill_kv_computed)
        if kv_cache_metrics:
            sampled = " Sampled metrics (controlled by --kv-cache-metrics-sample)."
            yield h("vllm:kv_block_lifetime_seconds", "Histogram of KV cache block lifetime "
                    "from allocation to eviction." + sampled,
                    lambda es: es.kv_residency[0])
            yield h("vllm:kv_block_idle_before_evict_seconds", "Histogram of idle time "
                    "before KV cache block eviction." + sampled,
                    lambda es: es.kv_residency[1])
            yield h("vllm:kv_block_reuse_gap_seconds", "Histogram of time gaps between "
                    "consecutive KV cache block accesses. Only the most recent accesses "
                    "are recorded (ring buffer)." + sampled, lambda es: es.kv_residency[2])
        if lora_info is not None:
            # vLLM's labels: both lists hold every adapter with a request waiting or
            # running; each list ever seen stays a series, valued when last seen.
            max_lora, seen = lora_info
            g = GaugeMetricFamily("vllm:lora_requests_info", "Running stats on lora requests.",
                                  labels=["max_lora", "waiting_lora_adapters",
                                          "running_lora_adapters"])
            for adapters, when in seen.items():
                g.add_metric([str(max_lora), adapters, adapters], when)
            yield g
        if cache_config is not None:
            g = GaugeMetricFamily("vllm:cache_config_info", "Information of the LLMEngine "
                                  "CacheConfig", labels=[*cache_config, "engine"])
            for label, _ in self.engines:
                g.add_metric([*cache_config.values(), label], 1)
            yield g

    def spec_decode(self) -> Iterator[Metric]:
        """Once any engine reported a drafting step (vLLM: from start-up when a
        speculative config is set)."""
        spec_engines = [(label, es.spec) for label, es in self.engines if es.spec is not None]
        if not spec_engines:
            return
        for name, doc, field in (
                ("vllm:spec_decode_num_drafts", "Number of spec decoding drafts.", "drafts"),
                ("vllm:spec_decode_num_draft_tokens", "Number of draft tokens.",
                 "draft_tokens"),
                ("vllm:spec_decode_num_accepted_tokens", "Number of accepted tokens.",
                 "accepted_tokens")):
            c = CounterMetricFamily(name, doc, labels=LABELS)
            for label, spec in spec_engines:
                c.add_metric([self.model_name, label], getattr(spec, field),
                             created=self.created)
            yield c
        c = CounterMetricFamily("vllm:spec_decode_num_accepted_tokens_per_pos",
                                "Accepted tokens per draft position.",
                                labels=[*LABELS, "position"])
        for label, spec in spec_engines:
            for pos, accepted in enumerate(spec.accepted_per_pos):
                c.add_metric([self.model_name, label, str(pos)], accepted,
                             created=self.created)
        yield c
