"""The composition root: builds every part of the frontend process and runs it.

Nothing imports this module but the CLI. It builds the engine client, the
fan-out table, the renderer, the application state handlers read, metrics and
the operator's pieces, wires the engine's events to them, assembles the
aiohttp application from the route table, and runs the lifecycle: start-up
(engine attached, then HTTP), serving, and the drain on SIGTERM.
"""

from __future__ import annotations

import asyncio
import dataclasses
import gc
import logging
import signal
import time
from dataclasses import dataclass, field
from typing import Any, cast

import zmq
from aiohttp import web

from frontend.anthropic.routes import anthropic_routes
from frontend.engine_addresses import EngineAddresses
from frontend.engine_client import EngineClient
from frontend.engine_handshake import HandshakeServer
from frontend.errors import LOG_ERROR_STACK, error_middleware
from frontend.fanout import Table
from frontend.lora import LoRAModulePath
from frontend.model import ModelInfo
from frontend.multimodal.pool import ProcessorPool, Settings
from frontend.openai import docs, openapi
from frontend.openai.routes import Route, openai_routes, operational_routes
from frontend.ops import access_log, admission, listeners, load, security, systemd
from frontend.ops.flags import OpsConfig
from frontend.ops.metrics import Metrics
from frontend.ops.service_metrics import ServiceMetrics
from frontend.ops.stats_recorder import StatsRecorder, compute_nans_in_logits
from frontend.ops.tracing import RequestTracer
from frontend.ops.vllm_flags import RecordedFlags
from frontend.parsers import ChatParsers
from frontend.pooling.model import PoolingModel, engine_tasks
from frontend.pooling.routes import pooling_routes
from frontend.render import Renderer
from frontend.responses.routes import responses_routes
from frontend.routing import Router
from frontend.state import AppState, ServingConfig
from frontend.supervisor import HEARTBEAT_S
from protocol.handshake import ReadyResponse
from protocol.sampling import ModelLimits

log = logging.getLogger("frontend")

GC_THRESHOLDS = (50_000, 50, 100)


@dataclass
class ServerConfig:
    host: str = "0.0.0.0"
    port: int = 8000
    engine_ready_timeout: float = 600.0
    shutdown_timeout: float = 30.0
    max_request_body: int = 32 * 1024 * 1024
    engine_state_file: str | None = None
    data_parallel_size: int = 1
    dp_routing: str = "prefix"
    engine_stall_timeout: float = 0.0
    serving: ServingConfig = field(default_factory=ServingConfig)
    ops: OpsConfig = field(default_factory=OpsConfig)
    # One of several frontend processes (--api-server-count, frontend/supervisor.py):
    # its client index, the shared memory, and where the supervisor hands it
    # the connections of the Unix socket.
    client_index: int = 0
    num_clients: int = 1
    shared: Any = None
    handoff: Any = None
    metrics_dir: str | None = None
    lora_modules: list[LoRAModulePath] = field(default_factory=list)
    require_lora: bool = False  # --enable-lora: the engine must support LoRA
    parsers: ChatParsers | None = None  # tool-call and reasoning parsers
    # The vllm serve flags given that the frontend does not act on (engine
    # flags: their values, e.g. for vllm:cache_config_info).
    vllm_flags: RecordedFlags = field(default_factory=RecordedFlags)
    # The processor workers of a multimodal model (None: a text-only model).
    multimodal: Settings | None = None


