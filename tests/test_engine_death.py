"""Engine failures and cancellation, with the mock engine's fault injection.

Every test gets its own mock stack (a mock engine and our frontend, ~1 s).
The mock counts what the frontend sends: ``aborted`` (live requests aborted),
``aborts_after_finish`` (aborts of requests it had already finished: wasted
work the frontend must never cause) and ``aborts_unknown``.
"""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from harness.waits import wait_for
from tests.support.http_client import (
    MODEL,
    RawRequest,
    finals_by_index,
    get,
    metric,
    parse_sse,
    post,
    scrape,
    stream_completion,
)

STEP_TIME = "0.01"  # 100 steps/s: 1000 tokens would take 10 s (more on a loaded host)
PROMPTS = ["Hello", "World", "The quick brown fox"]
# "Promptly", on a loaded 2-core host too: half the time the requests would
# take to end by themselves (the frontend declares an engine whose connection
# dropped dead after 1 s).
PROMPT_END_S = 1000 * float(STEP_TIME) / 2


@pytest.fixture
def mock_stack(start_mock_stack):
    """A slow-stepping mock stack; afterwards no finished request was ever aborted."""
    stack = start_mock_stack(engine_args=("--step-time", STEP_TIME))
    yield stack
    if stack.engine.poll() is None:
        stats = stack.control().stats()
        assert stats["aborts_after_finish"] == 0, stats
        assert stats["aborts_unknown"] == 0, stats


def long_body(**extra) -> dict:
    return {"model": MODEL, "prompt": PROMPTS, "max_tokens": 1000, "ignore_eos": True,
            "temperature": 0, **extra}


def body_events(raw: bytes) -> list[str]:
    """SSE payloads of a raw HTTP/1.1 chunked response (chunk framing removed)."""
    head, _, body = raw.partition(b"\r\n\r\n")
    assert b"chunked" in head.lower(), head
    data = b""
    while body:
        size_line, _, rest = body.partition(b"\r\n")
        size = int(size_line, 16)
        if size == 0:
            break
        data += rest[:size]
        body = rest[size + 2:]
    return parse_sse(data)


def start_stream(url: str, body: dict, events: int = 3) -> RawRequest:
    req = RawRequest(url, "/v1/completions", {**body, "stream": True})
    req.read_until(b"data: ", count=events, timeout=10)
    assert req.status == 200
    return req


def check_500(reply, text: str | None = None) -> dict:
    assert reply.status == 500, (reply.status, reply.body[:500])
    err = reply.error
    assert err["type"] == "InternalServerError"
    if text:
        assert text in err["message"], err
    return err


def check_stream_error(events: list[str], code: int = 500) -> dict:
    """An error event, then exactly one [DONE], and nothing after."""
    assert events[-1] == "[DONE]" and events.count("[DONE]") == 1, events[-3:]
    err = json.loads(events[-2])
    assert set(err) == {"error"}, err
    assert set(err["error"]) == {"message", "type", "param", "code"}
    assert err["error"]["code"] == code
    return err["error"]


# ---------------------------------------------------------------- engine death

@pytest.mark.parametrize("how", ["crash", "exit"])
def test_engine_death_ends_in_flight_requests(mock_stack, how):
    """crash: ENGINE_CORE_DEAD then exit; exit: gone without a word (SIGKILL-like)."""
    url = mock_stack.url
    with ThreadPoolExecutor(2) as pool:
        pending = pool.submit(post, url, "/v1/completions", long_body(n=2, temperature=1),
                              timeout=30)
        streaming = start_stream(url, long_body())
        wait_for(lambda: mock_stack.control().stats()["running"] == 9, 30)
        getattr(mock_stack.control(), how)()
        t0 = time.monotonic()
        reply = pending.result(timeout=10)
        raw = streaming.read_all(timeout=10)
        took = time.monotonic() - t0
    assert took < PROMPT_END_S, took
    check_500(reply, "EngineCore encountered an issue")
    err = check_stream_error(body_events(raw))
    assert "EngineCore" in err["message"]
    assert mock_stack.engine.wait(10) in ((1,) if how == "crash" else (-signal.SIGKILL,))
    # Dead: /health says so, new requests fail without waiting for an engine,
    # the table is empty.
    assert get(url, "/health").status == 503
    for streaming_flag in (False, True):
        t0 = time.monotonic()
        reply = post(url, "/v1/completions", {"model": MODEL, "prompt": "Hello",
                                              "max_tokens": 4, "stream": streaming_flag},
                     timeout=10)
        assert time.monotonic() - t0 < PROMPT_END_S
        check_500(reply)
    state = mock_stack.frontend.debug_state()
    assert state["table"] == 0 and state["engine_alive"] is False


