"""The composition root: builds every part of the frontend process and runs it.

Nothing imports this module but the CLI. It builds the engine client, the
fan-out table, the renderer, the application state handlers read, metrics and
the operator's pieces, wires the engine's events to them, assembles the
aiohttp application from the route table, and runs the lifecycle: start-up
(engine attached, then HTTP), serving, and the drain on SIGTERM.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import signal
import time
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from frontend.engine_client import EngineAddresses, EngineClient
from frontend.errors import error_middleware
from frontend.fanout import Table
from frontend.model import ModelInfo
from frontend.openai.routes import Route, openai_routes
from frontend.ops import admission, listeners, security, systemd
from frontend.ops.flags import OpsConfig
from frontend.ops.metrics import EngineMetrics, Metrics
from frontend.parsers import ChatParsers
from frontend.render import Renderer
from frontend.state import AppState, ServingConfig
from protocol.handshake import ReadyResponse

log = logging.getLogger("frontend")

GC_THRESHOLDS = (50_000, 50, 100)


@dataclass
class ServerConfig:
    host: str = "127.0.0.1"
    port: int = 8000
    engine_ready_timeout: float = 600.0
    shutdown_timeout: float = 30.0
    max_request_body: int = 32 * 1024 * 1024
    engine_state_file: str | None = None
    serving: ServingConfig = field(default_factory=ServingConfig)
    ops: OpsConfig = field(default_factory=OpsConfig)
    parsers: ChatParsers | None = None  # tool-call and reasoning parsers


class Server:
    def __init__(self, model: ModelInfo, addresses: EngineAddresses,
                 config: ServerConfig) -> None:
        self.config = config
        self.engine = EngineClient(addresses, on_outputs=self._on_outputs,
                                   on_dead=self._on_engine_dead, on_ready=self._on_ready,
                                   state_file=config.engine_state_file)
        engine_metrics = None if config.ops.disable_log_stats else EngineMetrics()
        self.table = Table(self.engine, model, self._model_limits, observer=engine_metrics)
        self.state = AppState(model, config.serving, self.engine, self.table, Renderer(model),
                              config.parsers)
        self.limits = admission.LimitsState(config.ops.max_concurrent_requests,
                                            config.max_request_body)
        self.metrics = Metrics(self.state, self.limits, engine_metrics)
        self.notifier = systemd.Notifier.from_env()
        self.runner: web.AppRunner | None = None
        self._stopped = asyncio.Event()

    # ------------------------------------------------------------ engine events
    def _on_outputs(self, batch: list) -> None:
        self.table.on_outputs(batch)

    def _model_limits(self):
        return self.state.model_limits()

    def _on_engine_dead(self, reason: str) -> None:
        self.table.fail_all(reason)
        self.notifier.status(f"engine dead ({reason}); waiting for an engine to attach")

    def _on_ready(self, ready: ReadyResponse) -> None:
        self.state.engine_attached(ready)
        if self.runner is not None:  # an engine attached after a restart
            self.notifier.status("engine attached again; serving")

    # ------------------------------------------------------------ aiohttp app
    def routes(self) -> list[Route]:
        return [*openai_routes(self.state), Route("GET", "/metrics", self.metrics.handle)]

    def make_app(self) -> web.Application:
        """Routes from the route table; middlewares outermost first: request id ->
        metrics -> CORS -> API key -> admission -> errors (innermost)."""
        ops = self.config.ops
        cors = security.Cors(ops.allowed_origins, ops.allowed_methods, ops.allowed_headers,
                             ops.allow_credentials)
        http = self.metrics.http
        counters: dict[Any, Any] = {}
        chain: list[Any] = []
        if ops.enable_request_id_headers:
            chain.append(security.request_id_middleware())
        chain += [self.metrics.middleware(), cors.middleware()]
        keys = security.ApiKeys(ops.api_keys)
        if keys:
            chain.append(security.api_key_middleware(keys, http.reject))
        chain += [admission.middleware(self.limits, self.state, counters, http.reject),
                  error_middleware]
        app = web.Application(middlewares=chain, client_max_size=self.config.max_request_body)
        for route in self.routes():
            registered = app.router.add_route(route.method, route.path, route.handler)
            if route.count_choices is not None:
                counters[registered] = route.count_choices

        hooks = [self.metrics.on_response_prepare, cors.on_response_prepare]
        if ops.enable_request_id_headers:
            hooks.append(security.request_id_on_prepare)

        async def on_prepare(request: web.Request, response: web.StreamResponse) -> None:
            for hook in hooks:
                hook(request, response)
        app.on_response_prepare.append(on_prepare)
        return app

    # ------------------------------------------------------------ lifecycle
    async def start(self) -> None:
        started = time.monotonic()
        self.notifier.start_watchdog()
        self.notifier.status(f"waiting for an engine at {self.engine.addresses.handshake}")
        await self.engine.start(timeout=self.config.engine_ready_timeout,
                                progress=self.notifier.status)
        engine_ready_at = time.monotonic()
        self.runner = web.AppRunner(self.make_app(), handler_cancellation=True,
                                    access_log=None, **listeners.runner_kwargs(self.config.ops))
        await self.runner.setup()
        where = await listeners.start_sites(self.runner, self.config.host, self.config.port,
                                            self.config.ops)
        # Everything allocated so far lives for the whole process: keep it out
        # of every future collection (vLLM's freeze_gc_heap). Per-request
        # objects are mostly acyclic and short-lived, so collections can be
        # rare: with the default thresholds full collections of 25-37 ms
        # showed up under load (4-5 % of the CPU; ~1 % with these).
        gc.collect()
        gc.freeze()
        gc.set_threshold(*GC_THRESHOLDS)
        log.info("serving on %s (%.2f s after the engine was ready, %.1f s total)",
                 where, time.monotonic() - engine_ready_at, time.monotonic() - started)
        self.notifier.ready(f"serving on {where}")

    async def serve_forever(self) -> None:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self._stopped.set)
        await self._stopped.wait()
        await self.shutdown()

    async def shutdown(self) -> None:
        """Drain: /health says 503 and new generation requests are refused at once,
        while the listener stays open; running requests finish up to the timeout,
        the rest are aborted; then the listener closes."""
        self.state.draining = True
        self.notifier.stopping("draining")
        log.info("shutting down: draining %d engine requests (up to %.0f s)",
                 len(self.table), self.config.shutdown_timeout)
        deadline = time.monotonic() + self.config.shutdown_timeout
        while ((len(self.table) or self.limits.requests)
               and time.monotonic() < deadline):
            await asyncio.sleep(0.05)
        if len(self.table):
            log.warning("aborting %d engine requests still running", len(self.table))
            self.table.abort_all("the frontend is shutting down")
        if self.runner is not None:
            await self.runner.cleanup()
        await self.engine.close()
        log.info("stopped")