class Server:
    def __init__(
        self,
        model: ModelInfo,
        addresses: EngineAddresses,
        config: ServerConfig,
        tracer: RequestTracer | None = None,
    ) -> None:
        self.config = config
        self.notifier = systemd.Notifier.from_env()
        dp, client = config.data_parallel_size, config.client_index
        self.router = Router(dp, config.dp_routing)
        self.engine = EngineClient(
            addresses.inputs[client],
            addresses.outputs[client],
            data_parallel_size=dp,
            client_index=client,
            on_outputs=self._on_outputs,
            on_rank_lost=self._on_rank_lost,
            on_rank_attached=self._on_rank_attached,
            in_flight=self._in_flight,
            stall_timeout=config.engine_stall_timeout,
            state_file=config.engine_state_file,
            hellos=config.shared.hellos if config.shared is not None else None,
            handshake_window=config.engine_ready_timeout,
        )
        # With several frontend processes the supervisor answers the HELLOs.
        liveness = self.engine.liveness
        self.handshake = (
            HandshakeServer(
                addresses.handshake,
                addresses.inputs,
                addresses.outputs,
                dp,
                on_status=self.notifier.status,
                hellos=liveness.hellos,
                on_hello=liveness.hello,
                rejections=self.engine.rejections,
            )
            if config.shared is None
            else None
        )
        recorder: StatsRecorder | None = None
        if not config.ops.disable_log_stats:
            recorder = StatsRecorder(
                lambda: self.state.max_model_len,
                kv_cache_metrics=config.ops.kv_cache_metrics,
                count_nans=compute_nans_in_logits(),
                bucket_overrides=config.ops.custom_histogram_buckets,
                data_parallel_size=dp,
            )
            recorder.tracer = tracer
        self.table = Table(
            self.engine,
            model,
            self._model_limits,
            self.router,
            observer=recorder,
            client_index=client,
            num_clients=config.num_clients,
        )
        self.state = AppState(
            model,
            config.serving,
            self.engine,
            self.table,
            Renderer(model, config.serving.chat_template_content_format),
            config.parsers,
        )
        self.state.operational = config.ops.operational
        self.limits = admission.LimitsState(
            config.ops.max_concurrent_requests,
            config.max_request_body,
            shared=config.shared,
            slot=client,
        )
        service = (
            ServiceMetrics(config.metrics_dir, client) if config.metrics_dir is not None else None
        )
        self.metrics = Metrics(
            self.state, self.limits, recorder, service, cache_flags=config.vllm_flags.cache_config()
        )
        self.runner: web.AppRunner | None = None
        self._limits_for: object = object()  # the ReadyResponse _limits was built for
        self._limits: ModelLimits | None = None
        self._stopped = asyncio.Event()
        self._lora_restore: asyncio.Task | None = None
        # What the engine's tasks serve (frontend/pooling/model.py).
        self.pooling: PoolingModel | None = None

    # ------------------------------------------------------------ engine events
    def _on_outputs(self, batch: list) -> None:
        self.table.on_outputs(batch)

    def _model_limits(self) -> ModelLimits:
        # Asked on every submit: built again only when an engine (re)attaches.
        ready = self.state.ready
        if self._limits_for is not ready:
            self._limits = dataclasses.replace(
                self.state.model_limits(), num_clients=self.config.num_clients
            )
            self._limits_for = ready
        return cast(ModelLimits, self._limits)  # (built above the first time)

    def _in_flight(self, rank: int) -> int:
        return self.router.ranks[rank].in_flight

    def _on_rank_lost(self, rank: int, reason: str) -> None:
        self.table.fail_rank(rank, reason)
        if not self.engine.alive:
            self.notifier.status(f"no engine rank serving ({reason}); waiting for one")

    def _on_rank_attached(self, rank: int, ready: ReadyResponse) -> None:
        self.router.configure(rank, ready.block_size, ready.num_gpu_blocks)
        if ready.supports_lora and self.metrics.recorder is not None:
            self.metrics.recorder.enable_lora(ready.max_loras)
        self.state.engine_attached(cast(ReadyResponse, self.engine.ready))  # (a rank is attached)
        if self.runner is not None:  # a rank attached after a restart
            self.notifier.status(f"engine rank {rank} attached again; serving")
            if self.state.lora.adapters:  # it knows none of them
                self._lora_restore = asyncio.ensure_future(self.state.lora.restore())

    # ------------------------------------------------------------ aiohttp app
    def routes(self) -> list[Route]:
        pooling = self.pooling
        generation = pooling is None or pooling.generates
        model_routes = [
            *openai_routes(self.state, generation=generation),
            *(pooling_routes(self.state, pooling) if pooling is not None else ()),
            *(anthropic_routes(self.state) if generation else ()),
            *(responses_routes(self.state) if generation else ()),
        ]
        routes = [
            *model_routes,
            *operational_routes(self.state, model_routes, generation),
            Route("GET", "/metrics", self.metrics.handle),
        ]
        if self.config.ops.operational.disable_fastapi_docs:
            return routes
        return [*routes, openapi.route(routes, self.config.serving.root_path)]

    def make_app(self) -> web.Application:
        """Routes from the route table; middlewares outermost first: request id ->
        metrics -> CORS -> API key -> admission -> load tracking -> errors (innermost)."""
        ops = self.config.ops
        cors = security.Cors(
            ops.allowed_origins, ops.allowed_methods, ops.allowed_headers, ops.allow_credentials
        )
        http = self.metrics.http
        counters: dict[Any, Any] = {}
        chain: list[Any] = []
        serving = self.config.serving
        if serving.access_log:
            chain.append(access_log.middleware(serving.access_log_skip))
        if ops.enable_request_id_headers:
            chain.append(security.request_id_middleware())
        root = serving.root_path
        if root:  # (before the key check, which reads the unprefixed path)
            chain.append(root_path_middleware(root))
        chain += [self.metrics.middleware(), cors.middleware()]
        keys = security.ApiKeys(ops.api_keys)
        if keys:
            chain.append(security.api_key_middleware(keys, http.reject))
        chain.append(admission.middleware(self.limits, self.state, counters, http.reject))
        if ops.operational.enable_server_load_tracking:
            chain.append(load.middleware(self.state, counters))  # (the same routes)
        chain.append(error_middleware)
        app = web.Application(middlewares=chain, client_max_size=self.config.max_request_body)
        app[LOG_ERROR_STACK] = serving.log_error_stack
        prefixes = ("", root) if root else ("",)  # --root-path: with it and without, as vLLM
        for route in self.routes():
            for prefix in prefixes:
                registered = app.router.add_route(route.method, prefix + route.path, route.handler)
                if route.count_choices is not None:
                    counters[registered] = route.count_choices
        if not ops.operational.disable_fastapi_docs:  # (not in /openapi.json, as FastAPI's)
            for path, page in docs.pages(root):
                for prefix in prefixes:
                    app.router.add_route("GET", prefix + path, page)

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
        if self.handshake is not None:
            self.notifier.status(f"waiting for an engine at {self.handshake.address}")
            self.handshake.start(zmq.Context.instance())
        pool = ProcessorPool(self.config.multimodal) if self.config.multimodal else None
        if pool is not None:
            self.state.mm_pool = pool
            await pool.spawn()  # they import vLLM while the engine starts
        await self.engine.start(
            timeout=self.config.engine_ready_timeout, progress=self.notifier.status
        )
        if pool is not None:
            ready = cast(ReadyResponse, self.state.ready)
            await pool.configure(ready.max_model_len, ready.dtype)
        await self._start_lora()
        self.pooling = await engine_tasks(self.state)
        engine_ready_at, engine_ready_cpu = time.monotonic(), time.process_time()
        self.runner = web.AppRunner(
            self.make_app(),
            handler_cancellation=True,
            access_log=None,
            **listeners.runner_kwargs(self.config.ops),
        )
        await self.runner.setup()
        config = self.config
        where = await listeners.start_sites(
            self.runner,
            config.host,
            config.port,
            config.ops,
            reuse_port=config.shared is not None,
            handoff=config.handoff,
        )
        # Everything allocated so far lives for the whole process: keep it out
        # of every future collection (vLLM's freeze_gc_heap). Per-request
        # objects are mostly acyclic and short-lived, so collections can be
        # rare: with the default thresholds full collections of 25-37 ms
        # showed up under load (4-5 % of the CPU; ~1 % with these).
        gc.collect()
        gc.freeze()
        gc.set_threshold(*GC_THRESHOLDS)
        log.info(
            "serving on %s (%.2f s after the engine was ready, of which %.2f s CPU; %.1f s total)",
            where,
            time.monotonic() - engine_ready_at,
            time.process_time() - engine_ready_cpu,
            time.monotonic() - started,
        )
        self.notifier.ready(f"serving on {where}")
        if config.shared is not None:
            config.shared.ready[config.client_index] = 1
            self._heartbeat = asyncio.create_task(self._beat(config.shared))

    async def _beat(self, shared: Any) -> None:
        """The supervisor's proof that this worker's event loop runs (its
        watchdog); and this worker's metrics, for the other workers' /metrics."""
        service = self.metrics.service
        while True:
            shared.heartbeat[self.config.client_index] = time.monotonic()
            if service is not None:
                service.write(self.metrics.snapshot())
            await asyncio.sleep(HEARTBEAT_S)

    async def _start_lora(self) -> None:
        """Refuse an engine without LoRA if adapters are asked for; then load
        ``--lora-modules`` into it before serving (any failure stops the start)."""
        config, ready = self.config, self.state.ready
        assert ready is not None  # (the engine is attached: start() awaited it)
        if (config.require_lora or config.lora_modules) and not ready.supports_lora:
            flag = "--lora-modules" if config.lora_modules else "--enable-lora"
            raise ValueError(
                f"{flag}: the engine does not support LoRA (its ready response says "
                "supports_lora=false); start the engine with --enable-lora and a "
                "--max-lora-rank at least the adapters' rank"
            )
        if config.serving.runtime_lora_updating:
            log.warning(
                "LoRA dynamic loading & unloading is enabled in the API server. "
                "This should ONLY be used for local development!"
            )
        await self.state.lora.load_static(config.lora_modules)
        if config.lora_modules:
            log.info(
                "LoRA adapters: %s (the engine has %d LoRA slots per batch)",
                ", ".join(m.name for m in config.lora_modules),
                ready.max_loras,
            )

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
        log.info(
            "shutting down: draining %d engine requests (up to %.0f s)",
            len(self.table),
            self.config.shutdown_timeout,
        )
        deadline = time.monotonic() + self.config.shutdown_timeout
        while (len(self.table) or self.limits.requests) and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        if len(self.table):
            log.warning("aborting %d engine requests still running", len(self.table))
            self.table.abort_all("the frontend is shutting down")
        if self.runner is not None:
            await self.runner.cleanup()
        await self.close_engine_link()
        if self.state.mm_pool is not None:
            await self.state.mm_pool.close()
        log.info("stopped")

    async def close_engine_link(self) -> None:
        if self.handshake is not None:
            await self.handshake.close()
        await self.engine.close()


def root_path_middleware(root: str):
    """--root-path: a request under the prefix is handled as the same path
    without it (Starlette's root_path, as vLLM's server routes it)."""

    @web.middleware
    async def strip_root(request: web.Request, handler):
        path = request.path
        if path.startswith(root + "/"):
            stripped = request.rel_url.with_path(path[len(root) :])
            request = request.clone(rel_url=stripped)
        return await handler(request)

    return strip_root
