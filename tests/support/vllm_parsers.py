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

import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

from tests.support.frontend import SERVED_NAME
from tests.support.mock_engine import free_port
from tests.support.real_engine import HOST, MODEL_ARGS, REPO_ROOT, cpu_env

READY_TIMEOUT_S = 600.0


def parser_flags(tool: str | None, reasoning: str | None) -> list[str]:
    """vLLM's (and our) flags for a tool-call parser and a reasoning parser."""
    flags = ["--enable-auto-tool-choice", "--tool-call-parser", tool] if tool else []
    return flags + (["--reasoning-parser", reasoning] if reasoning else [])


class VllmMultiServer:
    def __init__(self, model_dir: Path, engine_port: int, configs: dict[str, list[str]],
                 log_path: Path, *extra_args: str, watch: list[subprocess.Popen] = ()
                 ) -> None:
        self.ports = {name: free_port() for name in configs}
        self.log_path = log_path
        self.watch = list(watch)  # processes whose death means we will never be ready
        base = [str(model_dir), "--data-parallel-size", "1", "--data-parallel-size-local", "0",
                "--data-parallel-address", HOST, "--data-parallel-rpc-port", str(engine_port),
                "--host", HOST, *MODEL_ARGS, "--served-model-name", SERVED_NAME, *extra_args]
        layout = [[self.ports[name], flags] for name, flags in configs.items()]
        self.ready = False
        env = {**os.environ, **cpu_env(), "PYTHONPATH": str(REPO_ROOT)}
        with open(log_path, "wb") as log:
            self.started_at = time.monotonic()
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "tests.support.vllm_multi_server", json.dumps(base),
                 json.dumps(layout)], cwd=REPO_ROOT, stdout=log, stderr=subprocess.STDOUT,
                start_new_session=True, env=env)

    def url(self, name: str) -> str:
        if not self.ready:
            self.wait_ready()
        return f"http://{HOST}:{self.ports[name]}"

    def log_tail(self, lines: int = 60) -> str:
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])

    def wait_ready(self, timeout: float = READY_TIMEOUT_S) -> None:
        deadline = self.started_at + timeout
        pending = list(self.ports.values())
        while pending:
            for proc in (self.proc, *self.watch):
                if proc.poll() is not None:
                    raise RuntimeError(f"vLLM's API server (or its engine) exited with "
                                       f"{proc.returncode}:\n{self.log_tail()}")
            try:
                with urllib.request.urlopen(f"http://{HOST}:{pending[0]}/health",
                                            timeout=2) as r:
                    if r.status == 200:
                        pending.pop(0)
                        continue
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                pass
            if time.monotonic() > deadline:
                raise TimeoutError(f"vLLM's API server not ready after {timeout} s:\n"
                                   f"{self.log_tail()}")
            time.sleep(0.3)
        self.ready = True

    def stop(self) -> None:
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGTERM)
                self.proc.wait(15)
            except (ProcessLookupError, subprocess.TimeoutExpired):
                pass
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait()
