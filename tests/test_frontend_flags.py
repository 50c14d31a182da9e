"""vLLM's frontend flags that shape logs and streams, on the mock engine:
SSE keep-alive comments, the access log (text and JSON, endpoints left out,
off), the request log and its outputs, error tracebacks, and the start-up
refusals vLLM has for these flags. (Their effect on responses is compared with
vLLM's own server in tests/test_parity_frontend_flags.py.)"""

from __future__ import annotations

import json
import subprocess

import pytest

from harness.frontend import SERVED_NAME
from harness.procs import BIN_DIR
from harness.waits import wait_for
from tests.support.http_client import RawRequest, get, post

CHAT = {"model": SERVED_NAME, "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4}


def lines_of(fe, needle: str) -> list[str]:
    return [line for line in fe.log().splitlines() if needle in line]


def test_keep_alive_comments_fill_a_silent_stream(start_mock_stack):
    """The engine steps every 2.5 s; with a 1 s interval the stream carries
    ``: keep-alive`` comments between its chunks (the gap only grows on a
    loaded host, so there is at least one)."""
    stack = start_mock_stack("--sse-keep-alive-interval", "1",
                             engine_args=("--step-time", "2.5"))
    req = RawRequest(stack.url, "/v1/chat/completions", {**CHAT, "max_tokens": 2, "stream": True})
    req.read_until(b"data: [DONE]", timeout=120)
    body = req.received.decode()
    req.close()
    assert ": keep-alive\n\n" in body, body
    events = [line for line in body.split("\n") if line.startswith("data: ")]
    assert events[-1] == "data: [DONE]" and len(events) >= 3  # the comments are extra


def test_access_log_lines_in_text_and_json(start_mock_stack):
    stack = start_mock_stack("--disable-access-log-for-endpoints", "/health,/metrics")
    assert post(stack.url, "/v1/chat/completions", {**CHAT, "request_id": "abc"}).status == 200
    assert get(stack.url, "/health").status == 200
    assert post(stack.url, "/v1/completions", {"model": "nope", "prompt": "x"}).status == 404
    fe = stack.frontend
    wait_for(lambda: len(lines_of(fe, "frontend.access")) >= 2, 10)
    lines = lines_of(fe, "frontend.access")
    chat = next(line for line in lines if "/v1/chat/completions" in line)
    assert '"POST /v1/chat/completions HTTP/1.1" 200 OK ' in chat
    assert "ms request_id=chatcmpl-abc" in chat
    assert any('"POST /v1/completions HTTP/1.1" 404 Not Found' in line for line in lines)
    assert not any("/health" in line for line in lines)  # left out

    stack = start_mock_stack("--log-format", "json")
    assert post(stack.url, "/v1/chat/completions", CHAT).status == 200
    needle = '"path":"/v1/chat/completions"'
    wait_for(lambda: lines_of(stack.frontend, needle), 10)
    event = json.loads(lines_of(stack.frontend, needle)[0])
    assert event["logger"] == "frontend.access"
    assert event["method"] == "POST" and event["path"] == "/v1/chat/completions"
    assert event["status"] == 200 and event["latency_ms"] > 0
    assert event["request_id"].startswith("chatcmpl-")


def test_no_access_log_when_disabled(start_mock_stack):
    stack = start_mock_stack("--disable-uvicorn-access-log")
    assert post(stack.url, "/v1/chat/completions", CHAT).status == 200
    assert get(stack.url, "/health").status == 200
    assert not lines_of(stack.frontend, "frontend.access")


def test_request_log_with_outputs(start_mock_stack):
    stack = start_mock_stack("--enable-log-requests", "--enable-log-outputs",
                             "--max-log-len", "5")
    fe = stack.frontend
    assert post(fe.url, "/v1/completions", {"model": SERVED_NAME, "prompt": ["a", "b"],
                                            "max_tokens": 2, "request_id": "c1"}).status == 200
    assert post(fe.url, "/v1/chat/completions", {**CHAT, "request_id": "h1"}).status == 200
    wait_for(lambda: lines_of(fe, "Generated response chatcmpl-h1"), 10)
    received = lines_of(fe, "Received request")
    assert any("Received request cmpl-c1-0: params: SamplingParams(n=1," in line
               for line in received)
    assert any("Received request cmpl-c1-1:" in line for line in received)
    assert any("Received request chatcmpl-h1: params: SamplingParams(" in line
               and "max_tokens=4" in line for line in received)
    generated = lines_of(fe, "Generated response")
    assert generated and all("cmpl-c1" not in line for line in generated)  # never completions
    (line,) = lines_of(fe, "Generated response chatcmpl-h1:")
    output = line.split("output: ", 1)[1].split(", finish_reason")[0]
    assert len(eval(output)) <= 5  # --max-log-len (a repr of the text)


def test_log_error_stack(start_mock_stack):
    stack = start_mock_stack("--log-error-stack")
    reply = post(stack.url, "/v1/chat/completions", {**CHAT, "temperature": 9})
    assert reply.status == 400
    wait_for(lambda: lines_of(stack.frontend, "caught. Request id:"), 10)
    assert "Traceback" in stack.frontend.log() or "\\nTraceback" in stack.frontend.log()


@pytest.mark.parametrize("flags,message", [
    (["--enable-log-outputs"], "--enable-log-outputs requires --enable-log-requests"),
    (["--sse-keep-alive-interval", "-1"], "--sse-keep-alive-interval must be a non-negative"),
])
def test_start_up_refusals(flags, message, tiny_model_dir):
    done = subprocess.run([str(BIN_DIR / "frontend"), "--model", str(tiny_model_dir),
                           "--engine-addr", "tcp://127.0.0.1:1", *flags],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2, done.stderr
    assert message in done.stderr


def test_root_path_keeps_the_api_key_guard(start_mock_stack):
    """/api/v1/... is /v1/... under --root-path /api: the key is checked there too."""
    stack = start_mock_stack("--root-path", "/api", "--api-key", "sekret")
    assert get(stack.url, "/api/v1/models").status == 401
    assert get(stack.url, "/v1/models").status == 401
    assert get(stack.url, "/api/health").status == 200  # (unguarded, as /health)
    reply = get(stack.url, "/api/v1/models", headers={"Authorization": "Bearer sekret"})
    assert reply.status == 200 and reply.json["data"][0]["id"] == SERVED_NAME
