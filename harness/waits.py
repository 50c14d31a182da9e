"""Waiting on state: the one deadline loop, and the one wait for ``/health``.

A test (or a tool) waits until what it needs is true (a table entry, an engine
counter, a metric, a server answering) rather than for a fixed time: a sleep
passes or fails with the machine's load, and proves nothing about the state it
hopes for.
"""

from __future__ import annotations

import asyncio
import socket
import subprocess
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Awaitable, Callable, Protocol, Sequence

from harness.procs import log_tail

Message = str | Callable[[], str]


class Watched(Protocol):
    """A process whose exit means a wait can never succeed (``procs.Proc``,
    ``FrontendProcess``, ``RealEngine``, ...)."""

    name: str
    proc: subprocess.Popen

    def log_tail(self) -> str: ...


@dataclass
class Watch:
    """Any started process to watch, with its log file."""

    name: str
    proc: subprocess.Popen
    log_path: Path | None = None

    def log_tail(self) -> str:
        return log_tail(self.log_path) if self.log_path else ""


def wait_for(predicate: Callable[[], Any], timeout: float, interval: float = 0.05,
             message: Message = "") -> float:
    """Poll ``predicate`` until true; returns the seconds it took.

    ``message`` may be a function, to show the last state seen on a timeout.
    """
    start = time.monotonic()
    while not predicate():
        if time.monotonic() - start > timeout:
            _timed_out(timeout, message)
        time.sleep(interval)
    return time.monotonic() - start


async def wait_for_async(predicate: Callable[[], Awaitable[Any]], timeout: float,
                         interval: float = 0.05, message: Message = "") -> float:
    """``wait_for`` inside an event loop: ``await predicate()`` until true."""
    start = time.monotonic()
    while not await predicate():
        if time.monotonic() - start > timeout:
            _timed_out(timeout, message)
        await asyncio.sleep(interval)
    return time.monotonic() - start


def _timed_out(timeout: float, message: Message) -> None:
    text = message() if callable(message) else message
    raise AssertionError(f"not true within {timeout} s: {text}")


def http_ok(url: str, timeout: float = 1.0) -> bool:
    """Whether ``url`` answers 200."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            return r.status == 200
    except (urllib.error.URLError, ConnectionError, TimeoutError, OSError):
        return False


def wait_healthy(url: str, watched: Sequence[Watched] = (), timeout: float = 300.0,
                 poll: float = 0.1) -> float:
    """Poll ``url``/health until it says 200; returns the wall-clock time
    (``time.time()``) it first did. Fails at once if a ``watched`` process exits,
    with the tails of their logs."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for p in watched:
            if p.proc.poll() is not None:
                raise RuntimeError(f"{p.name} exited with {p.proc.returncode} before {url} "
                                   f"was healthy\n{_tails(watched)}")
        if http_ok(url + "/health", timeout=2.0):
            return time.time()
        time.sleep(poll)
    raise TimeoutError(f"{url} not healthy after {timeout:.0f} s\n{_tails(watched)}")


def _tails(watched: Sequence[Watched]) -> str:
    return "\n".join(f"--- {p.name} log:\n{p.log_tail()}" for p in watched)


def wait_listening(host: str, port: int, timeout: float) -> None:
    """Until something accepts TCP connections on ``host:port``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with socket.create_connection((host, port), timeout=1.0):
                return
        except OSError:
            time.sleep(0.05)
    raise TimeoutError(f"nothing listens on {host}:{port} after {timeout} s")
