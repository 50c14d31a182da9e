"""The frontend process: engine link, fan-out table and the aiohttp application."""

from __future__ import annotations

import asyncio
import gc
import hashlib
import logging
import signal
import time
from dataclasses import dataclass, field
from typing import Awaitable, Callable

import msgspec
from aiohttp import web

from frontend import ops, routes, systemd
from frontend.engine_client import EngineAddresses, EngineClient
from frontend.errors import ApiError, not_found_model
from frontend.fanout import Group, RequestFailed, Table
from frontend.model import ModelInfo
from frontend.render import Renderer
from protocol.handshake import ReadyResponse
from protocol.sampling import ModelLimits

log = logging.getLogger("frontend")

GC_THRESHOLDS = (50_000, 50, 100)

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@dataclass
class ServerConfig:
    host: str = "127.0.0.1"
    port: int = 8000
    engine_ready_timeout: float = 600.0
    max_logprobs: int = 20
    force_include_usage: bool = False
    max_stream_buffer: int = 1 << 20
    shutdown_timeout: float = 30.0
    enable_debug_endpoints: bool = False
    max_request_body: int = 32 * 1024 * 1024
    engine_state_file: str | None = None
    extra: dict = field(default_factory=dict)
    ops: ops.OpsConfig = field(default_factory=ops.OpsConfig)


class Server:
    def __init__(self, model: ModelInfo, addresses: EngineAddresses,
                 config: ServerConfig) -> None:
        self.model = model
        self.config = config
        self.engine = EngineClient(addresses, on_outputs=lambda batch: self.table.on_outputs(batch),
                                   on_dead=self._on_engine_dead, on_ready=self._on_ready,
                                   state_file=config.engine_state_file)
        self.notifier = systemd.Notifier.from_env()
        ops.attach(self)  # self.metrics, self.limits_state, self.cors
        self.table = Table(self.engine, model, self.limits, observer=self.metrics.observer)
        self.ready: ReadyResponse | None = None
        self.renderer: Renderer | None = None
        self.draining = False
        self._json = msgspec.json.Encoder()
        self.system_fingerprint: str | None = None
        self.runner: web.AppRunner | None = None
        self._stopped = asyncio.Event()

    # ------------------------------------------------------------ properties
    @property
    def max_model_len(self) -> int:
        assert self.ready is not None
        return self.ready.max_model_len

    @property
    def force_include_usage(self) -> bool:
        return self.config.force_include_usage

    @property
    def max_pending(self) -> int:
        return self.config.max_stream_buffer

    def limits(self) -> ModelLimits:
        return ModelLimits(vocab_size=self.model.vocab_size, max_model_len=self.max_model_len,
                           max_logprobs=self.config.max_logprobs)

    def json(self, value: object) -> bytes:
        return self._json.encode(value)

    # ------------------------------------------------------------ engine events
    def _on_engine_dead(self, reason: str) -> None:
        self.table.fail_all(reason)
        self.notifier.status(f"engine dead ({reason}); waiting for an engine to attach")

    def _on_ready(self, ready: ReadyResponse) -> None:
        self.ready = ready
        self.renderer = Renderer(self.model, ready.max_model_len)
        digest = hashlib.sha256(f"{self.model.path}:{ready.max_model_len}:{ready.dtype}"
                                .encode()).hexdigest()[:8]
        self.system_fingerprint = f"vllm-{ready.vllm_version}-{digest}"
        if self.runner is not None:  # an engine attached after a restart
            self.notifier.status("engine attached again; serving")

    # ------------------------------------------------------------ helpers for routes
    def resolve_model(self, name: str | None) -> str:
        if not name:
            return self.model.name
        if name in self.model.served_names:
            return name
        raise not_found_model(name, self.model.served_names)

    def raise_if_failed(self, group: Group) -> None:
        if group.error is not None:
            raise ApiError(group.error.message, group.error.status, group.error.err_type)

    def check_alive(self) -> None:
        if not self.engine.alive:
            raise ApiError(f"EngineCore encountered an issue. See stack trace (if any) for "
                           f"the root cause. ({self.engine.death_reason})", 500,
                           "InternalServerError")

    # ------------------------------------------------------------ aiohttp app
    def make_app(self) -> web.Application:
        app = web.Application(middlewares=[*ops.middlewares(self), self._error_middleware],
                              client_max_size=self.config.max_request_body)
        routes.add_routes(app, self)
        ops.install(app, self)
        return app

    @web.middleware
    async def _error_middleware(self, request: web.Request, handler: Handler):
        try:
            return await handler(request)
        except ApiError as e:
            return web.Response(status=e.status, body=e.body(),
                                content_type="application/json")
        except RequestFailed as e:
            err = ApiError(e.message, e.status, e.err_type)
            return web.Response(status=err.status, body=err.body(),
                                content_type="application/json")
        except web.HTTPRequestEntityTooLarge as e:
            err = ApiError(e.text or "Request body too large", 413, "RequestEntityTooLarge")
            return web.Response(status=413, body=err.body(), content_type="application/json")
        except web.HTTPException:
            raise
        except (ConnectionResetError, asyncio.CancelledError):
            raise
        except Exception as e:
            log.exception("unhandled error in %s %s", request.method, request.path)
            err = ApiError(f"Internal server error: {type(e).__name__}", 500,
                           "InternalServerError")
            return web.Response(status=500, body=err.body(), content_type="application/json")

    # ------------------------------------------------------------ lifecycle
    async def start(self) -> None:
        started = time.monotonic()
        self.notifier.start_watchdog()
        self.notifier.status(f"waiting for an engine at {self.engine.addresses.handshake}")
        await self.engine.start(timeout=self.config.engine_ready_timeout,
                                progress=self.notifier.status)
        engine_ready_at = time.monotonic()
        self.runner = web.AppRunner(self.make_app(), handler_cancellation=True,
                                    access_log=None, **ops.runner_kwargs(self))
        await self.runner.setup()
        where = await ops.start_sites(self.runner, self)
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
        self.draining = True
        self.notifier.stopping("draining")
        log.info("shutting down: draining %d engine requests (up to %.0f s)",
                 len(self.table), self.config.shutdown_timeout)
        deadline = time.monotonic() + self.config.shutdown_timeout
        while ((len(self.table) or self.limits_state.requests)
               and time.monotonic() < deadline):
            await asyncio.sleep(0.05)
        if len(self.table):
            log.warning("aborting %d engine requests still running", len(self.table))
            self.table.abort_all("the frontend is shutting down")
        if self.runner is not None:
            await self.runner.cleanup()
        await self.engine.close()
        log.info("stopped")