def test_new_engine_on_the_same_address_is_attached(mock_stack):
    url = mock_stack.url
    mock_stack.control().crash()
    assert mock_stack.engine.wait(10) == 1
    wait_for(lambda: get(url, "/health").status == 503, 30)
    mock_stack.start_engine()  # says HELLO at the frontend's handshake address
    wait_for(lambda: get(url, "/health").status == 200, 60,
             message="frontend did not re-attach to the new engine")
    reply = post(url, "/v1/completions", {"model": MODEL, "prompt": ["Hello", "World"],
                                          "max_tokens": 3, "n": 2, "temperature": 1})
    assert reply.status == 200, reply.body
    assert len(reply.json["choices"]) == 4
    s = stream_completion(url, {"prompt": "Hello", "max_tokens": 3})
    assert finals_by_index(s.chunks)[0]["finish_reason"] == "length"
    assert mock_stack.control().stats()["adds"] == 5  # counted by the new engine


def test_stall_waits_and_completes(mock_stack):
    """A stalled engine (alive, but neither stepping nor reading) is slow, not
    dead: the frontend keeps serving, its requests wait, then complete."""
    url, control = mock_stack.url, mock_stack.control()
    streaming = start_stream(url, {"model": MODEL, "prompt": "World", "max_tokens": 100},
                             events=2)
    control.stall(None)  # until resumed; the engine answers its control channel meanwhile
    stalled = control.stats()
    assert stalled["running"] == 1, stalled  # the stream is stalled mid-way
    with ThreadPoolExecutor(1) as pool:
        pending = pool.submit(post, url, "/v1/completions",
                              {"model": MODEL, "prompt": "Hello", "max_tokens": 20},
                              timeout=30)
        # Its ADD is sent (the choice is in the table), unread by the engine.
        wait_for(lambda: metric(scrape(url), "vllm_frontend_fanout_entries") == 2, 10,
                 message="the new request never reached the table")
        assert get(url, "/health").status == 200  # slow is not dead
        assert metric(scrape(url), "vllm_frontend_engine_alive") == 1
        assert not pending.done()
        assert control.stats()["steps"] == stalled["steps"]  # still stalled throughout
        control.stall(0)
        reply = pending.result(timeout=15)
        raw = streaming.read_all(timeout=15)
    assert reply.status == 200 and reply.json["choices"][0]["finish_reason"] == "length"
    events = body_events(raw)
    assert events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    assert chunks[-1]["choices"][0]["finish_reason"] == "length"
    assert get(url, "/health").status == 200
    assert control.stats()["adds"] == 2


# ---------------------------------------------------------------- cancellation

def test_failing_sibling_fails_the_request_and_aborts_the_others(mock_stack):
    url, control = mock_stack.url, mock_stack.control()
    # Non-streaming: the first of three engine requests errors.
    control.error_next(1)
    before = control.stats()
    reply = post(url, "/v1/completions", long_body(), timeout=30)
    err = check_500(reply)
    assert err["message"] == "Internal server error"
    mock_stack.frontend.wait_idle()  # (its has_work call queues behind the ABORT)
    after = control.stats()
    assert after["finished"]["error"] - before["finished"]["error"] == 1
    assert after["aborted"] - before["aborted"] == 2
    # Streaming: an error event, [DONE], and the siblings aborted.
    control.error_next(1)
    before = after
    req = RawRequest(url, "/v1/completions", {**long_body(n=2, temperature=1),
                                              "stream": True})
    check_stream_error(body_events(req.read_all(timeout=10)))
    mock_stack.frontend.wait_idle()
    after = control.stats()
    assert after["finished"]["error"] - before["finished"]["error"] == 1
    assert after["aborted"] - before["aborted"] == 5
    mock_stack.frontend.wait_idle()


def test_stop_string_match_aborts_that_engine_request(mock_stack):
    url, control = mock_stack.url, mock_stack.control()
    first = post(url, "/v1/completions", {"model": MODEL, "prompt": "Hello",
                                          "max_tokens": 12, "temperature": 0}).json
    text = first["choices"][0]["text"].replace("\ufffd", "")
    stop = next(text[i:i + 2] for i in range(len(text) - 2)
                if text[i:i + 2].strip() and len(text[i:i + 2]) == 2)
    for streaming in (False, True):
        before = control.stats()
        body = {"model": MODEL, "prompt": ["Hello", "Hello"], "max_tokens": 1000,
                "temperature": 0, "ignore_eos": True, "stop": [stop]}
        if streaming:
            s = stream_completion(url, body, timeout=30)
            finals = finals_by_index(s.chunks)
        else:
            finals = {c["index"]: c for c in post(url, "/v1/completions", body,
                                                  timeout=30).json["choices"]}
        assert [f["stop_reason"] for f in finals.values()] == [stop, stop]
        assert [f["finish_reason"] for f in finals.values()] == ["stop", "stop"]
        mock_stack.frontend.wait_idle()
        after = control.stats()
        assert after["aborted"] - before["aborted"] == 2  # the engine knows no stops
        assert after["finished"]["total"] == before["finished"]["total"]
    # Requests that finish by themselves are never aborted (checked at teardown).
    for streaming in (False, True):
        body = {"model": MODEL, "prompt": PROMPTS, "max_tokens": 5, "n": 2,
                "temperature": 1, "stream": streaming}
        assert post(url, "/v1/completions", body).status == 200
    mock_stack.frontend.wait_idle()
    assert control.stats()["aborts_after_finish"] == 0


