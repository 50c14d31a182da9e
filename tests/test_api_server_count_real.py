"""``--api-server-count 2`` in front of a real vLLM engine: the engine learns
both workers' address pairs from the handshake alone (no engine flag) and
answers each on its own output socket."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest

from harness.frontend import SERVED_NAME, FrontendProcess
from harness.waits import wait_for
from tests.support.http_client import RawRequest, post, stream
from tests.support.requirements import require_vllm
from tests.support.stacks import engine_requests

pytestmark = pytest.mark.real_engine


@pytest.fixture(scope="module")
def service(start_real_engine, tiny_model_dir, tmp_path_factory):
    require_vllm()
    engine = start_real_engine()
    workdir = tmp_path_factory.mktemp("asc-real")
    fe = FrontendProcess(engine.handshake_addr, tiny_model_dir, workdir,
                         "--api-server-count", "2", state_file=workdir / "asc.state")
    try:
        fe.wait_healthy(timeout=300)
        wait_for(lambda: "with 2 frontend workers" in fe.log(), 300)
        yield fe
    finally:
        fe.stop()
        engine.stop()


def test_both_workers_serve_streams_batches_and_n(service):
    def one(i: int) -> None:
        reply = post(service.url, "/v1/completions", {
            "model": SERVED_NAME, "prompt": ["Hello", "The river"], "n": 2,
            "temperature": 0.8, "seed": i, "max_tokens": 6})
        assert reply.status == 200 and len(reply.json["choices"]) == 4
        s = stream(service.url, "/v1/chat/completions", {
            "model": SERVED_NAME, "messages": [{"role": "user", "content": f"hi {i}"}],
            "max_tokens": 6, "stream": True, "temperature": 0})
        s.check_framing()
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(one, range(16)))
    seen = set()
    wait_for(lambda: seen.add(service.debug_state()["worker"]) or seen == {0, 1}, 30,
             interval=0.01)
    service.wait_idle()


def test_greedy_is_the_same_on_both_workers(service):
    outputs = set()
    for _ in range(12):  # new connections land on either worker
        reply = post(service.url, "/v1/completions", {
            "model": SERVED_NAME, "prompt": "Once upon a time", "max_tokens": 8,
            "temperature": 0})
        outputs.add(reply.json["choices"][0]["text"])
    assert len(outputs) == 1


def test_a_client_that_leaves_is_aborted_in_the_engine(service):
    """Whichever worker has the stream sends the ABORT: the service's count
    (summed over the workers) has all four. (A frontend aborts only what has
    not finished, and 900 tokens had hardly begun.)"""
    service.wait_idle(timeout=30)
    aborted, _ = engine_requests(service.url)
    reqs = []
    for i in range(4):
        req = RawRequest(service.url, "/v1/completions", {
            "model": SERVED_NAME, "prompt": f"story {i}", "max_tokens": 900,
            "ignore_eos": True, "stream": True})
        req.read_until(b"data:")
        reqs.append(req)
    for req in reqs:
        req.hang_up()
    service.wait_idle(timeout=30)  # each worker's table empty, the engine has no work
    # (a worker's count reaches the others' /metrics with its next heartbeat)
    wait_for(lambda: engine_requests(service.url)[0] == aborted + 4, 30,
             message=lambda: f"aborts {engine_requests(service.url)[0] - aborted} of 4")
