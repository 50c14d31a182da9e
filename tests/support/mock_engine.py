"""Fixtures that run the mock engine against the frontend-side ZMQ harness.

``start_mock`` starts ``python -m engine_core.mock`` against a fresh
``harness.engine_harness.EngineHarness`` and always kills it at teardown.
"""

from __future__ import annotations

import os
import signal
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

from engine_core.mock_control import MockControl
from harness.engine_harness import EngineHarness, spawn_mock
from protocol import handshake


@dataclass
class MockEngineProcess:
    """A running mock: its process, the harness it talks to, its control client."""

    proc: subprocess.Popen
    harness: EngineHarness
    control: MockControl
    log_path: Path

    @property
    def ready(self) -> handshake.ReadyResponse | None:
        return self.harness.ready

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def wait(self, timeout: float = 10.0) -> int:
        return self.proc.wait(timeout)

    def kill(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)
        self.harness.close()


@pytest.fixture
def start_mock(tmp_path):
    """``start_mock(*mock_args, wait_ready=True)`` -> a running MockEngineProcess.

    With ``wait_ready`` the harness has done the handshake; without it, the
    test drives the handshake itself.
    """
    started: list[MockEngineProcess] = []

    def start(*args: str, wait_ready: bool = True, vocab_size: int = 1200
              ) -> MockEngineProcess:
        harness = EngineHarness()
        log_path = tmp_path / f"mock-engine-{len(started)}.log"
        proc, control = spawn_mock(harness.handshake_addr, log_path, *args)
        mock = MockEngineProcess(proc, harness, control, log_path)
        started.append(mock)
        if wait_ready:
            harness.handshake(vocab_size=vocab_size)
        return mock

    yield start
    for mock in started:
        mock.kill()


@pytest.fixture
def mock_engine(start_mock) -> MockEngineProcess:
    """A mock engine with default settings, already handshaken."""
    return start_mock()
