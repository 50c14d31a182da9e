"""Our frontend as a real process, in front of a real or a mock engine.

``real_stack`` (session): one real vLLM engine for the whole test session and
our frontend attached to it. A headless engine handshakes only once, but our
frontend re-attaches to a running engine from its state file, so a test can
restart the frontend with other flags (``real_stack.restarted(...)``) and keep
the same engine.

``frontend`` (function): the session stack, plus the check every test gets for
free: afterwards the fan-out table is empty and the engine has no request left.

``start_mock_stack`` (function): a mock engine (``engine-core --mock``) and a
frontend, for fast tests and fault injection.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Iterator

import pytest

from tests.support.mock_engine import free_port
from tests.support.real_engine import REPO_ROOT, free_port_triple
from tests.support.waits import wait_for

BIN_DIR = Path(sys.executable).parent
SERVED_NAME = "tiny"
IDLE_TIMEOUT_S = 10.0


class FrontendProcess:
    """``frontend --engine-addr ... --model ...`` with a log file; always stopped."""

    def __init__(self, engine_addr: str, model_dir: Path, workdir: Path, *extra_args: str,
                 state_file: Path | None = None, port: int | None = None,
                 env: dict[str, str] | None = None, argv: list[str] | None = None) -> None:
        self.engine_addr = engine_addr
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.state_file = state_file or workdir / "engine.state"
        self.log_path = workdir / f"frontend-{self.port}-{time.monotonic_ns()}.log"
        self.command = [
            str(BIN_DIR / "frontend"), "--engine-addr", engine_addr, "--model", str(model_dir),
            "--served-model-name", SERVED_NAME, "--host", "127.0.0.1", "--port", str(self.port),
            "--engine-state-file", str(self.state_file), "--enable-debug-endpoints",
            *extra_args]
        if argv is not None:  # a whole command line of the caller's (and the port)
            self.command = [str(BIN_DIR / "frontend"), *argv, "--port", str(self.port)]
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(self.command, cwd=REPO_ROOT, stdout=log,
                                         stderr=subprocess.STDOUT, start_new_session=True,
                                         env={**os.environ, **(env or {})})

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def wait_healthy(self, timeout: float = 300.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"frontend exited with {self.proc.returncode}:\n{self.log()}")
            try:
                with urllib.request.urlopen(self.url + "/health", timeout=2) as r:
                    if r.status == 200:
                        return
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                pass
            time.sleep(0.1)
        raise TimeoutError(f"frontend not healthy after {timeout} s:\n{self.log()[-3000:]}")

    def get_json(self, path: str) -> dict:
        with urllib.request.urlopen(self.url + path, timeout=10) as r:
            return json.loads(r.read())

    def debug_state(self) -> dict:
        return self.get_json("/debug/state")

    def wait_idle(self, timeout: float = IDLE_TIMEOUT_S) -> dict:
        """Until nothing is in flight: table empty and the engine has no work.

        With several frontend processes (--api-server-count) each answers for
        itself and connections land on any: until every worker said so.
        """
        state: dict = {}
        idle_workers: dict[int, bool] = {}

        def idle() -> bool:
            nonlocal state
            state = self.debug_state()
            idle_workers[state["worker"]] = (state["table"] == 0
                                             and state["engine_has_work"] is False)
            return len(idle_workers) == state["workers"] and all(idle_workers.values())

        wait_for(idle, timeout, interval=0.02,
                 message=lambda: f"frontend not idle: {state}, workers {idle_workers}")
        return state

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 15.0) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        return self.proc.returncode


class RealStack:
    """The session's real engine and the frontend currently attached to it."""

    def __init__(self, engine, model_dir: Path, workdir: Path) -> None:
        self.engine = engine
        self.model_dir = model_dir
        self.workdir = workdir
        self.state_file = workdir / "engine.state"
        self.frontend = self._start()

    @property
    def url(self) -> str:
        return self.frontend.url

    def _start(self, *extra_args: str, env: dict[str, str] | None = None,
               argv: list[str] | None = None) -> FrontendProcess:
        fe = FrontendProcess(self.engine.handshake_addr, self.model_dir, self.workdir,
                             *extra_args, state_file=self.state_file, env=env, argv=argv)
        try:
            fe.wait_healthy()
        except Exception:
            fe.stop(signal.SIGKILL)
            raise RuntimeError(f"frontend failed; engine log:\n{self.engine.log_tail()}")
        return fe

    @contextlib.contextmanager
    def restarted(self, *extra_args: str, env: dict[str, str] | None = None,
                  argv: list[str] | None = None) -> Iterator[FrontendProcess]:
        """A frontend with other flags on the same engine (re-attached), then back.
        ``argv``: a whole command line instead of the usual one plus ``extra_args``
        (it must re-attach by itself: its --engine-state-file, or this stack's
        state file where the frontend looks by default)."""
        self.frontend.stop()
        fe = self._start(*extra_args, env=env, argv=argv)
        try:
            yield fe
        finally:
            fe.stop()
            self.frontend = self._start()


