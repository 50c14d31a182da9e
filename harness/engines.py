"""Engine processes: the command lines of ``engine-core --mock``, ``engine-core``
and plain ``vllm serve --headless``, and ``RealEngine``, a headless real engine
that stops with its whole process tree.

A headless engine connects to whatever binds its handshake address: our
frontend (``harness.frontend``), vLLM's API server (``harness.vllm_server``)
or a test's engine link.
"""

from __future__ import annotations

import os
import signal
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Iterable, Sequence

from engine_core import launcher
from harness.ports import HOST, free_port_triple
from harness.procs import BIN_DIR, log_tail, spawn

# The settings of every real engine on the tiny model (and of vLLM's server on it).
MAX_MODEL_LEN = 1024
DTYPE = "float32"
MODEL_ARGS = ("--max-model-len", str(MAX_MODEL_LEN), "--dtype", DTYPE)
STOP_TIMEOUT_S = 15.0


def cpu_env() -> dict[str, str]:
    """What engine-core adds to vLLM's environment for a local model directory on
    this host, for the processes that run vLLM directly."""
    on_cpu = launcher.engine_runs_on_cpu()
    return {**(launcher.CPU_ENV if on_cpu else {}), **launcher.OFFLINE_ENV}


def cpu_flags() -> list[str]:
    """engine-core's defaults for the vLLM flags a CPU host needs."""
    if not launcher.engine_runs_on_cpu():
        return []
    return [a for _, default in launcher.CPU_FLAGS for a in default]


def mock_engine_command(frontend_addr: str, model_dir: Path, *extra: str,
                        control_addr: str | None = None) -> list[str]:
    """``engine-core --mock``, saying HELLO at ``frontend_addr``."""
    control = ["--control-addr", control_addr] if control_addr else []
    return [str(BIN_DIR / "engine-core"), "--mock", "--frontend-addr", frontend_addr,
            "--model", str(model_dir), *control, *extra]


def real_engine_command(model_dir: Path, frontend_addr: str, *extra: str) -> list[str]:
    """``engine-core`` (our launcher of a headless vLLM engine) on ``model_dir``."""
    return [str(BIN_DIR / "engine-core"), "--model", str(model_dir),
            "--frontend-addr", frontend_addr, *extra]


def headless_vllm_command(model_dir: Path, port: int, *extra: str) -> list[str]:
    """The plain ``vllm serve --headless`` command that ``engine-core`` stands for."""
    return [str(BIN_DIR / "vllm"), "serve", str(model_dir), "--headless",
            "--data-parallel-address", HOST, "--data-parallel-rpc-port", str(port),
            *cpu_flags(), *extra]


class RealEngine:
    """A headless vLLM engine process (tree) that connects to ``handshake_addr``."""

    name = "the engine"

    def __init__(self, command: Sequence[str], handshake_addr: str, log_path: Path,
                 env: dict[str, str] | None = None) -> None:
        self.command = list(command)
        self.handshake_addr = handshake_addr
        self.log_path = log_path
        self.timings: dict[str, float] = {}  # seconds from start: "hello", "ready"
        self.started_at = time.monotonic()
        self.proc = spawn(self.command, log_path, env)

    @classmethod
    def launch(cls, model_dir: Path, log_path: Path, *extra_args: str,
               plain_vllm: bool = False) -> RealEngine:
        """``engine-core`` (our launcher), or the plain ``vllm serve`` command."""
        port = free_port_triple()
        if plain_vllm:
            command = headless_vllm_command(model_dir, port)
            env = cpu_env()
        else:
            command = real_engine_command(model_dir, f"tcp://{HOST}:{port}")
            env = None
        return cls([*command, *MODEL_ARGS, *extra_args], f"tcp://{HOST}:{port}",
                   log_path, env)

    def log_tail(self, lines: int = 60) -> str:
        return log_tail(self.log_path, lines)

    def descendants(self) -> list:
        """The engine's processes below ``proc`` (vllm serve, EngineCore, ...)."""
        import psutil  # a vLLM dependency, like everything here that needs it

        try:
            return psutil.Process(self.proc.pid).children(recursive=True)
        except psutil.NoSuchProcess:
            return []

    def signal_group(self, signum: int) -> None:
        try:
            os.killpg(self.proc.pid, signum)
        except ProcessLookupError:
            pass

    def wait_gone(self, tree: list, timeout: float) -> bool:
        """Wait until ``proc`` and the processes of ``tree`` have exited."""
        deadline = time.monotonic() + timeout
        while self.proc.poll() is None or still_running(tree):
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.1)
        return True

    def stop(self, timeout: float = STOP_TIMEOUT_S) -> int:
        """SIGTERM to the process group, wait <= ``timeout`` for the whole tree,
        then SIGKILL whatever is left. Returns ``proc``'s exit status."""
        if self.proc.poll() is None:
            # engine-core runs vLLM in a group of its own: watch the tree, not the group.
            tree = self.descendants()
            self.signal_group(signal.SIGTERM)
            if not self.wait_gone(tree, timeout):
                self.signal_group(signal.SIGKILL)
                for p in still_running(tree):
                    p.kill()
        return self.proc.wait()


def stop_all(engines: Iterable[RealEngine]) -> None:
    """Stop engines together: each takes seconds to exit (vLLM's shutdown, the
    interpreter's), waited for at once instead of one after the other."""
    with ThreadPoolExecutor() as pool:
        list(pool.map(RealEngine.stop, engines))


def still_running(processes: list) -> list:
    """The psutil processes that still run; zombies count as gone."""
    import psutil

    running = []
    for p in processes:
        try:
            if p.is_running() and p.status() != psutil.STATUS_ZOMBIE:
                running.append(p)
        except psutil.NoSuchProcess:
            pass
    return running
