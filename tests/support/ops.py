"""A mock engine and our frontend, for the operations tests (tests/test_ops_*.py).

Like ``start_mock_stack`` (tests/support/frontend.py), plus what those tests
need: an environment for the frontend (``NOTIFY_SOCKET``, ``VLLM_API_KEY``),
the engine started later than the frontend, and readiness checks for
listeners that are not plain HTTP on a port (TLS, Unix socket).

A pytest plugin (``tests/conftest.py``): test modules use the fixture by name.
"""

from __future__ import annotations

import asyncio
import json
import signal
import ssl
import subprocess
import time
from pathlib import Path
from typing import Any, Callable, Iterator

import aiohttp
import pytest

from harness.engines import mock_engine_command
from harness.frontend import FrontendProcess
from harness.ports import HOST, free_port, free_port_triple
from harness.procs import REPO_ROOT
from harness.waits import wait_for


class OpsStack:
    def __init__(self, frontend: FrontendProcess, engine_cmd: list[str], engine_log: Path,
                 control_addr: str, scheme: str = "http") -> None:
        self.frontend = frontend
        self.engine_cmd = engine_cmd
        self.engine_log = engine_log
        self.engine: subprocess.Popen | None = None
        self.control_addr = control_addr
        self.url = f"{scheme}://127.0.0.1:{frontend.port}"

    def start_engine(self) -> None:
        with open(self.engine_log, "ab") as log:
            self.engine = subprocess.Popen(self.engine_cmd, cwd=REPO_ROOT, stdout=log,
                                           stderr=subprocess.STDOUT, start_new_session=True)

    def control(self):
        from engine_core.mock_control import MockControl
        return MockControl(self.control_addr)

    def wait_engine_idle(self, timeout: float = 10.0) -> dict:
        """Until the mock has nothing running or waiting; returns its stats."""
        stats: dict = {}

        def idle() -> bool:
            nonlocal stats
            stats = self.control().stats()
            return stats["running"] == 0 and stats["waiting"] == 0

        wait_for(idle, timeout, message=lambda: f"engine not idle: {stats}")
        return stats

    def stop(self) -> None:
        # The engine first, while the frontend still reads its last outputs: a
        # mock whose frontend is gone lingers seconds on its unsent output.
        if self.engine is not None and self.engine.poll() is None:
            if self.frontend.proc.poll() is None:
                self.engine.terminate()
            else:
                self.engine.kill()
            try:
                self.engine.wait(10)
            except subprocess.TimeoutExpired:
                self.engine.kill()
                self.engine.wait()
        self.frontend.stop()


def wait_until(check: Callable[[], bool], timeout: float, what: str,
               proc: FrontendProcess | None = None) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.proc.poll() is not None:
            raise RuntimeError(f"frontend exited with {proc.proc.returncode} while waiting "
                               f"for {what}:\n{proc.log()[-3000:]}")
        try:
            if check():
                return
        except (OSError, aiohttp.ClientError, asyncio.TimeoutError):
            pass
        time.sleep(0.1)
    log = proc.log()[-3000:] if proc is not None else ""
    raise TimeoutError(f"{what} not reached after {timeout} s\n{log}")


@pytest.fixture
def start_ops_stack(tiny_model_dir, tmp_path) -> Iterator[Callable[..., OpsStack]]:
    """``start_ops_stack(*frontend_args, engine_args=(), env=None, engine=True,
    ready=None, scheme="http")`` -> OpsStack.

    ``ready(stack) -> bool`` replaces the plain-HTTP /health poll; with
    ``engine=False`` the engine is left for the test to start, and nothing is
    awaited.
    """
    stacks: list[OpsStack] = []

    def start(*frontend_args: str, engine_args: tuple[str, ...] = (),
              env: dict[str, str] | None = None, engine: bool = True,
              ready: Callable[[OpsStack], bool] | None = None,
              scheme: str = "http") -> OpsStack:
        port = free_port_triple()
        engine_addr = f"tcp://{HOST}:{port}"
        control_addr = f"tcp://{HOST}:{free_port()}"
        fe = FrontendProcess(engine_addr, tiny_model_dir, tmp_path, *frontend_args,
                             state_file=tmp_path / f"ops-{port}.state", env=env)
        engine_cmd = mock_engine_command(engine_addr, tiny_model_dir, *engine_args,
                                         control_addr=control_addr)
        stack = OpsStack(fe, engine_cmd, tmp_path / f"ops-mock-{port}.log", control_addr,
                         scheme)
        stacks.append(stack)
        if not engine:
            return stack
        stack.start_engine()
        if ready is None:
            fe.wait_healthy(timeout=30)
        else:
            wait_until(lambda: ready(stack), 30, "frontend ready", fe)
        return stack

    yield start
    for stack in stacks:
        stack.stop()


# ------------------------------------------------------------------ aiohttp helpers
def run(coro):
    return asyncio.run(coro)


async def post_json(session: aiohttp.ClientSession, url: str, body: Any,
                    **kwargs: Any) -> tuple[int, Any, Any]:
    """(status, parsed JSON or text, headers)."""
    async with session.post(url, json=body, **kwargs) as r:
        text = await r.text()
        try:
            data = json.loads(text)
        except ValueError:
            data = text
        return r.status, data, r.headers


async def read_stream(response: aiohttp.ClientResponse) -> list[Any]:
    """Every ``data:`` event of an SSE body (``[DONE]`` as the string)."""
    events: list[Any] = []
    buffer = b""
    async for chunk in response.content.iter_any():
        buffer += chunk
        while b"\n\n" in buffer:
            event, buffer = buffer.split(b"\n\n", 1)
            event = event.lstrip(b"\n")
            if event.startswith(b"data: "):
                payload = event[len(b"data: "):]
                events.append("[DONE]" if payload == b"[DONE]" else json.loads(payload))
    return events


def stream_tokens(events: list[Any]) -> int:
    """Tokens in a /v1/completions stream (return_token_ids must be on)."""
    return sum(len(c.get("token_ids") or []) for e in events if isinstance(e, dict)
               for c in e.get("choices", []))


def sigterm(stack: OpsStack) -> None:
    stack.frontend.proc.send_signal(signal.SIGTERM)


def tls_client_context(ca_file: Path, cert: Path | None = None,
                       key: Path | None = None) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=str(ca_file))
    if cert is not None:
        ctx.load_cert_chain(str(cert), str(key))
    return ctx
