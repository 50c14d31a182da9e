"""The benchmark's load generator and report (tools/bench), against the trivial server.

Fast and engine-free: it keeps the harness from rotting between benchmark runs.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import subprocess
import sys
from typing import Iterator

import pytest

from harness.ports import HOST, free_port
from harness.procs import REPO_ROOT
from harness.waits import wait_listening
from tools.bench import request_path
from tools.bench.loadgen import Client, Workload, run_point
from tools.bench.prompts import make_prompts


@contextlib.contextmanager
def running_trivial_server(*args: str) -> Iterator[int]:
    """tools/bench/trivial_server.py with ``args``, on a free port (yielded)."""
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "tools.bench.trivial_server",
                             "--port", str(port), *args], cwd=REPO_ROOT)
    try:
        wait_listening(HOST, port, 20)
        yield port
    finally:
        proc.terminate()
        proc.wait(10)


@pytest.fixture
def trivial_server():
    with running_trivial_server() as port:
        yield port


@pytest.mark.parametrize("stream", [True, False])
def test_load_generator_counts_tokens_and_latencies(trivial_server, stream):
    import uvloop

    client = Client(HOST, trivial_server, ["hello world"] * 4)
    w = Workload("t", 4, stream=stream, max_tokens=16)
    r = uvloop.run(run_point(client, w, 0.5, max_requests=400))
    assert r.errors == 0 and r.bad_token_counts == 0
    assert r.measured > 0 and r.tokens > 0 and r.tok_s > 0
    assert r.latency_ms["n"] == r.measured
    if stream:
        assert r.ttft_ms["n"] == r.measured
        assert r.ttft_ms["p50"] <= r.latency_ms["p50"]
        assert r.itl_ms["n"] > 0
    assert r.requests_sent <= 400 + 4


@pytest.mark.parametrize("stream", [True, False])
def test_the_aiohttp_floor_answers_as_the_raw_one(stream):
    """``--aiohttp`` (the framework's floor) gives the load generator the same
    answers: every token counted, no error."""
    import uvloop

    with running_trivial_server("--aiohttp") as port:
        client = Client(HOST, port, ["hello world"] * 4)
        r = uvloop.run(run_point(client, Workload("t", 4, stream=stream, max_tokens=16), 0.5,
                                 max_requests=200))
    assert r.errors == 0 and r.bad_token_counts == 0 and r.measured > 0
    if stream:
        assert r.ttft_ms["n"] == r.measured and r.itl_ms["n"] > 0


def test_prompts_have_exactly_the_asked_number_of_tokens(tiny_model_dir):
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(tiny_model_dir / "tokenizer.json"))
    prompts = make_prompts(tiny_model_dir, count=8, tokens=64)
    assert len(set(prompts)) == 8
    assert all(len(tok.encode(p, add_special_tokens=True).ids) == 64 for p in prompts)


def test_report_renders_markdown(tmp_path):
    from tools.bench import report

    def run(fe, point, rep, tok_s, cpu):
        return {"frontend": fe, "engine": "mock", "repeat": rep, "point": point,
                "tok_s": tok_s, "req_s": tok_s / 128, "errors": 0, "bad_token_counts": 0,
                "ttft_ms": {"p50": 10.0, "p99": 20.0 if fe == "ours" else 50.0},
                "itl_ms": {"p50": 1.0, "p99": 2.0}, "tpot_ms": {"p50": 1.0},
                "latency_ms": {"p50": 100.0, "p99": 200.0},
                "frontend_cpu_s_per_1k_tok": cpu, "frontend_cpu_share": 1.0,
                "engine_cpu_share": 0.2, "loadgen_cpu_share": 0.1,
                "core_busy": {"0": 1.0, "1": 0.5}, "rss_peak_mb": 90.0}

    data = {
        "command": "x", "args": {"frontend_cpu": 0, "other_cpu": 1, "duration": 1.0,
                                 "repeats": 2, "real_repeats": 1, "max_requests": 10,
                                 "max_num_seqs": 512},
        "machine": {}, "started": "t0", "finished": "t1", "loadavg_start": [0, 0, 0],
        "loadavg_end": [0, 0, 0], "points": [{"name": "stream-c64", "concurrency": 64,
                                              "stream": True, "n": 1,
                                              "prompts_per_request": 1}],
        "ceiling": [], "failures": [],
        "startup": [{"frontend": "ours", "engine": "mock", "repeat": 0,
                     "start_to_serving_s": 0.5, "engine_ready_to_serving_s": 0.05,
                     "rss_idle_mb": 50.0},
                    {"frontend": "rust", "engine": "mock", "repeat": 0,
                     "start_to_serving_s": 6.0, "rss_idle_mb": 640.0,
                     "rss_idle_binary_mb": 45.0}],
        "runs": [run("ours", "stream-c64", 0, 30000.0, 0.03),
                 run("vllm", "stream-c64", 0, 10000.0, 0.09),
                 run("rust", "stream-c64", 0, 40000.0, 0.02),
                 run("ours", "stream-c64", 1, 33000.0, 0.03),
                 run("vllm", "stream-c64", 1, 10000.0, 0.09),
                 run("rust", "stream-c64", 1, 30000.0, 0.02)]}
    path = tmp_path / "b.json"
    path.write_text(json.dumps(data))
    md, _ = report.render(path, tmp_path / "b.md", tmp_path / "b.png")
    text = md.read_text()
    assert "| streaming c=64: output tok/s ≥ 3× vLLM | 3.15 (3.00–3.30)×" in text
    assert "| streaming c=64: p99 TTFT ≤ 0.5× vLLM | 0.40 (0.40–0.40)× | met |" in text
    assert "start-up < 1 s after the engine is ready | 0.050 s | met" in text
    # the three-way table: ours, vLLM Rust, vLLM Python, and ratios to each
    assert text.startswith("# Benchmarks: this frontend vs vLLM 0.32's Rust and Python "
                           "frontends")
    assert "| mock | vLLM Rust | 6.00 | - | 640 (vllm-rs alone 45) |" in text
    rows = [ln.split(" | ")[1] for ln in text.splitlines() if ln.startswith("| stream-c64 |")]
    assert rows[:3] == ["ours", "vLLM Rust", "vLLM Python"]
    assert "#### Ratios, ours / vLLM Rust, per repeat" in text
    assert "| stream-c64 | 0.93 (0.75–1.10)× | 0.67 (0.67–0.67)× |" in text
    assert "#### Ratios, ours / vLLM Python, per repeat" in text


@pytest.fixture
def paced_trivial_server():
    with running_trivial_server("--step-time", "0.002") as port:
        yield port


def test_paced_trivial_server_writes_one_chunk_per_stream_per_step(paced_trivial_server):
    import uvloop

    client = Client(HOST, paced_trivial_server, ["hello world"] * 4)
    w = Workload("t", 8, max_tokens=16)
    r = uvloop.run(run_point(client, w, 0.5, max_requests=200))
    assert r.errors == 0 and r.bad_token_counts == 0 and r.measured > 0
    # 16 tokens, one every 2 ms: a stream lasts 30 ms or more, its tokens
    # arrive one per read (merged steps would count gaps of 0), 2 ms apart or
    # more (a loaded host only adds to the pacing).
    assert r.latency_ms["p50"] >= 28
    assert r.itl_ms["p50"] >= 1.0
    assert r.tok_s <= 8 * 500 * 1.1


def _chunked(*events: bytes) -> bytes:
    return b"".join(b"%x\r\n%s\r\n" % (len(e), e) for e in events) + b"0\r\n\r\n"


def test_chat_requests_and_their_role_event():
    """A chat request carries the prompt as a user message; the stream's first
    event (the role, no content) is not a token."""
    import asyncio

    from tools.bench.loadgen import Record, _Conn

    client = Client("h", 1, ["hi there"], model="m")
    raw = client.build(Workload("c", 1, api="chat", max_tokens=3), 3)
    head, body = raw.split(b"\r\n\r\n")
    assert head.startswith(b"POST /v1/chat/completions HTTP/1.1")
    assert json.loads(body)["messages"] == [{"role": "user", "content": "hi there"}]
    assert b"POST /v1/completions " in client.build(Workload("p", 1), 3)

    async def parse() -> Record:
        conn = _Conn()
        conn.rec = Record(t_send=0.0)
        conn.fut = fut = asyncio.get_running_loop().create_future()
        conn.data_received(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
        conn.data_received(_chunked(
            b'data: {"choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}\n\n',
            b'data: {"choices":[{"index":0,"delta":{"content":"a"}}]}\n\n'
            b'data: {"choices":[{"index":0,"delta":{"content":"b"}}]}\n\n',
            b'data: {"choices":[],"usage":{"prompt_tokens":5,"completion_tokens":2}}\n\n'
            b"data: [DONE]\n\n"))
        return await fut

    rec = asyncio.run(parse())
    assert rec.error is None and rec.completion_tokens == 2 and sum(rec.ev_n) == 2


def test_paced_suite_points_and_floor():
    from tools.bench import run

    args = run.parse_args(["--suite", "paced"])
    names = [run.point_name(w, st) for st, w in run.paced_points(args)]
    assert names[:3] == ["stream-c16@2ms", "stream-c64@2ms", "stream-c256@2ms"]
    assert "chat-stream-c64@1ms" in names and "stream-c256@0ms" in names
    assert "plain-mt1-c64@2ms" in names and "plain-mt4-c64@2ms" in names
    assert "plain-mt1-c64@1ms" not in names
    floors = [run.point_name(w, st) for st, w in run.floor_points(args)]
    assert {"stream-c64@0ms", "stream-c64@2ms", "stream-c256@1ms",
            "plain-mt1-c64@0ms"} <= set(floors)
    quick = run.parse_args(["--suite", "paced", "--quick"])
    assert [run.point_name(w, st) for st, w in run.paced_points(quick)] == [
        "stream-c64@2ms", "chat-stream-c64@2ms", "plain-mt1-c64@2ms", "plain-mt4-c64@2ms",
        "stream-c64@0ms"]


def test_the_floor_runs_through_aiohttp_too_when_asked(tmp_path):
    """--floor-aiohttp: every floor point also through the bare aiohttp server,
    named apart, with the server's CPU measured."""
    from tools.bench import run

    args = run.parse_args(["--suite", "paced", "--floor-aiohttp", "--concurrency", "4",
                           "--step-times", "0.002", "--rate-concurrency", "4",
                           "--rate-max-tokens", "1", "--ceiling-duration", "0.5",
                           "--frontend-cpu", "0"])
    rows = run.floor(args, ["hello world"] * 4, tmp_path, 0)
    points = {(r["point"], r["server"]) for r in rows}
    assert points == {(p + s, k) for p in ("stream-c4@0ms", "stream-c4@2ms", "plain-mt1-c4@0ms")
                      for s, k in (("", "raw"), (" (aiohttp)", "aiohttp"))}
    for r in rows:  # (CPU is read in clock ticks: a short window may read 0)
        assert r["errors"] == 0 and r["tok_s"] > 0 and r["server_cpu_ms_per_req"] >= 0, r


def test_report_renders_the_paced_section(tmp_path):
    from tools.bench import report

    def run(fe, point, rep, cpu, tok_s=30000.0, req_s=200.0, stream=True):
        return {"frontend": fe, "engine": "mock", "repeat": rep, "point": point,
                "tok_s": tok_s, "req_s": req_s, "errors": 0, "bad_token_counts": 0,
                "ttft_ms": {"p50": 5.0, "p99": 9.0} if stream else {"n": 0},
                "itl_ms": {"p50": 2.0, "p99": 3.0} if stream else {"n": 0},
                "frontend_cpu_s_per_1k_tok": cpu, "frontend_cpu_ms_per_req": cpu * 128,
                "frontend_cpu_share": 0.5, "core_busy": {"0": 0.5, "1": 0.5},
                "rss_peak_mb": 60.0}

    def floor(point, rep, cpu):
        return {"point": point, "repeat": rep, "tok_s": 30000.0, "req_s": 250.0,
                "server_cpu_s_per_1k_tok": cpu, "server_cpu_ms_per_req": cpu,
                "server_cpu_share": 0.3, "loadgen_cpu_share": 0.3}

    def point(name, stream=True):
        return {"name": name, "load": name.split("@")[0], "concurrency": 64,
                "stream": stream, "n": 1, "prompts_per_request": 1}

    runs, floors = [], []
    for rep in (0, 1):
        runs += [run("ours", "stream-c64@2ms", rep, 0.012), run("vllm", "stream-c64@2ms", rep,
                                                                0.06),
                 run("ours", "stream-c256@0ms", rep, 0.01, tok_s=100000.0),
                 run("vllm", "stream-c256@0ms", rep, 0.05, tok_s=25000.0),
                 run("ours", "plain-mt1-c64@2ms", rep, 0.5, req_s=3000.0, stream=False),
                 run("vllm", "plain-mt1-c64@2ms", rep, 2.0, req_s=1000.0, stream=False),
                 run("rust", "stream-c64@2ms", rep, 0.02),
                 run("rust", "stream-c256@0ms", rep, 0.008, tok_s=90000.0),
                 run("rust", "plain-mt1-c64@2ms", rep, 0.5, req_s=3000.0, stream=False)]
        floors += [floor("stream-c64@0ms", rep, 0.01), floor("stream-c64@2ms", rep, 0.006),
                   floor("plain-mt1-c64@0ms", rep, 0.05)]
    data = {
        "command": "x", "args": {"suite": "paced", "frontend_cpu": 0, "other_cpu": 1,
                                 "duration": 1.0, "ceiling_duration": 1.0, "max_num_seqs": 512},
        "machine": {}, "started": "t0", "finished": "t1", "loadavg_start": [0, 0, 0],
        "loadavg_end": [0, 0, 0],
        "points": [point("stream-c64@2ms"), point("stream-c256@0ms"),
                   point("plain-mt1-c64@2ms", stream=False)],
        "floor": floors, "failures": [], "runs": runs,
        "startup": [{"frontend": "ours", "engine": "mock", "repeat": 0,
                     "engine_ready_to_serving_s": 0.05, "rss_idle_mb": 50.0}]}
    path = tmp_path / "benchmarks-paced.json"
    path.write_text(json.dumps(data))
    md = report.render_paced_into(path, tmp_path / "benchmarks.md")
    text = md.read_text()
    assert "## Engine-paced regime and request rate" in text
    assert ("| stream-c64@2ms: frontend CPU per output token ≤ 1/4 of vLLM's | "
            "0.200 (0.200–0.200)× vLLM's | met |") in text
    assert "(trivial server, unpaced, CPU per chunk) | 1.20 (1.20–1.20)× the floor | met" in text
    assert "(trivial server, paced 2 ms, CPU per chunk) | 2.00 (2.00–2.00)× the floor | " \
           "missed (1.33× the target)" in text
    assert "| stream-c256@0ms (frontend-bound): output tok/s ≥ 5× vLLM's | 4.00 " \
           "(4.00–4.00)× | missed (80% of the target) |" in text
    assert "| plain-mt1-c64@2ms: requests/s ≥ 4× vLLM's | 3.00 (3.00–3.00)× | missed" in text
    assert ("| plain-mt1-c64@0ms | 30,000 (30,000–30,000) | 250 | 0.0500 (0.0500–0.0500) | "
            "0.050 (0.050–0.050) |") in text
    # issue 30's targets against the Rust frontend
    assert ("| stream-c64@2ms: frontend CPU per output token ≤ 0.8× vLLM Rust's (issue 30) | "
            "0.60 (0.60–0.60)× vLLM Rust's | met |") in text
    assert "| stream-c64@2ms: p99 TTFT ≤ vLLM Rust's (issue 30) | 1.00 (1.00–1.00)× " \
           "vLLM Rust's | met |" in text
    assert "| plain-mt1-c64@2ms: frontend CPU per request ≤ 0.8× vLLM Rust's (issue 30) | " \
           "1.00 (1.00–1.00)× vLLM Rust's | missed (1.25× the target) |" in text
    assert "| stream-c256@0ms: output tok/s ≥ 1.25× vLLM Rust's (issue 30) | 1.11 " \
           "(1.11–1.11)× vLLM Rust's | missed (0.89× the target) |" in text
    assert "Ratios per repeat (ours / vLLM Rust measured seconds apart):" in text
    assert "Ratios per repeat (ours / vLLM Python measured seconds apart; ours / the " \
           "floor of the same repeat):" in text


@pytest.mark.parametrize("route", ["completions", "chat"])
def test_the_request_path_benchmark_serves_real_answers(tiny_model_dir, route, capsys):
    """In process, the shipped handler answers with the engine's tokens and
    frees its table entry; the benchmark's line reports the time."""
    state, engine, request_bodies = request_path.setup(tiny_model_dir, route, 3)
    path, handler = request_path.ROUTES[route]
    loop = asyncio.new_event_loop()
    try:
        body = loop.run_until_complete(
            request_path.serve(state, engine, handler, path, request_bodies[0], 3))
    finally:
        loop.close()
    answer = json.loads(body)
    assert answer["usage"]["completion_tokens"] == 3
    assert answer["usage"]["prompt_tokens"] >= 128  # (the chat template adds its own)
    assert answer["choices"][0]["finish_reason"] == "length"
    assert engine.added == 1 and not state.table.entries
    request_path.main(["--model", str(tiny_model_dir), "--route", route, "--requests", "20",
                       "--repeats", "1"])
    assert re.fullmatch(rf"{route} max_tokens=1: +[\d.]+ us per request \(best of 1 x 20\)\n",
                        capsys.readouterr().out)


@pytest.mark.parametrize("window", ["requests", "building"])
def test_the_request_path_windows_run(tiny_model_dir, window, capsys):
    """What ``--instructions`` counts under callgrind: the requests, then
    building them alone (subtracted); each runs and prints nothing."""
    request_path.main(["--model", str(tiny_model_dir), "--requests", "5", "--window", window])
    assert capsys.readouterr().out == ""
