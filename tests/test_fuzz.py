"""Property-based fuzzing from /openapi.json (tools/fuzz.py): its checks, and
short runs on the mock and on the real engine (no 5xx, every 4xx in OpenAI's
error shape, alive and idle afterwards). The 20,000-request figure is in
docs/reliability.md."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from harness.procs import REPO_ROOT
from tools.fuzz import cap_max_tokens, error_shape_problem, plan, response_problem

GOOD_ERROR = b'{"error":{"message":"m","type":"BadRequestError","param":null,"code":400}}'


def test_error_shape():
    assert error_shape_problem(400, GOOD_ERROR) is None
    assert "code 400 for status 404" in error_shape_problem(404, GOOD_ERROR)
    assert "not JSON" in error_shape_problem(400, b"Bad Request")
    assert "not {'error'" in error_shape_problem(401, b'{"error":"Unauthorized"}')
    assert "error keys" in error_shape_problem(400, b'{"error":{"message":"m"}}')
    # What no route takes: Starlette's answer, as vLLM's server gives it.
    assert error_shape_problem(404, b'{"detail":"Not Found"}') is None
    assert error_shape_problem(405, b'{"detail":"Method Not Allowed"}') is None
    assert error_shape_problem(400, b'{"detail":"Bad Request"}') is not None
    assert error_shape_problem(405, b'{"detail":"Not Found"}') is not None


def test_response_problems():
    assert response_problem(500, "application/json", GOOD_ERROR).startswith("status 500")
    assert response_problem(200, "text/event-stream", b"data: {}\n\ndata: [DONE]\n\n") is None
    assert "[DONE]" in response_problem(200, "text/event-stream", b"data: {}\n\n")
    assert "invalid JSON" in response_problem(200, "application/json", b"{")
    assert response_problem(200, "application/json", b"{}") is None
    # The Messages API: its own error shape (or OpenAI's), named events, no [DONE]
    anthropic_error = b'{"type":"error","error":{"type":"NotFoundError","message":"m"}}'
    assert response_problem(404, "application/json", anthropic_error, "/v1/messages") is None
    assert response_problem(404, "application/json", anthropic_error) is not None
    events = b'event: message_start\ndata: {}\n\nevent: message_stop\ndata: {}\n\n'
    assert response_problem(200, "text/event-stream", events, "/v1/messages") is None
    assert "message_stop" in response_problem(200, "text/event-stream",
                                              b"data: {}\n\ndata: [DONE]\n\n", "/v1/messages")


def test_max_tokens_cap():
    body = {"prompt": "x", "max_tokens": 900}
    cap_max_tokens(body, 8)
    assert body["max_tokens"] == 8
    chat = {"messages": [], "max_tokens": 3}
    cap_max_tokens(chat, 8)
    assert chat == {"messages": [], "max_tokens": 3, "max_completion_tokens": 8}
    gen = {"token_ids": [1], "sampling_params": {"max_tokens": "x"}}
    cap_max_tokens(gen, 8)
    assert gen["sampling_params"]["max_tokens"] == "x"  # left for the 400


def test_plan_covers_every_route():
    class Op:
        def __init__(self, method: str) -> None:
            self.method = method

    ops = [Op("GET"), Op("GET"), Op("POST"), Op("POST"), Op("POST")]
    steps = plan(ops, 1000)
    assert sum(n for _, _, n in steps) == 1000
    assert {id(op) for op, _, _ in steps} == {id(op) for op in ops}
    assert {mode for op, mode, _ in steps if op.method == "POST"} == {"positive", "negative"}


def run_fuzz(workdir: Path, *args: str, timeout: float = 400) -> tuple[dict, str]:
    out = workdir / "fuzz.json"
    proc = subprocess.run([sys.executable, "-m", "tools.fuzz", *args, "--json", str(out)],
                          cwd=REPO_ROOT, capture_output=True, text=True, timeout=timeout)
    assert out.exists(), proc.stderr[-4000:]
    return json.loads(out.read_text()), proc.stderr


def test_short_fuzz_on_the_mock(tiny_model_dir, tmp_path):
    s, err = run_fuzz(tmp_path, "--engine", "mock", "--model", str(tiny_model_dir), "--requests", "150",
                      "--seed", "1", "--logdir", str(tmp_path))
    assert s["requests"] >= 140 and s["routes"] >= 11, err[-2000:]
    assert s["server_errors"] == 0 and s["bad_error_shapes"] == 0, s["problems"]
    assert s["passed"], s


@pytest.mark.real_engine
@pytest.mark.timeout(600)
def test_short_fuzz_on_the_real_engine(real_stack, tmp_path):
    """The real engine is alive and idle afterwards: nothing invalid reached it
    (an invalid ADD would have killed its input thread)."""
    with real_stack.restarted("--max-concurrent-requests", "64") as fe:
        s, err = run_fuzz(tmp_path, "--url", fe.url, "--log", str(fe.log_path), "--requests", "150",
                          "--max-tokens-cap", "8", "--seed", "2", timeout=560)
        assert s["server_errors"] == 0 and s["bad_error_shapes"] == 0, s["problems"]
        assert s["after"]["engine_alive"] and s["after"]["idle"], s["after"]
        assert s["passed"], s


def test_short_engine_link_fuzz_on_the_mock(tiny_model_dir, tmp_path):
    """Rogue frames on the three engine ports while clients stream
    (tools/fuzz_link.py): every client request completes, the rank serves
    throughout, and what the rogues sent is counted as rejected."""
    out = tmp_path / "fuzz-link.json"
    proc = subprocess.run(
        [sys.executable, "-m", "tools.fuzz_link", "--engine", "mock", "--model",
         str(tiny_model_dir), "--frames", "1500", "--rate", "500", "--churn", "100",
         "--streams", "4", "--max-tokens", "64", "--seed", "3", "--logdir", str(tmp_path),
         "--json", str(out)],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=300)
    assert out.exists(), proc.stderr[-4000:]
    s = json.loads(out.read_text())
    assert s["frames"] == {"handshake": 500, "input": 500, "output": 500}, s["frames"]
    assert s["clients"]["requests"] > 0, s["clients"]
    assert s["clients"]["completed"] == s["clients"]["requests"], s["clients"]["problems"]
    assert s["watch"]["health_not_200"] == 0 and s["watch"]["rank_not_serving"] == 0
    assert {"malformed", "unknown_rank", "bad_handshake", "unknown_request"} <= set(s["rejected"])
    assert s["after"] == {"frontend_alive": True, "engine_alive": True, "health": 200,
                          "rank_serving": True, "idle": True}
    assert s["passed"] and proc.returncode == 0
