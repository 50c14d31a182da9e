"""vLLM's own Python API server, as the reference for parity tests.

``vllm_frontend`` (session): a second headless real engine (the
``start_real_engine`` factory, same model args as ``real_stack``'s) and the
unmodified ``vllm serve`` API server attached to it, so that every parity test
can send one request to our frontend and the same request to vLLM's::

    vllm serve MODEL_DIR --data-parallel-size 1 --data-parallel-size-local 0
        --data-parallel-address 127.0.0.1 --data-parallel-rpc-port <engine port>
        --host 127.0.0.1 --port <free> --max-model-len 1024 --dtype float32
        --served-model-name tiny --enable-scale-out

``--data-parallel-size-local 0`` makes the API server launch no engine of its
own: it binds the DP handshake at ``--data-parallel-address``/``-rpc-port``,
the address the headless engine connects to (exactly what our frontend does).
``--enable-scale-out`` serves ``/inference/v1/generate``.

Start-up takes a while on a CPU host (~20 s warm, minutes on a cold 2-core
box), so the processes are launched when the fixture is set up and waited for
on first use of ``url``: set up before ``frontend``/``real_stack`` (list it
first in a test's arguments) and both stacks start at the same time. The API
server logs to a file (``log_path``); its whole process group is killed at the
end of the session.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Iterator

import pytest

from tests.support.frontend import BIN_DIR, SERVED_NAME
from tests.support.mock_engine import free_port
from tests.support.real_engine import HOST, MODEL_ARGS, REPO_ROOT, RealEngine, cpu_env

READY_TIMEOUT_S = 600.0
STOP_TIMEOUT_S = 15.0


class VllmFrontend:
    """``vllm serve`` (API server only) attached to one headless ``RealEngine``."""

    def __init__(self, engine: RealEngine, model_dir: Path, log_path: Path,
                 *extra_args: str, env: dict[str, str] | None = None) -> None:
        self.engine = engine
        self.port = free_port()
        self._url = f"http://{HOST}:{self.port}"
        self.log_path = log_path
        engine_port = engine.handshake_addr.rsplit(":", 1)[1]
        self.command = [
            str(BIN_DIR / "vllm"), "serve", str(model_dir),
            "--data-parallel-size", "1", "--data-parallel-size-local", "0",
            "--data-parallel-address", HOST, "--data-parallel-rpc-port", engine_port,
            "--host", HOST, "--port", str(self.port), *MODEL_ARGS,
            "--served-model-name", SERVED_NAME, "--enable-scale-out", *extra_args]
        self.ready = False
        with open(log_path, "wb") as log:
            self.started_at = time.monotonic()
            self.proc = subprocess.Popen(self.command, cwd=REPO_ROOT, stdout=log,
                                         stderr=subprocess.STDOUT, start_new_session=True,
                                         env={**os.environ, **cpu_env(), **(env or {})})

    @property
    def url(self) -> str:
        """The base URL; the first use waits until the server answers /health."""
        if not self.ready:
            self.wait_ready()
        return self._url

    def log_tail(self, lines: int = 60) -> str:
        text = self.log_path.read_text(errors="replace").splitlines()
        return "\n".join(text[-lines:])

    def wait_ready(self, timeout: float = READY_TIMEOUT_S) -> None:
        deadline = self.started_at + timeout
        while time.monotonic() < deadline:
            for name, proc in (("vllm serve", self.proc), ("the engine", self.engine.proc)):
                if proc.poll() is not None:
                    raise RuntimeError(
                        f"{name} exited with {proc.returncode} before vLLM's API server was "
                        f"ready.\nAPI server log:\n{self.log_tail()}\n"
                        f"engine log:\n{self.engine.log_tail()}")
            try:
                with urllib.request.urlopen(self._url + "/health", timeout=2) as r:
                    if r.status == 200:
                        self.ready = True
                        return
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                pass
            time.sleep(0.2)
        raise TimeoutError(f"vLLM's API server not ready after {timeout} s:\n"
                           f"{self.log_tail()}\nengine log:\n{self.engine.log_tail()}")

    def stop(self) -> None:
        """SIGTERM to the API server's process group, SIGKILL after a grace period."""
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
            try:
                self.proc.wait(STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                pass
        try:  # whatever is left of the group, also after a clean exit of the leader
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait()


@pytest.fixture(scope="session")
def vllm_frontend(start_real_engine, tiny_model_dir, tmp_path_factory) -> Iterator[VllmFrontend]:
    """vLLM's own API server on its own real engine (``.url``), for the session."""
    engine = start_real_engine()
    server = VllmFrontend(engine, tiny_model_dir,
                          tmp_path_factory.mktemp("vllm-frontend") / "vllm-serve.log")
    try:
        yield server
    finally:
        server.stop()
        engine.stop()
