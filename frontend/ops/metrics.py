"""``GET /metrics``: vLLM's metric families for what a frontend sees, plus our own.

Nothing on the hot path touches prometheus_client: the fan-out table's
observer (``frontend/ops/stats_recorder.py``) adds to plain lists of numbers
once per engine message and once per finished choice, and this collector
builds the families only when /metrics is scraped
(``frontend/ops/vllm_metrics.py``: the table of vLLM's ``vllm:*`` families,
with its names, labels and buckets). tools/bench/metrics_overhead.py measures
the cost.

The frontend's own families (:data:`FRONTEND_FAMILIES`, ``http_requests`` and
``vllm_frontend_*``) are one table too: a new one is a row there, reading
what this process counts.
"""

from __future__ import annotations

import asyncio
import collections
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from aiohttp import web
from prometheus_client import CollectorRegistry, GCCollector, PlatformCollector, ProcessCollector
from prometheus_client.exposition import CONTENT_TYPE_LATEST, generate_latest
from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily, Metric

from frontend.engine_rejections import REASONS
from frontend.errors import CLIENT_GONE
from frontend.ops.service_metrics import Series, ServiceMetrics, Snapshot
from frontend.ops.stats_recorder import StatsRecorder
from frontend.ops.vllm_metrics import Exposition, cache_config_labels

if TYPE_CHECKING:
    from frontend.ops.admission import LimitsState
    from frontend.state import AppState

# The handler label of requests no route matched (as the instrumentator's).
UNMATCHED = "none"
# Anything else a client sends as a method is counted as "other": labels stay bounded.
METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "DELETE", "PATCH", "OPTIONS"})


class HttpMetrics:
    """Per-HTTP-request counters (not per token) and the frontend's own gauges."""

    def __init__(self) -> None:
        # (handler, method, status) -> count: the series of a 3-label family
        self.requests: dict[tuple[str, ...], int] = {}
        self.disconnects = 0
        self.rejected: dict[str, int] = {}
        self.open_streams = 0

    def reject(self, reason: str) -> None:
        self.rejected[reason] = self.rejected.get(reason, 0) + 1


@dataclass(frozen=True)
class FrontendFamily:
    """One of the frontend's own families: ``read`` gives this process's value
    (or its series by label values). A ``summed`` family is the service's sum
    over its processes (``service_metrics.py``); the others show the answering
    process's own view."""

    name: str
    help: str
    counter: bool  # else a gauge
    read: Callable[[Metrics], float | Series]
    labels: tuple[str, ...] = ()
    shown: tuple[str, ...] = ()  # label values with a series from the start, in this order
    summed: bool = True
    when: Callable[[Metrics], bool] | None = None

    def series(self, metrics: Metrics) -> Series:
        value = self.read(metrics)
        return value if isinstance(value, dict) else {(): value}

    def render(self, series: Series, created: float) -> Metric:
        if self.counter:
            counts = CounterMetricFamily(self.name, self.help, labels=self.labels)
            for key in self._keys(series):
                counts.add_metric(key, series.get(key, 0), created=created)
            return counts
        values = GaugeMetricFamily(self.name, self.help, labels=self.labels)
        for key in self._keys(series):
            values.add_metric(key, series.get(key, 0))
        return values

    def _keys(self, series: Series) -> list[tuple[str, ...]]:
        shown = [(value,) for value in self.shown]
        return [*shown, *sorted(key for key in series if key not in shown)]


def counter(
    name: str, help: str, read: Callable[[Metrics], float | Series], **options: Any
) -> FrontendFamily:
    return FrontendFamily(name, help, True, read, **options)


def gauge(
    name: str, help: str, read: Callable[[Metrics], float | Series], **options: Any
) -> FrontendFamily:
    return FrontendFamily(name, help, False, read, **options)


def _by_one_label(counts: dict[str, int]) -> Series:
    return {(key,): value for key, value in counts.items()}


