"""The benchmark's load generator and report (tools/bench), against the trivial server.

Fast and engine-free: it keeps the harness from rotting between benchmark runs.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tools.bench import procs
from tools.bench.loadgen import Client, Workload, run_point
from tools.bench.prompts import make_prompts


@pytest.fixture
def trivial_server():
    port = procs.free_port()
    proc = subprocess.Popen([sys.executable, "-m", "tools.bench.trivial_server",
                             "--port", str(port)], cwd=procs.REPO_ROOT)
    try:
        procs.wait_healthy_tcp(procs.HOST, port, 20)
        yield port
    finally:
        proc.terminate()
        proc.wait(10)


@pytest.mark.parametrize("stream", [True, False])
def test_load_generator_counts_tokens_and_latencies(trivial_server, stream):
    import uvloop

    client = Client(procs.HOST, trivial_server, ["hello world"] * 4)
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
                     "rss_idle_mb": 50.0}],
        "runs": [run("ours", "stream-c64", 0, 30000.0, 0.03),
                 run("vllm", "stream-c64", 0, 10000.0, 0.09),
                 run("ours", "stream-c64", 1, 33000.0, 0.03),
                 run("vllm", "stream-c64", 1, 10000.0, 0.09)]}
    path = tmp_path / "b.json"
    path.write_text(json.dumps(data))
    md, _ = report.render(path, tmp_path / "b.md", tmp_path / "b.png")
    text = md.read_text()
    assert "| streaming c=64: output tok/s ≥ 3× vLLM | 3.15 (3.00–3.30)×" in text
    assert "| streaming c=64: p99 TTFT ≤ 0.5× vLLM | 0.40 (0.40–0.40)× | met |" in text
    assert "start-up < 1 s after the engine is ready | 0.050 s | met" in text
