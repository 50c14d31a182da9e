"""Data parallel on real vLLM engines: two ranks, each its own launcher.

``engine-core ... --data-parallel-size 2 --data-parallel-size-local 1
--data-parallel-start-rank k`` per rank (vLLM's one-launcher-per-rank layout,
so one rank can die and restart alone) and our frontend with
``--data-parallel-size 2``: greedy outputs equal a single engine's, requests
run on both ranks, and a killed rank fails only its own streams, then is
attached again when it restarts, without a frontend restart.
"""

from __future__ import annotations

import os
import re
import signal
import urllib.request
from concurrent.futures import ThreadPoolExecutor

import pytest

from harness.engines import MODEL_ARGS, RealEngine, real_engine_command, stop_all
from harness.frontend import SERVED_NAME, FrontendProcess
from harness.ports import HOST, free_port_triple
from harness.waits import wait_for
from tests.support.http_client import RawRequest, post
from tests.support.requirements import require_vllm
from tests.test_parity_completions import SHAPES, assert_same, send

pytestmark = pytest.mark.real_engine

PROMPTS = ["Hello", "The river", "Once upon a time", "1 2 3 4", "Zürich café",
           "the ocean and the sky", "x", "What is"]


class Ranks:
    def __init__(self, model_dir, workdir) -> None:
        self.model_dir, self.workdir = model_dir, workdir
        port = free_port_triple()
        self.addr = f"tcp://{HOST}:{port}"
        self.engines: dict[int, RealEngine] = {}
        self.starts = 0

    def start(self, rank: int) -> RealEngine:
        self.starts += 1
        command = real_engine_command(self.model_dir, self.addr, *MODEL_ARGS,
                                      "--data-parallel-size", "2",
                                      "--data-parallel-size-local", "1",
                                      "--data-parallel-start-rank", str(rank))
        engine = self.engines[rank] = RealEngine(
            command, self.addr, self.workdir / f"rank{rank}-{self.starts}.log")
        return engine

    def engine_core(self, rank: int):
        """The rank's ``VLLM::EngineCore`` process (psutil)."""
        cores = [p for p in self.engines[rank].descendants()
                 if "EngineCore" in " ".join(p.cmdline()) or "EngineCore" in p.name()]
        assert cores, [p.cmdline() for p in self.engines[rank].descendants()]
        return cores[0]

    def stop(self) -> None:
        stop_all(self.engines.values())


@pytest.fixture(scope="module")
def dp(tiny_model_dir, tmp_path_factory):
    require_vllm()
    workdir = tmp_path_factory.mktemp("dp-real")
    ranks = Ranks(tiny_model_dir, workdir)
    fe = None
    try:
        for rank in (0, 1):
            ranks.start(rank)
        fe = FrontendProcess(ranks.addr, tiny_model_dir, workdir, "--data-parallel-size", "2",
                             "--dp-routing", "load", state_file=workdir / "dp.state")
        fe.wait_healthy(timeout=300)
        yield ranks, fe
    finally:
        if fe is not None:
            fe.stop()
        ranks.stop()


def greedy(url: str, prompt: str) -> list[int]:
    reply = post(url, "/v1/completions", {"model": SERVED_NAME, "prompt": prompt,
                                          "max_tokens": 12, "temperature": 0,
                                          "return_token_ids": True})
    assert reply.status == 200, reply.body
    return reply.json["choices"][0]["token_ids"]


def test_greedy_outputs_equal_a_single_engines_on_both_ranks(dp, frontend):
    _, fe = dp
    with ThreadPoolExecutor(8) as pool:  # concurrent: both ranks serve
        ours = list(pool.map(lambda p: greedy(fe.url, p), PROMPTS * 2))
    single = [greedy(frontend.url, p) for p in PROMPTS]
    assert ours == single * 2
    fe.wait_idle()


# The completions/generate parity shapes, served by two ranks, against vLLM's
# own server on one engine (tests/test_parity_completions.py: the same shapes
# through one engine).
@pytest.mark.vllm_frontend
@pytest.mark.parametrize("shape", SHAPES, ids=[s.id for s in SHAPES])
def test_parity_with_two_ranks(shape, dp, vllm_frontend):
    _, fe = dp
    assert_same(shape, send(fe.url, shape), send(vllm_frontend.url, shape))


def test_both_ranks_served_the_parity_shapes(dp):
    _, fe = dp
    fe.wait_idle()
    text = urllib.request.urlopen(fe.url + "/metrics", timeout=10).read().decode()
    served = {"0": 0.0, "1": 0.0}  # finished requests per engine, any finish reason
    for engine, value in re.findall(
            r'^vllm:request_success_total\{[^}]*engine="(\d+)"[^}]*\} (\S+)', text, re.M):
        served[engine] += float(value)
    assert min(served.values()) > 0.25 * sum(served.values()), served


def test_a_killed_rank_fails_its_streams_and_restarts_alone(dp):
    ranks, fe = dp

    def in_flight() -> list[int]:
        return [r["in_flight"] for r in fe.debug_state()["ranks"]]

    # Streams until each rank runs one (the router decides which gets what;
    # a rank's load is partly its own lagging scheduler stats).
    # Rank 1's engine core is frozen (SIGSTOP) before it is killed, so the
    # streams counted on it are still running when it dies (a fast engine on a
    # slow host could otherwise finish them between the count and the kill).
    core = ranks.engine_core(1)
    reqs = []
    while True:
        while len(reqs) < 2 or (0 in in_flight() and len(reqs) < 6):
            req = RawRequest(fe.url, "/v1/completions", {
                "model": SERVED_NAME, "prompt": f"story {len(reqs)}", "max_tokens": 1000,
                "ignore_eos": True, "stream": True})
            req.read_until(b"data:")
            reqs.append(req)
        os.kill(core.pid, signal.SIGSTOP)
        on_rank_1 = in_flight()[1]
        if on_rank_1 or len(reqs) >= 6:
            break
        os.kill(core.pid, signal.SIGCONT)  # its streams ended before the freeze: more
    # Rank 1 runs some, and rank 0 got the others (they may have ended already).
    assert on_rank_1 and len(reqs) > on_rank_1, fe.debug_state()
    os.kill(core.pid, signal.SIGKILL)
    wait_for(lambda: [r["state"] for r in fe.debug_state()["ranks"]] == ["serving", "dead"],
             10)
    outcomes = []
    for req in reqs:
        req.read_until(b"data: [DONE]", timeout=120)
        events = [e for e in req.received.split(b"\n") if e.startswith(b"data: ")]
        assert events[-1] == b"data: [DONE]" and req.received.count(b"[DONE]") == 1
        outcomes.append(b'"error"' in events[-2])
        req.close()
    assert outcomes.count(True) == on_rank_1  # rank 1's streams failed, the others finished
    assert ranks.engines[1].proc.wait(60) == 1  # engine-core: the engine core died
    assert greedy(fe.url, "still serving")  # rank 0 takes everything meanwhile
    ranks.start(1)  # as systemd would (Restart=always)
    wait_for(lambda: [r["state"] for r in fe.debug_state()["ranks"]] == ["serving", "serving"],
             300)
    with ThreadPoolExecutor(4) as pool:
        assert all(pool.map(lambda p: greedy(fe.url, p), PROMPTS))
    fe.wait_idle()
