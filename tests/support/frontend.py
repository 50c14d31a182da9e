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

The processes themselves are ``harness.frontend``'s.
"""

from __future__ import annotations

import contextlib
import signal
from pathlib import Path
from typing import Iterator

import pytest

from harness.frontend import FrontendProcess, MockStack, launch_mock_stack


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
