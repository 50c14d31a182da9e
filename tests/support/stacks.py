"""The route tests' targets: the same test against the real engine and the mock.

``stack`` (parametrized ``mock`` / ``real``) gives a :class:`Target`: the
session's real stack (``frontend``, tests/support/frontend.py), or this test
module's own mock stack (``module_mock_stack``, one per module, stepping every
``MOCK_STEP_TIME``). ``real`` is the real target alone, for tests whose outcome
needs a real model.

After every test nothing may be left in flight: the table is empty and the
engine has no work (both targets). The mock also proves what the frontend
sent: no ABORT of a request it had finished or never knew, and its input
thread still alive (an invalid ADD kills a real engine's).

A pytest plugin (``tests/conftest.py``): test modules use the fixtures by name.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Iterator

import pytest

from harness.frontend import SERVED_NAME, FrontendProcess, MockStack, launch_mock_stack
from tests.support.http_client import metric, scrape

# The labels of vLLM's metric families on our frontend.
VLLM_LABELS = {"model_name": SERVED_NAME, "engine": "0"}
# A little time per mock step, so that the ABORT sent when a stop string matches
# reaches the mock before it could have finished the request by itself (it
# counts aborts of finished requests, which must stay 0).
MOCK_STEP_TIME = 0.002


def engine_requests(url: str) -> tuple[float, float]:
    """(engine requests the frontend aborted, engine requests the engine
    finished), from /metrics: the same proof on both engines."""
    samples = scrape(url)
    finished = sum(value for (name, _), value in samples.items()
                   if name == "vllm:request_success_total")
    return metric(samples, "vllm_frontend_engine_aborts_total"), finished


@dataclass
class Target:
    """Where a test sends requests; ``mock`` is set for the mock engine's stack."""

    kind: str
    url: str
    frontend: FrontendProcess
    mock: MockStack | None = None

    def stats(self) -> dict:
        """The mock engine's counters (mock only)."""
        assert self.mock is not None, "the real engine has no counters"
        return self.mock.control().stats()

    def adds(self) -> int | None:
        """ADDs the mock engine received; None on the real engine."""
        return self.stats()["adds"] if self.mock else None

    def engine_running(self) -> float:
        """Requests the engine is running, from its own scheduler stats (/metrics)."""
        return metric(scrape(self.url), "vllm:num_requests_running", **VLLM_LABELS)

    def engine_requests(self) -> tuple[float, float]:
        return engine_requests(self.url)

    @contextlib.contextmanager
    def mock_step_time(self, seconds: float) -> Iterator[None]:
        """A slower (or faster) mock for the block; nothing on the real engine."""
        if self.mock is None:
            yield
            return
        self.mock.control().configure(step_time=seconds)
        try:
            yield
        finally:
            self.mock.control().configure(step_time=MOCK_STEP_TIME)


@pytest.fixture(scope="module")
def module_mock_stack(tiny_model_dir, tmp_path_factory) -> Iterator[MockStack]:
    stack = launch_mock_stack(tiny_model_dir, tmp_path_factory.mktemp("mock-stack"),
                              engine_args=("--step-time", str(MOCK_STEP_TIME)))
    yield stack
    stack.stop()


# The real target is the session's stack, got by name: the mark tells the test
# workers' scheduler (tests/conftest.py).
REAL_TARGET = pytest.param(
    "real", marks=[pytest.mark.real_engine, pytest.mark.session_engines("real_stack")]
)


@pytest.fixture(params=["mock", REAL_TARGET])
def stack(request) -> Iterator[Target]:
    if request.param == "real":
        fe = request.getfixturevalue("frontend")  # checks idleness itself
        yield Target("real", fe.url, fe)
        return
    mock = request.getfixturevalue("module_mock_stack")
    yield Target("mock", mock.url, mock.frontend, mock)
    mock.frontend.wait_idle()
    stats = mock.control().stats()
    assert stats["aborts_after_finish"] == 0, stats
    assert stats["aborts_unknown"] == 0, stats
    assert stats["input_alive"], stats


@pytest.fixture
def real(frontend) -> Target:
    return Target("real", frontend.url, frontend)

