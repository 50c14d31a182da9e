"""An engine (``engine-core --mock`` or a real ``engine-core`` on the tiny model)
and our frontend as separate processes, for the reliability tools (soak,
chaos, fuzz): each can be killed, stopped or started again on the same
addresses, as systemd would.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Sequence

from harness import procs
from harness.engines import MODEL_ARGS, mock_engine_command, real_engine_command
from harness.frontend import frontend_command
from harness.models import tiny_model_dir
from harness.ports import HOST, free_port, free_port_triple
from harness.waits import wait_healthy


def log(message: str) -> None:
    print(f"{Path(sys.argv[0]).stem}: {message}", file=sys.stderr, flush=True)


def raise_fd_limit() -> int:
    """Soft RLIMIT_NOFILE up to the hard limit (inherited by the processes we start)."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    return hard


class Stack:
    """One engine and one frontend on fixed addresses; either can be restarted."""

    def __init__(self, engine: str, workdir: Path, *, model_dir: Path | None = None,
                 frontend_args: Sequence[str] = (), engine_args: Sequence[str] = (),
                 mock_step_time: float = 0.002) -> None:
        assert engine in ("mock", "real")
        self.kind = engine
        self.workdir = workdir
        self.model_dir = model_dir or tiny_model_dir(log)
        self.engine_addr = f"tcp://{HOST}:{free_port_triple()}"
        self.port = free_port()
        self.url = f"http://{HOST}:{self.port}"
        self.frontend_args = list(frontend_args)
        self.engine_args = list(engine_args)
        self.mock_step_time = mock_step_time
        self.engine: procs.Proc | None = None
        self.frontend: procs.Proc | None = None
        self.starts = {"engine": 0, "frontend": 0}

    # ------------------------------------------------------------ processes
    def start_engine(self) -> procs.Proc:
        """A new engine saying HELLO at the frontend's handshake address."""
        if self.kind == "mock":
            argv = mock_engine_command(self.engine_addr, self.model_dir,
                                       "--step-time", str(self.mock_step_time))
        else:
            argv = real_engine_command(self.model_dir, self.engine_addr, *MODEL_ARGS)
        self.starts["engine"] += 1
        self.engine = procs.Proc("engine", [*argv, *self.engine_args], None,
                                 self.workdir / f"engine-{self.starts['engine']}.log")
        return self.engine

    def start_frontend(self, *extra: str) -> procs.Proc:
        """A frontend on the same HTTP port, engine addresses and state file."""
        argv = frontend_command(self.engine_addr, self.model_dir, self.port,
                                "--enable-debug-endpoints", *self.frontend_args, *extra,
                                state_file=self.workdir / "engine.state")
        self.starts["frontend"] += 1
        self.frontend = procs.Proc("frontend", argv, None,
                                   self.workdir / f"frontend-{self.starts['frontend']}.log")
        return self.frontend

    def start(self, timeout: float = 600.0) -> None:
        self.start_frontend()
        self.start_engine()
        self.wait_healthy(timeout)

    def wait_healthy(self, timeout: float = 600.0) -> float:
        """Until /health says 200; the wall-clock time it first did."""
        running = [p for p in (self.frontend, self.engine) if p is not None]
        return wait_healthy(self.url, running, timeout, poll=0.01)

    def stop(self) -> None:
        for proc in (self.frontend, self.engine):
            if proc is not None:
                proc.stop()

    def __enter__(self) -> Stack:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ------------------------------------------------------------ the engine core
    def engine_core_pid(self) -> int:
        """The process that runs the engine's busy loop: vLLM's ``VLLM::EngineCore``
        below engine-core (a real engine), or the mock itself."""
        assert self.engine is not None
        if self.kind == "mock":
            return self.engine.pid
        for pid in procs.tree(self.engine.pid):
            try:
                title = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0]
            except OSError:
                continue
            if title.startswith(b"VLLM::EngineCore"):
                return pid
        raise RuntimeError("no VLLM::EngineCore process below engine-core")

    def signal_engine_core(self, signum: int) -> int:
        pid = self.engine_core_pid()
        os.kill(pid, signum)
        return pid

    def wait_engine_exit(self, timeout: float) -> int | None:
        assert self.engine is not None
        try:
            return self.engine.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            return None

    def kill_frontend(self) -> None:
        assert self.frontend is not None
        os.killpg(self.frontend.pid, signal.SIGKILL)
        self.frontend.proc.wait(10)

    def frontend_rss(self) -> int:
        assert self.frontend is not None
        return procs.rss_bytes([self.frontend.pid])


def frontend_has_flag(flag: str) -> bool:
    """Whether ``frontend --help`` lists ``flag``."""
    out = subprocess.run([str(procs.BIN_DIR / "frontend"), "--help"], cwd=procs.REPO_ROOT,
                         capture_output=True, text=True, timeout=60)
    return flag in out.stdout
