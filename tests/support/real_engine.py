"""Real vLLM engines for tests, and vLLM's own reference results.

``harness.engines.RealEngine`` runs ``engine-core --model DIR --frontend-addr
tcp://127.0.0.1:P`` (or, with ``plain_vllm=True``, the plain ``vllm serve DIR
--headless ...`` it stands for) in its own process group, logging to a file,
and always stops it. The engine connects to whatever binds the handshake
address: a test binds it with ``tests.support.engine_link.EngineLink`` (see
``attach``).

Each start costs ~25 s of CPU and ~1.5 GB, so fixtures share engines: the
``start_real_engine`` factory (engines stopped at session end) and the
module-scoped ``real_engine``. Without vLLM these fixtures skip, except under
CI=true, where they fail: CI must run the real-engine tests.

``VllmReference`` runs ``vllm.LLM`` on the same model in a subprocess
(tests/support/vllm_reference.py) to get vLLM's own answers.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from harness.engines import DTYPE, MAX_MODEL_LEN, RealEngine, cpu_env, stop_all
from harness.procs import REPO_ROOT
from tests.support.requirements import require_vllm

# The protocol test asks for 70 logprobs; vLLM's default cap is 20.
MAX_LOGPROBS = 128
MODULE_ENGINE_ARGS = ("--max-logprobs", str(MAX_LOGPROBS))
ATTACH_TIMEOUT_S = 300.0


async def attach(engine: RealEngine, client: Any, timeout: float = ATTACH_TIMEOUT_S) -> Any:
    """``await client.start()`` (an EngineLink), failing at once if the engine exits.

    Records in ``engine.timings`` when HELLO and the ready response arrived.
    """
    def progress(message: str) -> None:
        if "HELLO" in message:  # the handshake server reports the HELLO
            engine.timings["hello"] = time.monotonic() - engine.started_at

    start = asyncio.ensure_future(client.start(timeout=timeout, progress=progress))
    while not start.done():
        if engine.proc.poll() is not None:
            start.cancel()
            raise RuntimeError(f"the engine exited with status {engine.proc.returncode} "
                               f"before attaching; log tail:\n{engine.log_tail()}")
        await asyncio.wait([start], timeout=0.2)
    ready = start.result()
    engine.timings["ready"] = time.monotonic() - engine.started_at
    return ready


class EngineFactory:
    """``start_real_engine(*extra_args, plain_vllm=False)`` -> a started RealEngine."""

    def __init__(self, model_dir: Path, log_dir: Path) -> None:
        self.model_dir = model_dir
        self.log_dir = log_dir
        self.engines: list[RealEngine] = []

    def __call__(self, *extra_args: str, plain_vllm: bool = False) -> RealEngine:
        kind = "vllm-serve" if plain_vllm else "engine-core"
        log_path = self.log_dir / f"{kind}-{len(self.engines)}.log"
        engine = RealEngine.launch(self.model_dir, log_path, *extra_args,
                                   plain_vllm=plain_vllm)
        self.engines.append(engine)
        return engine

    def stop_all(self) -> None:
        stop_all(self.engines)


FACTORY_KEY = pytest.StashKey[EngineFactory]()


@pytest.fixture(scope="session")
def start_real_engine(tiny_model_dir, tmp_path_factory, pytestconfig):
    require_vllm()
    factory = EngineFactory(tiny_model_dir, tmp_path_factory.mktemp("real-engines"))
    pytestconfig.stash[FACTORY_KEY] = factory  # for the start-time summary
    try:
        yield factory
    finally:
        factory.stop_all()


@pytest.fixture(scope="module")
def real_engine(start_real_engine) -> RealEngine:
    """One engine-core engine for a test module (a headless engine handshakes once)."""
    engine = start_real_engine(*MODULE_ENGINE_ARGS)
    yield engine
    engine.stop()


# ------------------------------------------------------------------ reference

class VllmReference:
    """vLLM's own results for a list of requests, computed in a background process.

    Requests are dicts with ``prompt_token_ids``, ``max_tokens``, ``logprobs`` and
    ``prompt_logprobs``; see tests/support/vllm_reference.py for the results.
    """

    def __init__(self, model_dir: Path, requests: list[dict], workdir: Path) -> None:
        requests_path = workdir / "reference-requests.json"
        llm_args = {"model": str(model_dir), "max_model_len": MAX_MODEL_LEN, "dtype": DTYPE,
                    "max_logprobs": MAX_LOGPROBS, "enforce_eager": True,
                    "kv_cache_memory_bytes": 128 << 20}
        requests_path.write_text(json.dumps({"llm": llm_args, "requests": requests}))
        self.results_path = workdir / "reference-results.json"
        self.log_path = workdir / "reference.log"
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "tests.support.vllm_reference",
                 str(requests_path), str(self.results_path)],
                cwd=REPO_ROOT, env={**os.environ, **cpu_env()}, stdout=log,
                stderr=subprocess.STDOUT, start_new_session=True)

    def results(self, timeout: float = 300.0) -> list[dict]:
        try:
            status = self.proc.wait(timeout)
        finally:
            self.kill()
        if status != 0:
            tail = "\n".join(self.log_path.read_text(errors="replace").splitlines()[-40:])
            raise RuntimeError(f"the vLLM reference run failed ({status}):\n{tail}")
        return json.loads(self.results_path.read_text())

    def kill(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()


# ------------------------------------------------------------------ reporting

def _engines_of(item: pytest.Item) -> list[RealEngine]:
    engines = []
    for value in getattr(item, "funcargs", {}).values():
        if isinstance(value, RealEngine):
            engines.append(value)
        elif isinstance(value, EngineFactory):
            engines.extend(value.engines)
    return list(dict.fromkeys(engines))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    """A failed test shows the tail of the logs of the engines it used."""
    report = yield
    if report.failed:
        for engine in _engines_of(item):
            report.sections.append((f"engine log {engine.log_path}", engine.log_tail()))
    return report


def pytest_terminal_summary(terminalreporter) -> None:
    factory = terminalreporter.config.stash.get(FACTORY_KEY, None)
    for engine in factory.engines if factory else ():
        if engine.timings:
            shown = ", ".join(f"{k} {v:.1f} s" for k, v in engine.timings.items())
            terminalreporter.write_line(f"real engine {engine.log_path.name}: start -> {shown}")
