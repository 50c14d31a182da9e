"""Data parallel: several engine ranks behind one frontend (``--data-parallel-size``).

Against mock ranks (one process per rank, each its own launcher, as
``vllm serve --headless --data-parallel-size-local 1 --data-parallel-start-rank k``
runs them): every choice of a request goes to one rank, aborts go to the rank
that owns the request, load and prefix routing, a rank that dies or stalls
fails only its own requests and comes back, and a restarted frontend
re-attaches to every rank. The real engine with two ranks:
tests/test_data_parallel_real.py.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from harness.frontend import SERVED_NAME, FrontendProcess
from harness.ports import free_port_triple
from harness.waits import wait_for
from tests.support.http_client import RawRequest, metric, post, scrape
from tests.support.mock_ranks import MockRanks

MODEL = SERVED_NAME
BLOCK = 16  # the mock ranks' block size


class DpStack:
    def __init__(self, model_dir, workdir, size: int, frontend_args: tuple[str, ...],
                 mock_args: tuple[str, ...]) -> None:
        self.model_dir, self.workdir, self.size = model_dir, workdir, size
        self.engine_addr = f"tcp://127.0.0.1:{free_port_triple()}"
        self.frontend_args = ("--data-parallel-size", str(size), *frontend_args)
        self.ranks = MockRanks(self.engine_addr, size,
                               ("--model", str(model_dir), "--block-size", str(BLOCK),
                                *mock_args), workdir)
        self.frontend = self.start_frontend()
        for rank in range(size):
            self.ranks.start(rank)
        self.frontend.wait_healthy(timeout=60)

    def start_frontend(self) -> FrontendProcess:
        return FrontendProcess(self.engine_addr, self.model_dir, self.workdir,
                               *self.frontend_args, state_file=self.workdir / "dp.state")

    @property
    def url(self) -> str:
        return self.frontend.url

    def adds(self) -> list[int]:
        return [self.ranks.controls[r].stats()["adds"] for r in range(self.size)]

    def rank_states(self) -> list[str]:
        return [r["state"] for r in self.frontend.debug_state()["ranks"]]

    def check_clean(self) -> None:
        """Nothing in flight; no rank saw an abort for a request it did not own."""
        self.frontend.wait_idle()
        for rank in range(self.size):
            if self.ranks.procs[rank].poll() is None:
                stats = self.ranks.controls[rank].stats()
                assert stats["aborts_unknown"] == 0 and stats["aborts_after_finish"] == 0, \
                    (rank, stats)

    def stop(self) -> None:
        self.frontend.stop()
        self.ranks.close()


@pytest.fixture
def dp_stack(tiny_model_dir, tmp_path):
    stacks: list[DpStack] = []

    def start(size: int = 2, *frontend_args: str, mock_args: tuple[str, ...] = ()) -> DpStack:
        stack = DpStack(tiny_model_dir, tmp_path, size, frontend_args,
                        ("--step-time", "0.002", *mock_args))
        stacks.append(stack)
        return stack

    yield start
    for stack in stacks:
        stack.stop()


def complete(url: str, prompt, **fields) -> dict:
    reply = post(url, "/v1/completions", {"model": MODEL, "prompt": prompt, "max_tokens": 4,
                                          "temperature": 0, **fields})
    assert reply.status == 200, reply.body
    return reply.json


def words(seed: int, count: int) -> str:
    return " ".join(f"w{seed}x{i}" for i in range(count))


# ------------------------------------------------------------------ routing
def test_requests_spread_and_each_request_stays_on_one_rank(dp_stack):
    stack = dp_stack(2, "--dp-routing", "load")
    # Concurrent requests spread over the ranks (least loaded, ties rotating).
    with ThreadPoolExecutor(16) as pool:
        list(pool.map(lambda i: complete(stack.url, f"hello {i}", max_tokens=8),
                      range(32)))
    adds = stack.adds()
    assert sum(adds) == 32 and min(adds) >= 8, adds
    # A batch of 3 prompts with n=2: all 6 engine requests on one rank.
    before = stack.adds()
    reply = complete(stack.url, ["a b", "c d", "e f"], n=2, temperature=0.8, seed=1)
    assert len(reply["choices"]) == 6
    grew = [after - b for after, b in zip(stack.adds(), before)]
    assert sorted(grew) == [0, 6], grew
    stack.check_clean()


def test_prefix_routing_keeps_a_conversation_on_its_rank(dp_stack):
    stack = dp_stack(2)  # --dp-routing prefix is the default
    systems = [words(c, 3 * BLOCK) for c in range(6)]
    first = []
    for c, system in enumerate(systems):  # turn 1 of 6 conversations
        before = stack.adds()
        complete(stack.url, system)
        first.append([a - b for a, b in zip(stack.adds(), before)].index(1))
    assert set(first) == {0, 1}, first  # new conversations spread
    for turn in range(2, 5):  # later turns extend the same prompts
        for c, system in enumerate(systems):
            before = stack.adds()
            complete(stack.url, system + " " + words(100 + turn, turn * 5))
            rank = [a - b for a, b in zip(stack.adds(), before)].index(1)
            assert rank == first[c], (c, turn, rank, first)
    stack.check_clean()


def test_disconnect_aborts_on_the_owning_rank(dp_stack):
    stack = dp_stack(2, "--dp-routing", "load", mock_args=("--step-time", "0.01"))
    streams = []
    for i in range(4):
        req = RawRequest(stack.url, "/v1/completions", {
            "model": MODEL, "prompt": f"p{i}", "max_tokens": 1000, "ignore_eos": True,
            "n": 2, "temperature": 0.9, "stream": True})
        req.read_until(b"data:")
        streams.append(req)
    wait_for(lambda: stack.frontend.debug_state()["table"] == 8, 10)
    for req in streams:
        req.hang_up()
    stack.frontend.wait_idle()
    aborted = [stack.ranks.controls[r].stats()["aborted"] for r in range(2)]
    assert sum(aborted) == 8 and all(aborted), aborted
    stack.check_clean()


# ------------------------------------------------------------------ faults
def test_a_dead_rank_fails_only_its_requests_and_comes_back(dp_stack):
    stack = dp_stack(2, "--dp-routing", "load", mock_args=("--step-time", "0.01"))
    reqs = []
    for i in range(4):
        req = RawRequest(stack.url, "/v1/completions", {
            "model": MODEL, "prompt": f"q{i}", "max_tokens": 1000, "ignore_eos": True,
            "stream": True})
        req.read_until(b"data:")
        reqs.append(req)
    wait_for(lambda: [r["in_flight"] for r in stack.frontend.debug_state()["ranks"]]
             == [2, 2], 10)
    stack.ranks.kill(1)
    wait_for(lambda: stack.rank_states() == ["serving", "dead"], 30)
    ended = [req for req in reqs if _ends_with_error(req, wait=3)]
    assert len(ended) == 2  # rank 1's streams: an error event, then [DONE]
    assert stack.frontend.debug_state()["ranks"][0]["in_flight"] == 2  # rank 0's run on
    for req in reqs:
        req.close()
    assert _health(stack.url) == 200  # one rank still serves
    samples = scrape(stack.url)
    assert metric(samples, "vllm_frontend_engine_ranks", state="serving") == 1
    assert metric(samples, "vllm_frontend_engine_ranks", state="dead") == 1
    # New requests go to the live rank only.
    before = stack.ranks.controls[0].stats()["adds"]
    for i in range(4):
        complete(stack.url, f"after {i}")
    assert stack.ranks.controls[0].stats()["adds"] == before + 4
    # Restarted (as systemd would): it says HELLO again and serves again.
    stack.ranks.start(1)
    wait_for(lambda: stack.rank_states() == ["serving", "serving"], 20)
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda i: complete(stack.url, f"back {i}", max_tokens=16), range(16)))
    assert stack.ranks.controls[1].stats()["adds"] > 0
    stack.check_clean()


def test_a_stalled_rank_fails_its_requests_then_serves_again(dp_stack):
    stack = dp_stack(2, "--dp-routing", "load", "--engine-stall-timeout", "1",
                     mock_args=("--step-time", "0.01"))
    reqs = []
    for i in range(2):
        req = RawRequest(stack.url, "/v1/completions", {
            "model": MODEL, "prompt": f"s{i}", "max_tokens": 1000, "ignore_eos": True,
            "stream": True})
        req.read_until(b"data:")
        reqs.append(req)
    wait_for(lambda: [r["in_flight"] for r in stack.frontend.debug_state()["ranks"]]
             == [1, 1], 10)
    stack.ranks.stop(1)  # SIGSTOP: sockets stay open, nothing comes
    try:
        wait_for(lambda: stack.rank_states() == ["serving", "stalled"], 10)
        body = [req for req in reqs if _ends_with_error(req, wait=3)]
        assert len(body) == 1
        assert b"--engine-stall-timeout" in body[0].received
        assert _health(stack.url) == 200
    finally:
        stack.ranks.cont(1)
    # It sends again (the aborts it had queued): routable again.
    wait_for(lambda: stack.rank_states() == ["serving", "serving"], 10)
    for req in reqs:
        req.close()
    stack.check_clean()


def test_with_one_rank_a_stall_turns_health_red_until_it_resumes(dp_stack):
    stack = dp_stack(1, "--engine-stall-timeout", "1", mock_args=("--step-time", "0.01"))
    req = RawRequest(stack.url, "/v1/completions", {
        "model": MODEL, "prompt": "x", "max_tokens": 1000, "ignore_eos": True,
        "stream": True})
    req.read_until(b"data:")
    stack.ranks.stop(0)
    try:
        wait_for(lambda: _health(stack.url) == 503, 10)
        assert _ends_with_error(req, wait=3)
    finally:
        stack.ranks.cont(0)
    wait_for(lambda: _health(stack.url) == 200, 10)
    complete(stack.url, "again")
    req.close()
    stack.check_clean()


def test_a_restarted_frontend_reattaches_to_every_rank(dp_stack):
    stack = dp_stack(2, "--dp-routing", "load")
    complete(stack.url, "before")
    stack.frontend.stop()
    stack.frontend = stack.start_frontend()
    stack.frontend.wait_healthy(timeout=30)
    assert stack.rank_states() == ["serving", "serving"]
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda i: complete(stack.url, f"after {i}", max_tokens=8), range(16)))
    assert all(a > 0 for a in stack.adds())
    stack.check_clean()


def test_moe_model_with_data_parallel_is_refused(tiny_model_dir, tmp_path):
    moe = tmp_path / "moe"
    shutil.copytree(tiny_model_dir, moe)
    config = json.loads((moe / "config.json").read_text())
    config["num_local_experts"] = 8
    (moe / "config.json").write_text(json.dumps(config))
    proc = subprocess.run([str(_bin("frontend")), "--engine-addr", "tcp://127.0.0.1:1",
                           "--model", str(moe), "--data-parallel-size", "2"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    assert "mixture-of-experts" in proc.stderr and "DP coordinator" in proc.stderr


# ------------------------------------------------------------------ helpers
def _bin(name: str) -> Path:
    return Path(sys.executable).parent / name


def _health(url: str) -> int:
    try:
        with urllib.request.urlopen(url + "/health", timeout=5) as r:
            return r.status
    except urllib.error.HTTPError as e:
        return e.code


def _ends_with_error(req: RawRequest, wait: float) -> bool:
    """Whether the stream ended, with an error event and one [DONE], within ``wait`` s."""
    try:
        req.read_until(b"data: [DONE]", timeout=wait)
    except (TimeoutError, OSError):
        return False
    events = [line for line in req.received.split(b"\n") if line.startswith(b"data: ")]
    assert events[-1] == b"data: [DONE]" and req.received.count(b"[DONE]") == 1
    return b'"error"' in events[-2]
