"""For the operational-route tests: our frontend and vLLM's server, each on a mock
engine, with the same flags and environment; requests sent to both.

A mock engine behind vLLM's own API server costs nothing but the server's
start (~20 s of CPU): it answers the utility calls the dev-mode routes make
the same way for both frontends, so the answers can be compared exactly.
"""

from __future__ import annotations

import json
import subprocess
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.engines import mock_engine_command
from harness.frontend import FrontendProcess
from harness.ports import HOST, free_port, free_port_triple
from harness.procs import spawn
from harness.vllm_server import VllmFrontend

DEV_MODE = {"VLLM_SERVER_DEV_MODE": "1"}


@dataclass
class MockAsEngine:
    """What VllmFrontend needs of its engine, for a mock engine."""

    name = "the mock engine"
    handshake_addr: str
    log_path: Path
    proc: subprocess.Popen | None = None

    def log_tail(self) -> str:
        return self.log_path.read_text(errors="replace")[-3000:]


class Served:
    """A frontend (ours or vLLM's) with its mock engine; ``stop()`` ends both."""

    def __init__(self, frontend: Any, engine: subprocess.Popen) -> None:
        self.frontend = frontend
        self.engine = engine

    @property
    def url(self) -> str:
        return self.frontend.url

    def stop(self) -> None:
        self.frontend.stop()
        if self.engine.poll() is None:
            self.engine.terminate()
            try:
                self.engine.wait(15)
            except subprocess.TimeoutExpired:
                self.engine.kill()
                self.engine.wait()


def ours_on_mock(model_dir: Path, workdir: Path, *flags: str, engine_args: tuple = (),
                 env: dict[str, str] | None = None) -> Served:
    port = free_port_triple()
    addr = f"tcp://{HOST}:{port}"
    fe = FrontendProcess(addr, model_dir, workdir, *flags, env=env,
                         state_file=workdir / f"mock-{port}.state")
    engine = spawn(mock_engine_command(addr, model_dir, *engine_args),
                   workdir / f"mock-{port}.log")
    served = Served(fe, engine)
    try:
        fe.wait_healthy(timeout=60)
    except BaseException:
        served.stop()
        raise
    return served


def vllm_on_mock(model_dir: Path, workdir: Path, *flags: str, engine_args: tuple = (),
                 env: dict[str, str] | None = None) -> Served:
    """vLLM's API server (started now, waited for on first use of ``url``)."""
    engine = MockAsEngine(f"tcp://{HOST}:{free_port()}", workdir / "vllm-mock.log")
    server = VllmFrontend(engine, model_dir, workdir / "vllm-serve.log", *flags, env=env)
    engine.proc = spawn(mock_engine_command(engine.handshake_addr, model_dir, *engine_args),
                        engine.log_path)
    return Served(server, engine.proc)


@dataclass
class Answer:
    status: int
    content_type: str
    body: bytes

    @property
    def value(self) -> Any:
        """The JSON body, the text of any other, None for an empty one."""
        if not self.body:
            return None
        if self.content_type.startswith("application/json"):
            return json.loads(self.body)
        return self.body.decode()


def call(url: str, method: str, path: str, body: Any = None, *,
         headers: dict[str, str] | None = None, timeout: float = 60.0) -> Answer:
    """``body``: an object sent as JSON, bytes sent as they are, None for none."""
    data = None
    sent = dict(headers or {})
    if body is not None:
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        sent.setdefault("Content-Type", "application/json")
    req = urllib.request.Request(url + path, data=data, method=method, headers=sent)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return Answer(r.status, r.headers.get("Content-Type", ""), r.read())
    except urllib.error.HTTPError as e:
        return Answer(e.code, e.headers.get("Content-Type", ""), e.read())


def http_body(received: bytes) -> bytes:
    """The body of a raw HTTP/1.1 response (chunked transfer decoded)."""
    head, _, body = received.partition(b"\r\n\r\n")
    if b"transfer-encoding: chunked" not in head.lower():
        return body
    out = b""
    while body:
        size_line, _, rest = body.partition(b"\r\n")
        size = int(size_line.split(b";")[0] or b"0", 16)
        if size == 0:
            break
        out += rest[:size]
        body = rest[size + 2:]
    return out


def sse_events(received: bytes) -> list[Any]:
    """The ``data:`` events of a raw SSE response ("[DONE]" as the string)."""
    events: list[Any] = []
    for block in http_body(received).split(b"\n\n")[:-1]:  # (complete events only)
        block = block.strip()
        if block.startswith(b"data: "):
            payload = block[len(b"data: "):]
            events.append("[DONE]" if payload == b"[DONE]" else json.loads(payload))
    return events
