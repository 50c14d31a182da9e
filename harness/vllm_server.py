"""vLLM's own Python API server (``vllm serve``) attached to a headless engine.

``--data-parallel-size-local 0`` makes the API server launch no engine of its
own: it binds the DP handshake at ``--data-parallel-address``/``-rpc-port``,
the address the headless engine connects to (exactly what our frontend does)::

    vllm serve MODEL_DIR --data-parallel-size 1 --data-parallel-size-local 0
        --data-parallel-address 127.0.0.1 --data-parallel-rpc-port <engine port>
        --host 127.0.0.1 --port <free> --max-model-len 1024 --dtype float32
        --served-model-name tiny ...
"""

from __future__ import annotations

import time
from pathlib import Path

from harness.engines import MODEL_ARGS, RealEngine, cpu_env
from harness.frontend import SERVED_NAME
from harness.ports import HOST, free_port
from harness.procs import BIN_DIR, log_tail, spawn, stop_group
from harness.waits import wait_healthy

READY_TIMEOUT_S = 600.0
STOP_TIMEOUT_S = 15.0


def attached_serve_args(model_dir: Path, engine_port: int | str) -> list[str]:
    """``vllm serve``'s arguments (after ``serve``, before ``--port``) for an API
    server on the headless engine that connects to ``engine_port``."""
    return [str(model_dir), "--data-parallel-size", "1", "--data-parallel-size-local", "0",
            "--data-parallel-address", HOST, "--data-parallel-rpc-port", str(engine_port),
            "--host", HOST, *MODEL_ARGS, "--served-model-name", SERVED_NAME]


def api_server_command(model_dir: Path, engine_port: int | str, port: int, *extra: str
                       ) -> list[str]:
    return [str(BIN_DIR / "vllm"), "serve", *attached_serve_args(model_dir, engine_port),
            "--port", str(port), *extra]


class VllmFrontend:
    """``vllm serve`` (API server only) attached to one headless ``RealEngine``.

    Launched at construction, waited for on first use of ``url``: started
    before our own stack, both start at the same time.
    """

    name = "vllm serve"

    def __init__(self, engine: RealEngine, model_dir: Path, log_path: Path,
                 *extra_args: str, env: dict[str, str] | None = None) -> None:
        self.engine = engine
        self.port = free_port()
        self._url = f"http://{HOST}:{self.port}"
        self.log_path = log_path
        engine_port = engine.handshake_addr.rsplit(":", 1)[1]
        # --enable-scale-out serves /inference/v1/generate.
        self.command = api_server_command(model_dir, engine_port, self.port,
                                          "--enable-scale-out", *extra_args)
        self.ready = False
        self.started_at = time.monotonic()
        self.proc = spawn(self.command, log_path, {**cpu_env(), **(env or {})})

    @property
    def url(self) -> str:
        """The base URL; the first use waits until the server answers /health."""
        if not self.ready:
            self.wait_ready()
        return self._url

    def log_tail(self, lines: int = 60) -> str:
        return log_tail(self.log_path, lines)

    def wait_ready(self, timeout: float = READY_TIMEOUT_S) -> None:
        left = self.started_at + timeout - time.monotonic()
        wait_healthy(self._url, [self, self.engine], max(left, 0.0), poll=0.2)
        self.ready = True

    def stop(self) -> None:
        """SIGTERM to the API server's process group, SIGKILL after a grace period."""
        stop_group(self.proc, STOP_TIMEOUT_S)