def test_engine_initiated_abort_reports_abort(mock_stack):
    url, control = mock_stack.url, mock_stack.control()
    with ThreadPoolExecutor(1) as pool:
        pending = pool.submit(post, url, "/v1/completions", long_body(), timeout=30)
        streaming = start_stream(url, long_body(prompt="Hello"))
        wait_for(lambda: control.stats()["running"] == 4, 30)
        assert control.abort_all() == 4
        reply = pending.result(timeout=10)
        raw = streaming.read_all(timeout=10)
    assert reply.status == 200, reply.body
    assert [c["finish_reason"] for c in reply.json["choices"]] == ["abort"] * 3
    events = body_events(raw)
    assert events[-1] == "[DONE]" and events.count("[DONE]") == 1
    chunks = [json.loads(e) for e in events[:-1]]
    assert finals_by_index(chunks)[0]["finish_reason"] == "abort"
    assert control.stats()["aborted"] == 0  # the frontend sent no ABORT of its own
    mock_stack.frontend.wait_idle()


def test_sigterm_drains_a_running_stream(mock_stack):
    fe = mock_stack.frontend
    req = start_stream(mock_stack.url, {"model": MODEL, "prompt": "Hello",
                                        "max_tokens": 150, "ignore_eos": True,
                                        "temperature": 0}, events=2)
    fe.proc.send_signal(signal.SIGTERM)
    raw = req.read_all(timeout=20)
    events = body_events(raw)
    assert events[-1] == "[DONE]" and events.count("[DONE]") == 1
    chunks = [json.loads(e) for e in events[:-1]]
    assert finals_by_index(chunks)[0]["finish_reason"] == "length"
    assert "error" not in events[-2]
    try:
        assert fe.proc.wait(15) == 0
    except subprocess.TimeoutExpired:
        pytest.fail("frontend did not exit after draining")
    stats = mock_stack.control().stats()
    assert stats["finished"]["length"] == 1 and stats["aborted"] == 0


def test_sigterm_aborts_what_outlives_the_drain_timeout(start_mock_stack):
    stack = start_mock_stack("--shutdown-timeout", "1",
                             engine_args=("--step-time", STEP_TIME))
    req = start_stream(stack.url, long_body(), events=2)
    stack.frontend.proc.send_signal(signal.SIGTERM)
    raw = req.read_all(timeout=20)
    assert stack.frontend.proc.wait(15) == 0
    events = body_events(raw)
    assert events[-1] == "[DONE]" and events.count("[DONE]") == 1
    # Aborted after the drain timeout, not run to their end (10 s of steps).
    # (The mock may answer its control socket before reading that last ABORT.)
    wait_for(lambda: stack.control().stats()["aborted"] == 3, 10)
    assert stack.control().stats()["aborts_after_finish"] == 0


def test_slow_reader_is_aborted_not_buffered(start_mock_stack):
    """Per-request output queues are bounded: a client that stops reading gets
    its request aborted (an error event, then [DONE]) instead of growing memory."""
    stack = start_mock_stack("--max-stream-buffer", "64",
                             engine_args=("--step-time", "0.001"))
    req = RawRequest(stack.url, "/v1/completions", {
        **long_body(prompt=[f"p{i}" for i in range(64)]), "stream": True})
    req.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    # Not reading: the socket buffers fill, then the frontend's bounded buffer.
    wait_for(lambda: metric(scrape(stack.url), "vllm_frontend_slow_consumer_aborts_total")
             == 1, 30, message="the stream that nobody reads was never aborted")
    raw = req.read_all(timeout=20)
    events = body_events(raw)
    assert "error" in events[-2], events[-2][:300]
    check_stream_error(events, 503)
    stack.frontend.wait_idle()
    stats = stack.control().stats()
    assert stats["aborted"] == 64 - stats["finished"]["length"]
    assert stats["aborts_after_finish"] == 0
