"""Our frontend as a process, in front of any engine; and with a mock engine.

``FrontendProcess`` runs ``frontend --engine-addr ... --model ...`` with a log
file and its debug endpoints (to check that nothing is left in flight).
``launch_mock_stack`` starts a mock engine (``engine-core --mock``) and a
frontend attached to it.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
import urllib.request
from pathlib import Path

from harness.engines import mock_engine_command
from harness.ports import HOST, free_port, free_port_triple
from harness.procs import BIN_DIR, log_tail, spawn
from harness.waits import wait_for, wait_healthy

SERVED_NAME = "tiny"
IDLE_TIMEOUT_S = 10.0


def frontend_command(engine_addr: str, model_dir: Path, port: int, *extra: str,
                     state_file: Path | str = "") -> list[str]:
    """``frontend`` serving ``model_dir`` as ``tiny`` on loopback ``port``, attached
    to the engine(s) at ``engine_addr`` (``state_file`` "": no re-attach state)."""
    return [str(BIN_DIR / "frontend"), "--engine-addr", engine_addr, "--model", str(model_dir),
            "--served-model-name", SERVED_NAME, "--host", HOST, "--port", str(port),
            "--engine-state-file", str(state_file), *extra]


class FrontendProcess:
    """``frontend --engine-addr ... --model ...`` with a log file; always stopped."""

    name = "frontend"

    def __init__(self, engine_addr: str, model_dir: Path, workdir: Path, *extra_args: str,
                 state_file: Path | None = None, port: int | None = None,
                 env: dict[str, str] | None = None, argv: list[str] | None = None) -> None:
        self.engine_addr = engine_addr
        self.port = port or free_port()
        self.url = f"http://{HOST}:{self.port}"
        self.state_file = state_file or workdir / "engine.state"
        self.log_path = workdir / f"frontend-{self.port}-{time.monotonic_ns()}.log"
        self.command = frontend_command(engine_addr, model_dir, self.port,
                                        "--enable-debug-endpoints", *extra_args,
                                        state_file=self.state_file)
        if argv is not None:  # a whole command line of the caller's (and the port)
            self.command = [str(BIN_DIR / "frontend"), *argv, "--port", str(self.port)]
        self.proc = spawn(self.command, self.log_path, env)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def log_tail(self, lines: int = 60) -> str:
        return log_tail(self.log_path, lines)

    def wait_healthy(self, timeout: float = 300.0) -> None:
        wait_healthy(self.url, [self], timeout)

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
        self.control_addr = f"tcp://{HOST}:{free_port()}"
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
    return spawn(mock_engine_command(engine_addr, model_dir, *engine_args,
                                     control_addr=control_addr),
                 workdir / f"mock-engine-{time.monotonic_ns()}.log")


def launch_mock_stack(model_dir: Path, workdir: Path, *frontend_args: str,
                      engine_args: tuple[str, ...] = ()) -> MockStack:
    """A mock engine and a frontend attached to it; the caller must ``stop()`` it."""
    port = free_port_triple()
    engine_addr = f"tcp://{HOST}:{port}"
    control_addr = f"tcp://{HOST}:{free_port()}"
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
