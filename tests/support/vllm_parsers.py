"""vLLM's own API server with parser flags, several flag sets in one process.

``VllmMultiServer`` runs tests/support/vllm_multi_server.py: one vLLM API
server process attached to one engine (a real headless engine or the mock,
whichever connects to its handshake address), serving one app per named flag
set (``--enable-auto-tool-choice --tool-call-parser hermes``, ...) on its own
port. Starting it costs one vLLM import (~20-50 s on a 2-core host); each flag
set adds about a second.

As ``vllm_frontend``, the process is launched at construction and waited for
on first use of ``url``; its process group is killed by ``stop()``.
"""

from __future__ import annotations

import contextlib
import json
import sys
import time
from pathlib import Path
from typing import Any, Iterator, Sequence

from harness.engine_harness import spawn_mock
from harness.engines import cpu_env
from harness.ports import HOST, free_port
from harness.procs import REPO_ROOT, log_tail, spawn, stop_group
from harness.vllm_server import attached_serve_args
from harness.waits import Watch, Watched, wait_healthy

READY_TIMEOUT_S = 600.0


def parser_flags(tool: str | None, reasoning: str | None) -> list[str]:
    """vLLM's (and our) flags for a tool-call parser and a reasoning parser."""
    flags = ["--enable-auto-tool-choice", "--tool-call-parser", tool] if tool else []
    return flags + (["--reasoning-parser", reasoning] if reasoning else [])


class VllmMultiServer:
    name = "vLLM's API server"

    def __init__(self, model_dir: Path, engine_port: int, configs: dict[str, list[str]],
                 log_path: Path, *extra_args: str, watch: Sequence[Watched] = (),
                 env: dict[str, str] | None = None) -> None:
        self.ports = {name: free_port() for name in configs}
        self.log_path = log_path
        self.watch = list(watch)  # processes whose death means we will never be ready
        base = [*attached_serve_args(model_dir, engine_port), *extra_args]
        layout = [[self.ports[name], flags] for name, flags in configs.items()]
        self.ready = False
        self.started_at = time.monotonic()
        self.proc = spawn([sys.executable, "-m", "tests.support.vllm_multi_server",
                           json.dumps(base), json.dumps(layout)], log_path,
                          {**cpu_env(), "PYTHONPATH": str(REPO_ROOT), **(env or {})})

    def url(self, name: str) -> str:
        if not self.ready:
            self.wait_ready()
        return f"http://{HOST}:{self.ports[name]}"

    def log_tail(self, lines: int = 60) -> str:
        return log_tail(self.log_path, lines)

    def wait_ready(self, timeout: float = READY_TIMEOUT_S) -> None:
        for port in self.ports.values():
            left = self.started_at + timeout - time.monotonic()
            wait_healthy(f"http://{HOST}:{port}", [self, *self.watch], max(left, 0.0), poll=0.3)
        self.ready = True

    def stop(self) -> None:
        stop_group(self.proc, 15)


@contextlib.contextmanager
def on_scripted_mock(model_dir: Path, configs: dict[str, list[str]], workdir: Path,
                     step_time: str) -> Iterator[tuple[VllmMultiServer, Any]]:
    """A ``VllmMultiServer`` with ``configs`` on one scripted mock engine stepping
    every ``step_time`` s: (the server, the mock's control), both stopped after."""
    port = free_port()
    mock, control = spawn_mock(f"tcp://127.0.0.1:{port}", workdir / "mock.log",
                               "--model", str(model_dir), "--step-time", step_time)
    server = VllmMultiServer(model_dir, port, configs, workdir / "vllm.log",
                             watch=[Watch("the mock engine", mock, workdir / "mock.log")])
    try:
        yield server, control
    finally:
        server.stop()
        mock.terminate()
        mock.wait(10)
