"""``GET /metrics``: vLLM's metric families for what a frontend sees, plus our own.

Nothing on the hot path touches prometheus_client. The fan-out table calls
:class:`EngineMetrics` (its ``observer``) once per engine step and once per
finished choice; those hooks add to plain ints and bump preallocated bucket
lists, the way vLLM's own IterationStats aggregate a step (choices whose last
token came in the previous step share one inter-token bucket update). A custom
collector turns the totals into Prometheus families only when /metrics is
scraped. tools/bench/metrics_overhead.py measures the cost.

vLLM families (labels ``model_name`` = the first served name, ``engine="0"``),
with vLLM 0.32's semantics (``vllm/v1/metrics/{loggers,stats}.py``):

* gauges from the engine's ``scheduler_stats`` (absent when the engine runs
  with ``--disable-log-stats``): ``vllm:num_requests_running``,
  ``vllm:num_requests_waiting``, ``vllm:kv_cache_usage_perc``;
* counters: ``vllm:prompt_tokens`` and ``vllm:generation_tokens`` (per engine
  request, so a prompt with n=4 counts its tokens four times, as in vLLM),
  ``vllm:prompt_tokens_cached``,
  ``vllm:request_success{finished_reason}`` (one per engine request the engine
  finished, i.e. per choice; requests the client gave up are aborted and not
  counted, as in vLLM);
* histograms with vLLM's buckets: ``vllm:time_to_first_token_seconds`` (per
  choice, from arrival), ``vllm:inter_token_latency_seconds`` (per choice per
  engine step after the first, from the engine's step timestamps),
  ``vllm:e2e_request_latency_seconds`` (per finished choice),
  ``vllm:request_params_n`` (per prompt of a request).

Frontend families (``vllm_frontend_*``): HTTP requests by handler, method and
status, client disconnects, engine requests aborted, rejected requests by
reason, slow-consumer aborts, open streams, requests and choices in flight,
fan-out table size, engine attached.
"""

from __future__ import annotations

import asyncio
import time
from bisect import bisect_left
from typing import TYPE_CHECKING, Iterable, Iterator

import msgspec
from aiohttp import web
from prometheus_client import CollectorRegistry, GCCollector, PlatformCollector, ProcessCollector
from prometheus_client.exposition import CONTENT_TYPE_LATEST, generate_latest
from prometheus_client.metrics_core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.samples import Sample
from prometheus_client.utils import floatToGoString

from frontend.errors import CLIENT_GONE
from protocol import wire

if TYPE_CHECKING:
    from frontend.fanout import Choice, Group
    from frontend.ops.admission import LimitsState
    from frontend.state import AppState

# vllm/v1/metrics/buckets.py (0.32)
REQUEST_LATENCY_BUCKETS = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0,
                           40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0)
TIME_TO_FIRST_TOKEN_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5,
                               0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0,
                               640.0, 2560.0)
INTER_TOKEN_LATENCY_BUCKETS = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5,
                               0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0)
REQUEST_PARAMS_N_BUCKETS = (1, 2, 5, 10, 20)

FINISH_NAMES = wire.FINISH_REASON_NAMES
FINISH_ERROR = int(wire.FinishReason.ERROR)
LABELS = ("model_name", "engine")
# The handler label of requests no route matched (as the instrumentator's).
UNMATCHED = "none"
# Anything else a client sends as a method is counted as "other": labels stay bounded.
METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "DELETE", "PATCH", "OPTIONS"})


class Histogram:
    """Bucket counts in a plain list: ``observe`` is a bisect and two adds."""

    __slots__ = ("bounds", "counts", "sum")

    def __init__(self, bounds: Iterable[float]) -> None:
        self.bounds = tuple(float(b) for b in bounds)
        self.counts = [0] * (len(self.bounds) + 1)
        self.sum = 0.0

    def observe(self, value: float, count: int = 1) -> None:
        self.counts[bisect_left(self.bounds, value)] += count
        self.sum += value * count

    @property
    def count(self) -> int:
        return sum(self.counts)

    def family(self, name: str, doc: str, labelvalues: list[str], created: float) -> Metric:
        fam = HistogramMetricFamily(name, doc, labels=LABELS)
        cumulative, buckets = 0, []
        for bound, n in zip(self.bounds, self.counts):
            cumulative += n
            buckets.append((floatToGoString(bound), cumulative))
        buckets.append(("+Inf", cumulative + self.counts[-1]))
        fam.add_metric(labelvalues, buckets, self.sum)
        fam.samples.append(Sample(name + "_created", dict(zip(LABELS, labelvalues)), created))
        return fam


