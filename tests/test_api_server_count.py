"""Several frontend processes on one service: ``--api-server-count 2``.

A supervisor and two workers, each with its own engine link (client_index 0
and 1: the engine replies to each on its own output socket). Against the
mock engine: connections spread over the workers; streaming, n>1 and batches
work on both; a client that leaves is aborted in the engine;
``--max-concurrent-requests`` holds for the whole service; SIGTERM drains
both; a worker that dies is replaced while the other serves and its engine
requests are aborted; a restarted service re-attaches; sd_notify speaks for
the service; Unix socket and TLS listeners; two engine ranks x two workers.
The real engine: tests/test_api_server_count_real.py.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import urllib.request
from concurrent.futures import ThreadPoolExecutor

import aiohttp

from harness.frontend import SERVED_NAME, FrontendProcess
from harness.waits import wait_for
from tests.support.http_client import RawRequest, post, stream
from tests.support.ops import run, tls_client_context
from tests.test_ops_lifecycle import NotifyListener

MODEL = SERVED_NAME
WORKERS = ("--api-server-count", "2")


def complete(url: str, **fields) -> dict:
    reply = post(url, "/v1/completions", {"model": MODEL, "prompt": "Hello", "max_tokens": 4,
                                          "temperature": 0, **fields})
    assert reply.status == 200, reply.body
    return reply.json


def adds_by_client(stack) -> dict[int, int]:
    return stack.control().stats()["adds_by_client"]


def open_streams(stack, tag: str, max_tokens: int, least: int = 4) -> list[RawRequest]:
    """Streams on both workers: at least ``least``, more until each worker holds
    one (the kernel spreads connections at random)."""
    worker_pids(stack.url)  # both listening (the first serves before the second starts)
    reqs: list[RawRequest] = []
    while len(reqs) < least or len(adds_by_client(stack)) < 2:
        assert len(reqs) < 40, adds_by_client(stack)
        req = RawRequest(stack.url, "/v1/completions", {
            "model": MODEL, "prompt": f"{tag}{len(reqs)}", "max_tokens": max_tokens,
            "ignore_eos": True, "stream": True})
        req.read_until(b"data:")
        reqs.append(req)
    return reqs


def worker_pids(url: str, count: int = 2) -> dict[int, int]:
    """worker index -> pid, from /debug/state (connections land on any worker)."""
    pids: dict[int, int] = {}

    def seen_all() -> bool:
        try:
            with urllib.request.urlopen(url + "/debug/state", timeout=10) as r:
                state = json.loads(r.read())
        except OSError:  # (a connection the kernel gave a worker that just died)
            return False
        pids[state["worker"]] = state["pid"]
        return len(pids) == count
    wait_for(seen_all, 30, interval=0.01)
    return pids


def test_connections_spread_and_every_shape_works_on_both(start_ops_stack):
    stack = start_ops_stack(*WORKERS, engine_args=("--step-time", "0.002"))
    worker_pids(stack.url)  # both serve (the first /health may come from one)
    with ThreadPoolExecutor(16) as pool:  # a new connection per request
        list(pool.map(lambda i: complete(stack.url, prompt=f"p{i}"), range(200)))
    split = adds_by_client(stack)
    assert sum(split.values()) == 200 and min(split.get(c, 0) for c in (0, 1)) >= 50, split

    def shapes(i: int) -> None:
        reply = complete(stack.url, prompt=["a", "b"], n=2, temperature=0.7, seed=i)
        assert sorted(c["index"] for c in reply["choices"]) == [0, 1, 2, 3]
        s = stream(stack.url, "/v1/completions", {
            "model": MODEL, "prompt": "Hi", "max_tokens": 8, "n": 2, "temperature": 0.8,
            "seed": i, "stream": True, "stream_options": {"include_usage": True}})
        s.check_framing()
        assert s.usage_chunks[0]["usage"]["completion_tokens"] == 16
        chat = post(stack.url, "/v1/chat/completions", {
            "model": MODEL, "messages": [{"role": "user", "content": "hi"}], "n": 3,
            "max_tokens": 4, "temperature": 0.5, "seed": i})
        assert chat.status == 200 and len(chat.json["choices"]) == 3
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(shapes, range(16)))
    assert min(adds_by_client(stack).values()) > split[0] // 2
    stack.frontend.wait_idle()
    stats = stack.control().stats()
    assert stats["aborts_unknown"] == 0 and stats["aborts_after_finish"] == 0, stats


def test_disconnect_aborts_in_the_engine(start_ops_stack):
    stack = start_ops_stack(*WORKERS, engine_args=("--step-time", "0.01"))
    reqs = open_streams(stack, "q", 1000)
    for req in reqs:
        req.hang_up()
    stack.frontend.wait_idle()
    stats = stack.control().stats()
    assert stats["aborted"] == len(reqs) and stats["aborts_unknown"] == 0, stats


def test_max_concurrent_requests_is_the_services_limit(start_ops_stack):
    stack = start_ops_stack(*WORKERS, "--max-concurrent-requests", "8",
                            engine_args=("--step-time", "0.01"))
    worker_pids(stack.url)
    reqs: list[RawRequest] = []
    while len(reqs) < 8:  # 4 streams on each worker: the limit is the service's
        before = adds_by_client(stack)
        req = RawRequest(stack.url, "/v1/completions", {
            "model": MODEL, "prompt": f"m{len(reqs)}", "max_tokens": 1000,
            "ignore_eos": True, "stream": True})
        req.read_until(b"data:")
        after = adds_by_client(stack)
        worker = next(c for c in after if after[c] != before.get(c, 0))
        if after[worker] > 4:
            req.hang_up()  # that worker holds its four: try another connection
            # once its slot is free again (the engine request aborted)
            wait_for(lambda: stack.control().stats()["running"] == len(reqs), 10)
            continue
        reqs.append(req)
    for _ in range(6):  # whichever worker takes it: the service is full
        reply = post(stack.url, "/v1/completions", {"model": MODEL, "prompt": "x",
                                                    "max_tokens": 1})
        assert reply.status == 429, reply.body
        assert "8 of 8 concurrent choices" in reply.error["message"]
    reqs.pop().hang_up()
    wait_for(lambda: post(stack.url, "/v1/completions", {
        "model": MODEL, "prompt": "x", "max_tokens": 1}).status == 200, 10)
    for req in reqs:
        req.hang_up()
    stack.frontend.wait_idle()


def test_sigterm_drains_both_workers(start_ops_stack):
    stack = start_ops_stack(*WORKERS, engine_args=("--step-time", "0.01"))
    reqs = open_streams(stack, "d", 300)
    stack.frontend.proc.send_signal(signal.SIGTERM)
    for req in reqs:  # every running stream finishes, with no error
        body = req.read_all(timeout=30)
        assert body.count(b"data: [DONE]") == 1 and b'"error"' not in body
    assert stack.frontend.proc.wait(30) == 0
    assert stack.control().stats()["aborted"] == 0


def test_a_dead_worker_is_replaced_and_its_requests_aborted(start_ops_stack):
    stack = start_ops_stack(*WORKERS, engine_args=("--step-time", "0.01"))
    pids = worker_pids(stack.url)
    reqs = open_streams(stack, "k", 1000)
    on_worker_0 = adds_by_client(stack)[0]
    os.kill(pids[0], signal.SIGKILL)
    # Replaced: the new worker 0 re-attaches and aborts what its predecessor left.
    wait_for(lambda: worker_pids(stack.url)[0] != pids[0], 30)
    wait_for(lambda: stack.control().stats()["aborted"] >= on_worker_0, 10)
    for i in range(20):  # both serve meanwhile and after
        complete(stack.url, prompt=f"after {i}")
    for req in reqs:
        req.close()
    stack.frontend.wait_idle()
    assert "frontend worker 0" in stack.frontend.log() and "replacing it" in \
        stack.frontend.log()


def test_a_restarted_service_reattaches_with_both_workers(start_ops_stack, tiny_model_dir,
                                                          tmp_path):
    stack = start_ops_stack(*WORKERS)
    complete(stack.url)
    old = stack.frontend
    # Both workers attached (each one's engine state) before the restart.
    wait_for(lambda: "with 2 frontend workers" in old.log(), 30)
    old.stop()
    stack.frontend = FrontendProcess(old.engine_addr, tiny_model_dir, tmp_path, *WORKERS,
                                     state_file=old.state_file, port=old.port)
    stack.frontend.wait_healthy(timeout=30)
    wait_for(lambda: "with 2 frontend workers" in stack.frontend.log(), 30)
    before = adds_by_client(stack)
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda i: complete(stack.url, prompt=f"r{i}"), range(40)))
    after = adds_by_client(stack)
    assert all(after.get(c, 0) > before.get(c, 0) for c in (0, 1)), (before, after)
    stack.frontend.wait_idle()


def test_sd_notify_speaks_for_the_service(start_ops_stack):
    notify = NotifyListener()
    try:
        stack = start_ops_stack(*WORKERS, env={"NOTIFY_SOCKET": notify.path,
                                               "WATCHDOG_USEC": "2000000"})
        ready = notify.wait_for("READY")
        assert "2 frontend workers" in ready["STATUS"]
        pids = worker_pids(stack.url)
        notify.poll(2.5)
        assert "WATCHDOG" in notify.keys()
        os.kill(pids[1], signal.SIGSTOP)  # a stuck worker: no more pings
        try:
            notify.poll(3.5)  # (its last heartbeat ages out)
            notify.messages.clear()
            notify.poll(3.0)
            assert "WATCHDOG" not in notify.keys()
        finally:
            os.kill(pids[1], signal.SIGCONT)
        notify.messages.clear()
        notify.poll(3.0)
        assert "WATCHDOG" in notify.keys()
        stack.frontend.proc.send_signal(signal.SIGTERM)
        notify.wait_for("STOPPING")
        assert stack.frontend.proc.wait(30) == 0
    finally:
        notify.close()


def test_unix_socket_and_tls(start_ops_stack, tmp_path):
    from tests.test_ops_listener import _https, _uds_get, _write_pki

    path = tmp_path / "fe.sock"

    async def uds_post(body: dict) -> int:
        connector = aiohttp.UnixConnector(path=str(path))
        async with aiohttp.ClientSession(connector=connector) as s:
            async with s.post("http://frontend/v1/completions", json=body) as r:
                return r.status

    stack = start_ops_stack(*WORKERS, "--uds", str(path), engine_args=("--step-time", "0.005"),
                            ready=lambda st: run(_uds_get(path, "/health"))[0] == 200)
    wait_for(lambda: "with 2 frontend workers" in stack.frontend.log(), 30)

    async def load() -> list[int]:  # the workers share the socket: a busy one accepts less
        return await asyncio.gather(*(uds_post({"model": MODEL, "prompt": f"u{i}",
                                                "max_tokens": 8}) for i in range(80)))
    assert run(load()) == [200] * 80
    assert set(adds_by_client(stack)) == {0, 1}

    pki = _write_pki(tmp_path)
    ctx = tls_client_context(pki["ca"])
    tls = start_ops_stack(*WORKERS, "--ssl-certfile", str(pki["server_cert"]),
                          "--ssl-keyfile", str(pki["server_key"]), scheme="https",
                          ready=lambda st: run(_https(st.url + "/health", ctx))[0] == 200)
    wait_for(lambda: "with 2 frontend workers" in tls.frontend.log(), 30)
    for i in range(30):
        status, _ = run(_https(tls.url + "/v1/completions", ctx, "POST",
                               json={"model": MODEL, "prompt": f"t{i}", "max_tokens": 2}))
        assert status == 200
    assert set(adds_by_client(tls)) == {0, 1}


def test_two_workers_times_two_engine_ranks(tiny_model_dir, tmp_path):
    """N workers x M ranks: every rank registers with every worker, each
    worker routes over both ranks, aborts reach the owning rank."""
    from tests.test_data_parallel import DpStack

    stack = DpStack(tiny_model_dir, tmp_path, 2, WORKERS + ("--dp-routing", "load"),
                    ("--step-time", "0.005"))
    try:
        wait_for(lambda: "with 2 frontend workers" in stack.frontend.log(), 30)
        with ThreadPoolExecutor(16) as pool:
            list(pool.map(lambda i: complete(stack.url, prompt=f"x{i}", max_tokens=8),
                          range(64)))
        per_rank = [stack.ranks.controls[r].stats()["adds_by_client"] for r in (0, 1)]
        for by_client in per_rank:  # each rank served both workers
            assert set(by_client) == {0, 1}, per_rank
        stack.check_clean()
    finally:
        stack.stop()


def test_metrics_from_any_worker_show_the_whole_service(start_ops_stack):
    """Counters and histograms summed over the workers (whichever answers), and
    still so after a worker died and was replaced: counters never go down."""
    from tests.support.http_client import metric, scrape

    stack = start_ops_stack(*WORKERS, engine_args=("--step-time", "0.002"))
    worker_pids(stack.url)
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda i: complete(stack.url, prompt=f"m{i}", max_tokens=5), range(60)))
    split = adds_by_client(stack)
    assert min(split.values()) > 0 and sum(split.values()) == 60
    labels = {"model_name": MODEL, "engine": "0"}

    def service_counts() -> tuple[float, float, float, int]:
        samples = scrape(stack.url)
        return (metric(samples, "vllm:request_success_total", finished_reason="length",
                       **labels),
                metric(samples, "vllm:generation_tokens_total", **labels),
                metric(samples, "vllm:e2e_request_latency_seconds_count", **labels),
                int(json.loads(urllib.request.urlopen(
                    stack.url + "/debug/state", timeout=10).read())["worker"]))
    # Each worker's /metrics: the same service totals, once the other worker's
    # snapshot (written every second and at each of its scrapes) is current.
    seen: dict[int, tuple] = {}

    def both_show_the_service() -> bool:
        *counts, worker = service_counts()
        seen[worker] = tuple(counts)
        return len(seen) == 2 and all(c == (60, 300, 60) for c in seen.values())
    wait_for(both_show_the_service, 30, interval=0.01, message=lambda: f"seen {seen}")
    pids = worker_pids(stack.url)
    os.kill(pids[1], signal.SIGKILL)
    wait_for(lambda: worker_pids(stack.url)[1] != pids[1], 30)
    for _ in range(6):  # replaced: its predecessor's counts carry on
        assert service_counts()[:3] == (60, 300, 60)
