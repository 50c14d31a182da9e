"""vLLM 0.32's counting rules: what an engine step and a finished request add
to a rank's :class:`RankStats`.

The rules of ``vllm/v1/metrics/stats.py`` and ``PrometheusStatLogger.record``
(``loggers.py``), as functions of the decoded facts; each adds to the slots the
family table gave (``vllm_metrics.py``). The stats recorder
(``stats_recorder.py``) calls them from the fan-out table's hooks.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, cast

from frontend.ops.rank_stats import RankStats, SpecDecodeCounts
from frontend.ops.vllm_metrics import (
    CORRUPTED_REQUESTS,
    DECODE_TIME,
    E2E,
    EXTERNAL_PREFIX_CACHE_HITS,
    EXTERNAL_PREFIX_CACHE_QUERIES,
    FLOPS,
    GENERATION_LEN,
    INFERENCE_TIME,
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
    WRITE_BYTES,
)
from protocol import wire

if TYPE_CHECKING:
    from frontend.choices import Choice

# EngineCoreEventType
QUEUED, SCHEDULED, PREEMPTED = 1, 2, 3
CACHED_ON_DEVICE = PROMPT_TOKENS_CACHED_BY_SOURCE["device"]
PROMPT_COMPUTED = PROMPT_TOKENS_BY_SOURCE["local_compute"]
PROMPT_LOCAL_CACHE_HIT = PROMPT_TOKENS_BY_SOURCE["local_cache_hit"]
PROMPT_EXTERNAL_KV = PROMPT_TOKENS_BY_SOURCE["external_kv_transfer"]


def generated_tokens(choice: Choice) -> int:
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

    __slots__ = (
        "arrival",
        "parent",
        "lora",
        "rank",
        "last_ts",
        "first_ts",
        "queued_ts",
        "scheduled_ts",
        "num_preemptions",
        "ttft",
        "corrupted",
    )

    def __init__(
        self, arrival: float, parent: Parent | None, lora: str | None = None, rank: int = 0
    ) -> None:
        self.arrival = arrival
        self.parent = parent
        self.lora = lora  # the adapter's name (vllm:lora_requests_info)
        self.rank = rank  # the engine rank that runs it (only its outputs count)
        self.last_ts: float | None = None  # None until the first output
        self.first_ts = 0.0
        self.queued_ts = 0.0
        self.scheduled_ts = 0.0
        self.num_preemptions = 0
        self.ttft = 0.0
        self.corrupted = False


# ---------------------------------------------------------------- per message
def count_scheduler_stats(
    stats: RankStats, ss: wire.SchedulerStats, kv_cache_metrics: bool
) -> None:
    """The counters of a message's scheduler stats."""
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
        _count_spec_decoding(stats, ss.spec_decoding_stats)
    perf = ss.perf_stats
    if perf is not None:
        c[FLOPS] += perf.num_flops_per_gpu
        c[READ_BYTES] += perf.num_read_bytes_per_gpu
        c[WRITE_BYTES] += perf.num_write_bytes_per_gpu
    if kv_cache_metrics and ss.kv_cache_eviction_events:
        h = stats.histograms
        lifetime, idle, reuse = h[KV_BLOCK_LIFETIME], h[KV_BLOCK_IDLE], h[KV_BLOCK_REUSE_GAP]
        for event in ss.kv_cache_eviction_events:
            lifetime.observe(event.lifetime_seconds)
            idle.observe(event.idle_seconds)
            for gap in event.reuse_gaps_seconds:
                reuse.observe(gap)


def _count_spec_decoding(stats: RankStats, spec: wire.SpecDecodingStats) -> None:
    counts = stats.spec
    if counts is None:
        counts = stats.spec = SpecDecodeCounts(accepted_per_pos=[0] * spec.num_spec_tokens)
    counts.drafts += spec.num_drafts
    counts.draft_tokens += spec.num_draft_tokens
    counts.accepted_tokens += spec.num_accepted_tokens
    per_pos = counts.accepted_per_pos
    for pos, accepted in enumerate(spec.num_accepted_tokens_per_pos[: len(per_pos)]):
        per_pos[pos] += accepted


def count_prefill(stats: RankStats, ps: dict[str, int]) -> int:
    """A request's first output: its ``prefill_stats``; returns the prompt
    tokens computed (not cached)."""
    c = stats.counters
    computed = ps.get("num_computed_tokens", 0)
    c[PROMPT_TOKENS] += ps.get("num_prompt_tokens", 0)
    c[PROMPT_COMPUTED] += computed
    c[PROMPT_LOCAL_CACHE_HIT] += ps.get("num_local_cached_tokens", 0)
    c[PROMPT_EXTERNAL_KV] += ps.get("num_external_cached_tokens", 0)
    c[PROMPT_TOKENS_CACHED] += ps.get("num_cached_tokens", 0)
    return computed


def count_events(stats: RankStats, rec: RequestStats, events: list) -> None:
    """An output's engine events: the request's queue and schedule times, preemptions."""
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


# ---------------------------------------------------------------- per request
def count_finished(stats: RankStats, rec: RequestStats, choice: Choice, now: float) -> None:
    """vLLM's ``update_from_finished_request`` and what ``record`` does with it;
    ``now``: time.monotonic() when the finishing output was taken up."""
    c, h = stats.counters, stats.histograms
    c[REQUEST_SUCCESS[cast(str, choice.finish_reason)]] += 1  # (it finished)
    if rec.corrupted:
        c[CORRUPTED_REQUESTS] += 1
    # (last_ts: its finishing output was an output)
    first, last, scheduled = rec.first_ts, cast(float, rec.last_ts), rec.scheduled_ts
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