class EngineMetrics:
    """The fan-out table's observer (``fanout.TableObserver``): per-step and
    per-choice aggregation only."""

    def __init__(self) -> None:
        self.prompt_tokens = 0
        self.generation_tokens = 0
        self.cached_prompt_tokens = 0
        self.success = dict.fromkeys(FINISH_NAMES, 0)
        self.slow_consumer_aborts = 0
        self._scheduler_stats = msgspec.Raw()  # the latest, still msgpack
        self.ttft = Histogram(TIME_TO_FIRST_TOKEN_BUCKETS)
        self.itl = Histogram(INTER_TOKEN_LATENCY_BUCKETS)
        self.e2e = Histogram(REQUEST_LATENCY_BUCKETS)
        self.params_n = Histogram(REQUEST_PARAMS_N_BUCKETS)
        # engine id -> the engine timestamp of its last step with output.
        self._last: dict[str, float] = {}
        # engine id -> its choice, until the first output arrives.
        self._first: dict[str, "Choice"] = {}
        # The previous step's timestamp object (never a value in _last at first).
        self._prev_ts: float = float("nan")

    # -------------------------------------------------------- table hooks
    def on_submit(self, group: "Group") -> None:
        choices = group.choices
        first = self._first
        for c in choices:
            first[c.engine_id] = c
        if choices:
            prompts = choices[-1].prompt_index + 1
            self.params_n.observe(len(choices) // prompts, prompts)

    @property
    def scheduler_stats(self) -> dict | None:
        return wire.scheduler_stats(self._scheduler_stats)

    def on_step(self, outs: wire.StepOutputs) -> None:
        if wire.has_scheduler_stats(outs):
            self._scheduler_stats = outs.scheduler_stats
        outputs = outs.outputs
        if not outputs:
            return
        ts = outs.timestamp or time.monotonic()
        last = self._last
        prev_step = self._prev_ts
        same = generated = 0
        for out in outputs:
            rid = out.request_id
            prev = last.get(rid)
            if prev is prev_step:
                # The common case: its last token came in the previous step
                # (the same float object). Counted here, bucketed once below.
                same += 1
            elif prev is None:
                choice = self._first.pop(rid, None)
                if choice is None:
                    continue  # aborted here, or not ours
                self.ttft.observe(time.monotonic() - choice.group.arrival)
                self.prompt_tokens += len(choice.prompt_token_ids)
            else:
                self.itl.observe(ts - prev)
            generated += len(out.new_token_ids)
            if out.finish_reason is None:
                last[rid] = ts
            else:
                if prev is not None:
                    del last[rid]
                if out.finish_reason == FINISH_ERROR:
                    # The table fails the group without on_choice_finished.
                    self.success["error"] += 1
        if same:
            self.itl.observe(ts - prev_step, same)
        self.generation_tokens += generated
        self._prev_ts = ts

    def on_choice_finished(self, choice: "Choice") -> None:
        self.success[choice.finish_reason] += 1
        self.cached_prompt_tokens += choice.num_cached_tokens
        self.e2e.observe(time.monotonic() - choice.group.arrival)

    def on_slow_consumer(self, group: "Group") -> None:
        self.slow_consumer_aborts += 1

    def on_release(self, group: "Group") -> None:
        last, first = self._last, self._first
        for c in group.choices:
            rid = c.engine_id
            last.pop(rid, None)
            first.pop(rid, None)

    # -------------------------------------------------------- exposition
    def families(self, lv: list[str], created: float) -> Iterator[Metric]:
        stats = self.scheduler_stats or {}
        for name, doc, key in (
                ("vllm:num_requests_running", "Number of requests in model execution batches.",
                 "num_running_reqs"),
                ("vllm:num_requests_waiting", "Number of requests waiting to be processed.",
                 "num_waiting_reqs"),
                ("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.",
                 "kv_cache_usage")):
            g = GaugeMetricFamily(name, doc, labels=LABELS)
            g.add_metric(lv, float(stats.get(key) or 0))
            yield g
        for name, doc, value in (
                ("vllm:prompt_tokens", "Number of prefill tokens processed.",
                 self.prompt_tokens),
                ("vllm:generation_tokens", "Number of generation tokens processed.",
                 self.generation_tokens),
                ("vllm:prompt_tokens_cached",
                 "Number of cached prompt tokens (local + external).",
                 self.cached_prompt_tokens)):
            c = CounterMetricFamily(name, doc, labels=LABELS)
            c.add_metric(lv, value, created=created)
            yield c
        c = CounterMetricFamily("vllm:request_success", "Count of successfully processed "
                                "requests.", labels=[*LABELS, "finished_reason"])
        for reason, value in self.success.items():
            c.add_metric([*lv, reason], value, created=created)
        yield c
        yield self.ttft.family("vllm:time_to_first_token_seconds",
                               "Histogram of time to first token in seconds.", lv, created)
        yield self.itl.family("vllm:inter_token_latency_seconds",
                              "Histogram of inter-token latency in seconds.", lv, created)
        yield self.e2e.family("vllm:e2e_request_latency_seconds",
                              "Histogram of e2e request latency in seconds.", lv, created)
        yield self.params_n.family("vllm:request_params_n",
                                   "Histogram of the n request parameter.", lv, created)


class HttpMetrics:
    """Per-HTTP-request counters (not per token) and the frontend's own gauges."""

    def __init__(self) -> None:
        self.requests: dict[tuple[str, str, str], int] = {}
        self.disconnects = 0
        self.rejected: dict[str, int] = {}
        self.open_streams = 0

    def reject(self, reason: str) -> None:
        self.rejected[reason] = self.rejected.get(reason, 0) + 1


REJECT_REASONS = ("unauthorized", "body_too_large", "too_many_requests", "too_many_choices",
                  "draining")


class Metrics:
    """Everything /metrics shows, in one registry of its own."""

    def __init__(self, state: "AppState", limits: "LimitsState",
                 engine: EngineMetrics | None) -> None:
        self.state = state
        self.limits = limits
        self.created = time.time()
        self.engine = engine  # None with --disable-log-stats
        self.http = HttpMetrics()
        self.registry = CollectorRegistry(auto_describe=False)
        ProcessCollector(registry=self.registry)
        PlatformCollector(registry=self.registry)
        GCCollector(registry=self.registry)
        self.registry.register(self)

    # -------------------------------------------------------- collector
    def describe(self) -> list:
        return []

    def collect(self) -> Iterator[Metric]:
        state = self.state
        lv = [state.model.name, "0"]
        if self.engine is not None:
            yield from self.engine.families(lv, self.created)
        http = self.http
        c = CounterMetricFamily("http_requests", "HTTP requests by handler, method and "
                                "status code.", labels=["handler", "method", "status"])
        for key, value in sorted(http.requests.items()):
            c.add_metric(list(key), value, created=self.created)
        yield c
        c = CounterMetricFamily("vllm_frontend_client_disconnects",
                                "Requests whose client went away before the response ended.")
        c.add_metric([], http.disconnects, created=self.created)
        yield c
        c = CounterMetricFamily("vllm_frontend_engine_aborts",
                                "Engine requests this frontend aborted (client gone, stop "
                                "string, failed sibling, slow consumer, shutdown).")
        c.add_metric([], state.engine.num_aborts_sent, created=self.created)
        yield c
        c = CounterMetricFamily("vllm_frontend_rejected_requests",
                                "Requests refused before any work, by reason.",
                                labels=["reason"])
        for reason in sorted(set(REJECT_REASONS) | set(http.rejected)):
            c.add_metric([reason], http.rejected.get(reason, 0), created=self.created)
        yield c
        if self.engine is not None:
            c = CounterMetricFamily("vllm_frontend_slow_consumer_aborts",
                                    "Streams aborted because the client did not read them.")
            c.add_metric([], self.engine.slow_consumer_aborts, created=self.created)
            yield c
        limits = self.limits
        for name, doc, value in (
                ("vllm_frontend_open_streams", "Streaming responses being written.",
                 http.open_streams),
                ("vllm_frontend_requests_in_flight",
                 "Generation requests being handled (HTTP level).", limits.requests),
                ("vllm_frontend_choices_in_flight",
                 "Choices (prompts x n) of admitted generation requests (counted "
                 "only with --max-concurrent-requests, which bounds it).", limits.choices),
                ("vllm_frontend_fanout_entries", "Engine requests in the fan-out table.",
                 len(state.table)),
                ("vllm_frontend_engine_alive", "1 while an engine is attached and alive.",
                 1 if state.engine.alive else 0),
                ("vllm_frontend_draining", "1 once a SIGTERM started the drain.",
                 1 if state.draining else 0)):
            g = GaugeMetricFamily(name, doc)
            g.add_metric([], value)
            yield g
        g = GaugeMetricFamily("vllm_frontend_engine_ranks",
                              "Engine ranks by state: serving, stalled (sends nothing "
                              "while it has work), dead (lost or never attached).",
                              labels=["state"])
        states = state.engine.rank_states()
        for rank_state in ("serving", "stalled", "dead"):
            g.add_metric([rank_state], states.count(rank_state))
        yield g

    # -------------------------------------------------------- HTTP side
    def middleware(self):
        http = self.http

        @web.middleware
        async def count_requests(request: web.Request, handler):
            status = "500"
            try:
                response = await handler(request)
                status = str(response.status)
                if response.status == CLIENT_GONE and not self.state.draining:
                    http.disconnects += 1
                return response
            except web.HTTPException as e:
                status = str(e.status)
                raise
            except (asyncio.CancelledError, ConnectionResetError):
                status = str(CLIENT_GONE)
                if not self.state.draining:
                    http.disconnects += 1
                raise
            finally:
                resource = request.match_info.route.resource
                method = request.method
                key = (resource.canonical if resource is not None else UNMATCHED,
                       method if method in METHODS else "other", status)
                http.requests[key] = http.requests.get(key, 0) + 1
                if request.get("ops.stream"):
                    http.open_streams -= 1
        return count_requests

    def on_response_prepare(self, request: web.Request, response: web.StreamResponse) -> None:
        if (response.content_type == "text/event-stream" and not isinstance(response, web.Response)
                and not request.get("ops.stream")):
            request["ops.stream"] = True
            self.http.open_streams += 1

    async def handle(self, request: web.Request) -> web.Response:
        # Always the text format, as vLLM's /metrics (the instrumentator's handler).
        return web.Response(body=generate_latest(self.registry),
                            headers={"Content-Type": CONTENT_TYPE_LATEST})
