"""``GET /metrics``: vLLM's metric families for what a frontend sees, plus our own.

Nothing on the hot path touches prometheus_client: the fan-out table's
observer (``frontend/ops/stats.py``) adds to plain ints and preallocated
bucket lists once per engine message and once per finished choice, and this
collector builds the families only when /metrics is scraped
(``frontend/ops/vllm_metrics.py`` for vLLM's ``vllm:*`` families, with its
names, labels, buckets and counting rules). tools/bench/metrics_overhead.py
measures the cost.

Frontend families (``vllm_frontend_*``): HTTP requests by handler, method and
status, client disconnects, engine requests aborted, rejected requests by
reason, slow-consumer aborts, open streams, requests and choices in flight,
fan-out table size, engine attached.
"""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING, Iterator

from aiohttp import web
from prometheus_client import CollectorRegistry, GCCollector, PlatformCollector, ProcessCollector
from prometheus_client.exposition import CONTENT_TYPE_LATEST, generate_latest
from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily, Metric

from frontend.errors import CLIENT_GONE
from frontend.ops import service_metrics
from frontend.ops.stats import EngineMetrics
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
                 engine: EngineMetrics | None,
                 service: service_metrics.ServiceMetrics | None = None) -> None:
        self.state = state
        self.limits = limits
        # One of several frontend processes: /metrics shows the whole service.
        self.service = service
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

    def engine_indexes(self) -> list[int]:
        """The engines vLLM makes children for: every rank, from the start."""
        if self.engine is None:
            return []
        return sorted({*range(self.state.engine.data_parallel_size), *self.engine.engines})

    def snapshot(self) -> dict:
        """What this process counts, as plain data (``service_metrics``)."""
        engine, http, limits = self.engine, self.http, self.limits
        return {
            "engines": ({i: service_metrics.engine_snapshot(engine.engine(i))
                         for i in self.engine_indexes()} if engine is not None else {}),
            "http_requests": [[*key, value] for key, value in http.requests.items()],
            "rejected": dict(http.rejected),
            "disconnects": http.disconnects, "open_streams": http.open_streams,
            "requests_in_flight": limits.requests, "choices_in_flight": limits.choices,
            "fanout_entries": len(self.state.table),
            "engine_aborts": self.state.engine.num_aborts_sent,
            "slow_consumer_aborts": engine.slow_consumer_aborts if engine is not None else 0,
            "lora_info": dict(engine.lora_info or {}) if engine is not None else {}}

    def collect(self) -> Iterator[Metric]:
        state = self.state
        engine = self.engine
        snap = self.snapshot()
        if self.service is not None:  # the whole service: every worker's snapshot
            snap = self.service.service(self.service.write(snap))
        if engine is not None and state.ready is not None:
            engines = [(str(i), service_metrics.fill_engine(engine.new_engine_stats(), e))
                       for i, e in sorted(snap["engines"].items())]
            exposition = Exposition(engines, state.model.name, self.created)
            yield from exposition.families(
                cache_config=cache_config_labels(state.ready, len(engines)),
                count_nans=engine.count_nans, kv_cache_metrics=engine.kv_cache_metrics,
                lora_info=((engine.max_loras, snap["lora_info"])
                           if engine.lora_info is not None else None))
        c = CounterMetricFamily("http_requests", "HTTP requests by handler, method and "
                                "status code.", labels=["handler", "method", "status"])
        for *key, value in sorted(snap["http_requests"]):
            c.add_metric(key, value, created=self.created)
        yield c
        c = CounterMetricFamily("vllm_frontend_client_disconnects",
                                "Requests whose client went away before the response ended.")
        c.add_metric([], snap["disconnects"], created=self.created)
        yield c
        c = CounterMetricFamily("vllm_frontend_engine_aborts",
                                "Engine requests this frontend aborted (client gone, stop "
                                "string, failed sibling, slow consumer, shutdown).")
        c.add_metric([], snap["engine_aborts"], created=self.created)
        yield c
        c = CounterMetricFamily("vllm_frontend_rejected_requests",
                                "Requests refused before any work, by reason.",
                                labels=["reason"])
        rejected = snap["rejected"]
        for reason in sorted(set(REJECT_REASONS) | set(rejected)):
            c.add_metric([reason], rejected.get(reason, 0), created=self.created)
        yield c
        if engine is not None:
            c = CounterMetricFamily("vllm_frontend_slow_consumer_aborts",
                                    "Streams aborted because the client did not read them.")
            c.add_metric([], snap["slow_consumer_aborts"], created=self.created)
            yield c
        for name, doc, value in (
                ("vllm_frontend_open_streams", "Streaming responses being written.",
                 snap["open_streams"]),
                ("vllm_frontend_requests_in_flight",
                 "Generation requests being handled (HTTP level).",
                 snap["requests_in_flight"]),
                ("vllm_frontend_choices_in_flight",
                 "Choices (prompts x n) of admitted generation requests (counted "
                 "only with --max-concurrent-requests, which bounds it).",
                 snap["choices_in_flight"]),
                ("vllm_frontend_fanout_entries", "Engine requests in the fan-out table.",
                 snap["fanout_entries"]),
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
