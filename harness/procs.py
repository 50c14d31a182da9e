"""Processes the harness starts: a process group of its own, logging to a file,
optionally pinned with taskset; and their CPU time and memory read from /proc
(Linux only)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path
from typing import Sequence

REPO_ROOT = Path(__file__).resolve().parents[1]
# The virtual environment's scripts: frontend, engine-core, vllm.
BIN_DIR = Path(sys.executable).parent
CLK_TCK = os.sysconf("SC_CLK_TCK")
PAGE = os.sysconf("SC_PAGE_SIZE")


# ------------------------------------------------------------------ /proc
def children_map() -> dict[int, list[int]]:
    kids: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                ppid = int(f.read().rsplit(b")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        kids.setdefault(ppid, []).append(int(name))
    return kids


def tree(pid: int) -> list[int]:
    """``pid`` and all its descendants."""
    kids = children_map()
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo.extend(kids.get(p, ()))
    return out


def pids_named(pids: Sequence[int], name: str) -> list[int]:
    """Those of ``pids`` whose executable is called ``name`` (/proc/PID/exe)."""
    out = []
    for pid in pids:
        try:
            if os.path.basename(os.readlink(f"/proc/{pid}/exe")) == name:
                out.append(pid)
        except OSError:
            continue
    return out


def cpu_seconds(pids: Sequence[int]) -> float:
    """utime + stime (and of waited-for children) of the processes, in seconds."""
    total = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat", "rb") as f:
                fields = f.read().rsplit(b")", 1)[1].split()
        except OSError:
            continue
        total += int(fields[11]) + int(fields[12]) + int(fields[13]) + int(fields[14])
    return total / CLK_TCK


def rss_bytes(pids: Sequence[int]) -> int:
    """Sum of the resident set sizes (shared pages counted once per process)."""
    total = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/statm", "rb") as f:
                total += int(f.read().split()[1]) * PAGE
        except OSError:
            continue
    return total


def core_times() -> dict[int, tuple[float, float]]:
    """Per CPU: (busy seconds, total seconds) since boot, from /proc/stat."""
    out = {}
    with open("/proc/stat") as f:
        for line in f:
            if line.startswith("cpu") and line[3].isdigit():
                parts = line.split()
                vals = [int(v) for v in parts[1:]]
                idle = vals[3] + vals[4]
                total = sum(vals[:8])
                out[int(parts[0][3:])] = ((total - idle) / CLK_TCK, total / CLK_TCK)
    return out


def loadavg() -> list[float]:
    return [float(v) for v in Path("/proc/loadavg").read_text().split()[:3]]


# ------------------------------------------------------------------ processes
def spawn(argv: Sequence[str], log_path: Path, env: dict[str, str] | None = None
          ) -> subprocess.Popen:
    """``argv`` in the repository, in a session (process group) of its own, its
    output in ``log_path``; ``env`` is added to this process's environment."""
    with open(log_path, "wb") as log:
        return subprocess.Popen(list(argv), cwd=REPO_ROOT, stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True, env={**os.environ, **(env or {})})


def log_tail(path: Path, lines: int = 40) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


class Proc:
    """A process group started with ``taskset -c CPU``, logging to a file."""

    def __init__(self, name: str, argv: Sequence[str], cpu: int | None, log_path: Path,
                 env: dict[str, str] | None = None, nice: int = 0) -> None:
        self.name = name
        self.argv = list(argv)
        if cpu is not None:
            self.argv = ["taskset", "-c", str(cpu), *self.argv]
        if nice:
            self.argv = ["nice", "-n", str(nice), *self.argv]
        self.log_path = log_path
        self.t_start = time.monotonic()
        self.wall_start = time.time()
        self.proc = spawn(self.argv, log_path, env)
        self.pid = self.proc.pid

    def alive(self) -> bool:
        return self.proc.poll() is None

    def pids(self) -> list[int]:
        return tree(self.pid) if self.alive() else []

    def log_tail(self, n: int = 40) -> str:
        return log_tail(self.log_path, n)

    def stop(self, timeout: float = 20.0) -> None:
        stop_group(self.proc, timeout)


def stop_group(proc: subprocess.Popen, timeout: float) -> None:
    """SIGTERM to ``proc``'s process group, SIGKILL to whatever is left of it after
    ``timeout`` seconds (also after a clean exit of the leader)."""
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            pass
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        pass


def wait_log(proc: Proc, needle: str, timeout: float) -> float | None:
    """Wait until ``needle`` shows up in the process log; returns time.monotonic()."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if needle in proc.log_path.read_text(errors="replace"):
                return time.monotonic()
        except OSError:
            pass
        if not proc.alive():
            raise RuntimeError(f"{proc.name} exited with {proc.proc.returncode}:\n"
                               f"{proc.log_tail()}")
        time.sleep(0.01)
    return None


def mock_ready_wall_time(proc: Proc) -> float | None:
    """Wall-clock time of the mock engine's "EngineCore ready" log line (ms resolution)."""
    for line in proc.log_path.read_text(errors="replace").splitlines():
        if "EngineCore ready" in line and "[mock-engine]" in line:
            # "INFO 2026-05-09 12:30:22,123 [mock-engine] EngineCore ready: ..."
            parts = line.split()
            stamp = f"{parts[1]} {parts[2]}"
            try:
                dt = datetime.strptime(stamp, "%Y-%m-%d %H:%M:%S,%f")
            except ValueError:
                return None
            return dt.timestamp()
    return None