# The frontend's families, in /metrics order: one row per family.
FRONTEND_FAMILIES = (
    counter(
        "http_requests",
        "HTTP requests by handler, method and status code.",
        lambda m: dict(m.http.requests),
        labels=("handler", "method", "status"),
    ),
    counter(
        "vllm_frontend_client_disconnects",
        "Requests whose client went away before the response ended.",
        lambda m: m.http.disconnects,
    ),
    counter(
        "vllm_frontend_engine_aborts",
        "Engine requests this frontend aborted (client gone, stop string, failed "
        "sibling, slow consumer, shutdown).",
        lambda m: m.state.engine.num_aborts_sent,
    ),
    counter(
        "vllm_frontend_rejected_requests",
        "Requests refused before any work, by reason.",
        lambda m: _by_one_label(m.http.rejected),
        labels=("reason",),
        shown=(
            "body_too_large",
            "draining",
            "too_many_choices",
            "too_many_requests",
            "unauthorized",
        ),
    ),
    counter(
        "vllm_frontend_engine_messages_rejected",
        "Messages from the engine side dropped before they changed anything, by "
        "reason (the engine link is unauthenticated: see the README's network "
        "isolation).",
        lambda m: _by_one_label(m.state.engine.rejected),
        labels=("reason",),
        shown=REASONS,
    ),
    counter(
        "vllm_frontend_slow_consumer_aborts",
        "Streams aborted because the client did not read them.",
        lambda m: m.recorder.slow_consumer_aborts if m.recorder else 0,
        when=lambda m: m.recorder is not None,
    ),
    gauge(
        "vllm_frontend_open_streams",
        "Streaming responses being written.",
        lambda m: m.http.open_streams,
    ),
    gauge(
        "vllm_frontend_requests_in_flight",
        "Generation requests being handled (HTTP level).",
        lambda m: m.limits.requests,
    ),
    gauge(
        "vllm_frontend_choices_in_flight",
        "Choices (prompts x n) of admitted generation requests (counted only with "
        "--max-concurrent-requests, which bounds it).",
        lambda m: m.limits.choices,
    ),
    gauge(
        "vllm_frontend_fanout_entries",
        "Engine requests in the fan-out table.",
        lambda m: len(m.state.table),
    ),
    # The answering process's own view, not summed:
    gauge(
        "vllm_frontend_engine_alive",
        "1 while an engine is attached and alive.",
        lambda m: 1 if m.state.engine.alive else 0,
        summed=False,
    ),
    gauge(
        "vllm_frontend_draining",
        "1 once a SIGTERM started the drain.",
        lambda m: 1 if m.state.draining else 0,
        summed=False,
    ),
    gauge(
        "vllm_frontend_engine_ranks",
        "Engine ranks by state: serving, stalled (sends nothing while it has work), dead "
        "(lost or never attached).",
        lambda m: _by_one_label(collections.Counter(m.state.engine.rank_states())),
        labels=("state",),
        shown=("serving", "stalled", "dead"),
        summed=False,
    ),
)


class Metrics:
    """Everything /metrics shows, in one registry of its own."""

    def __init__(
        self,
        state: AppState,
        limits: LimitsState,
        recorder: StatsRecorder | None,
        service: ServiceMetrics | None = None,
        cache_flags: dict[str, Any] | None = None,
    ) -> None:
        self.state: AppState = state
        self.limits: LimitsState = limits
        # The CacheConfig fields that engine flags given to this frontend set
        # (RecordedFlags.cache_config()), for vllm:cache_config_info.
        self.cache_flags = cache_flags or {}
        # One of several frontend processes: /metrics shows the whole service.
        self.service = service
        self.created = time.time()
        self.recorder: StatsRecorder | None = recorder  # None with --disable-log-stats
        self.http: HttpMetrics = HttpMetrics()
        self.registry = CollectorRegistry(auto_describe=False)
        ProcessCollector(registry=self.registry)
        PlatformCollector(registry=self.registry)
        GCCollector(registry=self.registry)
        self.registry.register(self)

    # -------------------------------------------------------- collector
    def describe(self) -> list:
        return []

    def rank_indexes(self) -> list[int]:
        """The ranks vLLM makes children for: every rank, from the start."""
        if self.recorder is None:
            return []
        return sorted({*range(self.state.engine.data_parallel_size), *self.recorder.ranks})

    def snapshot(self) -> Snapshot:
        """What this process counts (``service_metrics``)."""
        recorder = self.recorder
        return Snapshot(
            ranks={i: recorder.rank(i) for i in self.rank_indexes()} if recorder else {},
            lora_info=dict(recorder.lora_info or {}) if recorder else {},
            frontend={row.name: row.series(self) for row in FRONTEND_FAMILIES if row.summed},
        )

    def collect(self) -> Iterator[Metric]:
        state = self.state
        recorder = self.recorder
        snap = self.snapshot()
        if self.service is not None:  # the whole service: every worker's snapshot
            snap = self.service.service(self.service.write(snap))
        if recorder is not None and state.ready is not None:
            ranks = [(str(i), stats) for i, stats in sorted(snap.ranks.items())]
            exposition = Exposition(ranks, state.model.name, self.created)
            yield from exposition.families(
                cache_config=cache_config_labels(state.ready, len(ranks), self.cache_flags),
                count_nans=recorder.count_nans,
                kv_cache_metrics=recorder.kv_cache_metrics,
                lora_info=(
                    (recorder.max_loras, snap.lora_info) if recorder.lora_info is not None else None
                ),
            )
        for row in FRONTEND_FAMILIES:
            if row.when is None or row.when(self):
                yield row.render(
                    snap.frontend[row.name] if row.summed else row.series(self), self.created
                )

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
                key = (
                    resource.canonical if resource is not None else UNMATCHED,
                    method if method in METHODS else "other",
                    status,
                )
                http.requests[key] = http.requests.get(key, 0) + 1
                if request.get("ops.stream"):
                    http.open_streams -= 1

        return count_requests

    def on_response_prepare(self, request: web.Request, response: web.StreamResponse) -> None:
        if (
            not isinstance(response, web.Response)
            # (the raw header: content_type parses it, ~4 us a request)
            and response.headers.get("Content-Type", "").startswith("text/event-stream")
            and not request.get("ops.stream")
        ):
            request["ops.stream"] = True
            self.http.open_streams += 1

    async def handle(self, request: web.Request) -> web.Response:
        # Always the text format, as vLLM's /metrics (the instrumentator's handler).
        return web.Response(
            body=generate_latest(self.registry), headers={"Content-Type": CONTENT_TYPE_LATEST}
        )