@pytest.fixture(scope="session")
def real_stack(start_real_engine, tiny_model_dir, tmp_path_factory) -> Iterator[RealStack]:
    stack = RealStack(start_real_engine(), tiny_model_dir,
                      tmp_path_factory.mktemp("real-stack"))
    yield stack
    stack.frontend.stop()


@pytest.fixture
def frontend(real_stack: RealStack) -> Iterator[FrontendProcess]:
    """Our frontend on the real engine; afterwards nothing may be left in flight."""
    fe = real_stack.frontend
    yield fe
    if fe.proc.poll() is None:
        fe.wait_idle()


class MockStack:
    def __init__(self, frontend: FrontendProcess, engine: subprocess.Popen,
                 control_addr: str, engine_addr: str = "", model_dir: Path | None = None,
                 workdir: Path | None = None) -> None:
        self.frontend = frontend
        self.engine = engine
        self.control_addr = control_addr
        self.engine_addr = engine_addr
        self.model_dir = model_dir
        self.workdir = workdir
        self.engines = [engine]

    def start_engine(self, *engine_args: str) -> subprocess.Popen:
        """A new mock engine (and control address) for the same frontend, e.g. after
        the first one died; it says HELLO at the frontend's handshake address."""
        self.control_addr = f"tcp://127.0.0.1:{free_port()}"
        self.engine = _spawn_mock_engine(self.engine_addr, self.model_dir, self.workdir,
                                         self.control_addr, engine_args)
        self.engines.append(self.engine)
        return self.engine

    def stop(self) -> None:
        self.frontend.stop()
        for engine in self.engines:
            if engine.poll() is None:
                engine.terminate()
                try:
                    engine.wait(10)
                except subprocess.TimeoutExpired:
                    engine.kill()
                    engine.wait()

    @property
    def url(self) -> str:
        return self.frontend.url

    def control(self):
        from engine_core.mock_control import MockControl
        return MockControl(self.control_addr)


def _spawn_mock_engine(engine_addr: str, model_dir: Path, workdir: Path, control_addr: str,
                       engine_args: tuple[str, ...]) -> subprocess.Popen:
    with open(workdir / f"mock-engine-{time.monotonic_ns()}.log", "wb") as log:
        return subprocess.Popen(
            [str(BIN_DIR / "engine-core"), "--mock", "--frontend-addr", engine_addr,
             "--model", str(model_dir), "--control-addr", control_addr, *engine_args],
            cwd=REPO_ROOT, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)


def launch_mock_stack(model_dir: Path, workdir: Path, *frontend_args: str,
                      engine_args: tuple[str, ...] = ()) -> MockStack:
    """A mock engine and a frontend attached to it; the caller must ``stop()`` it."""
    port = free_port_triple()
    engine_addr = f"tcp://127.0.0.1:{port}"
    control_addr = f"tcp://127.0.0.1:{free_port()}"
    fe = FrontendProcess(engine_addr, model_dir, workdir, *frontend_args,
                         state_file=workdir / f"mock-{port}.state")
    engine = _spawn_mock_engine(engine_addr, model_dir, workdir, control_addr, engine_args)
    stack = MockStack(fe, engine, control_addr, engine_addr, model_dir, workdir)
    try:
        fe.wait_healthy(timeout=30)
    except BaseException:
        stack.stop()
        raise
    return stack


@pytest.fixture
def start_mock_stack(tiny_model_dir, tmp_path) -> Iterator:
    """``start_mock_stack(*frontend_args, engine_args=())`` -> MockStack."""
    stacks: list[MockStack] = []

    def start(*frontend_args: str, engine_args: tuple[str, ...] = ()) -> MockStack:
        stack = launch_mock_stack(tiny_model_dir, tmp_path, *frontend_args,
                                  engine_args=engine_args)
        stacks.append(stack)
        return stack

    yield start
    for stack in stacks:
        stack.stop()
