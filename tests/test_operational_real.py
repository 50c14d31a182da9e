"""The dev-mode routes on the real CPU engine (VLLM_SERVER_DEV_MODE=1), through
our frontend: pause in each mode with streams open, resume, is_paused, the
prefix cache, sleep and wake_up, and what a CPU engine refuses. The same
calls to the mock engine (run as engine-core runs vLLM on CPU: the uni
executor) answer the same, so the mock's comparisons with vLLM's server
(tests/test_operational_parity.py) hold for the real engine too.

The engine is the session's: it is left resumed and awake whatever happens.
"""

from __future__ import annotations

import pytest

from harness.waits import wait_for
from tests.support.http_client import RawRequest
from tests.support.operational import DEV_MODE, call, ours_on_mock, sse_events

pytestmark = pytest.mark.real_engine

LONG = {"model": "tiny", "prompt": "Hello", "max_tokens": 900, "ignore_eos": True,
        "temperature": 0, "stream": True}
# Answers that depend on the engine only, in order (a pause, then what a paused
# CPU engine does): equal on the real engine and on the mock.
ENGINE_ANSWERS = [
    ("GET", "/is_paused"),
    ("GET", "/is_sleeping"),
    ("POST", "/release_kv_cache_memory"),  # not paused
    ("POST", "/pause?mode=keep"),
    ("GET", "/is_sleeping"),
    ("POST", "/release_kv_cache_memory"),  # the CPU worker refuses to discard
    ("GET", "/is_sleeping"),  # (kv_cache counted as discarded all the same)
    ("POST", "/wake_up?tags=kv_cache"),
    ("GET", "/is_paused"),
    ("POST", "/sleep?level=1"),
    ("POST", "/wake_up?tags=scheduling"),
    ("POST", "/wake_up"),
    ("POST", "/collective_rpc"),
    ("POST", "/start_weight_update"),
    ("POST", "/shutdown_weight_transfer_engine"),
    ("GET", "/weight_info"),
    ("POST", "/reset_prefix_cache"),
    ("GET", "/is_paused"),
]
BODIES = {"/collective_rpc": {"method": "no_such_method"}}


def open_stream(url: str, body: dict) -> RawRequest:
    raw = RawRequest(url, "/v1/completions", body)
    raw.read_until(b"data: ", count=2)  # running: tokens are coming
    return raw


def last_finish(raw: RawRequest) -> str:
    raw.read_all(timeout=120)
    raw.close()
    events = sse_events(raw.received)
    assert events[-1] == "[DONE]", events[-3:]
    return events[-2]["choices"][0]["finish_reason"]


def answers(url: str) -> list:
    out = []
    for method, path in ENGINE_ANSWERS:
        answer = call(url, method, path, BODIES.get(path))
        out.append((path, answer.status, answer.value))
    return out


def test_pause_modes_sleep_and_caches_on_the_cpu_engine(real_stack, tiny_model_dir, tmp_path):
    with real_stack.restarted(env=DEV_MODE) as fe:
        url = fe.url
        try:
            assert call(url, "GET", "/is_paused").value == {"is_paused": False}

            # abort: the engine ends the open stream ("abort"), new requests wait
            raw = open_stream(url, LONG)
            assert b"[DONE]" not in raw.received
            assert call(url, "POST", "/pause?mode=abort").value == {"status": "paused"}
            assert last_finish(raw) == "abort"
            assert call(url, "GET", "/is_paused").value == {"is_paused": True}
            assert call(url, "POST", "/resume").value == {"status": "resumed"}

            # keep: frozen while paused, running again after /resume
            raw = open_stream(url, LONG)
            assert call(url, "POST", "/pause?mode=keep&clear_cache=false").value == {
                "status": "paused"}
            assert b"[DONE]" not in raw.received
            seen = raw.received.count(b"data: ")
            assert call(url, "POST", "/resume").value == {"status": "resumed"}
            raw.read_until(b"data: ", count=seen + 2)
            assert call(url, "POST", "/abort_requests", {}).value == {
                "status": "aborted", "aborted": 1}
            assert last_finish(raw) == "abort"

            # wait: the answer comes once the running stream has finished
            raw = open_stream(url, {**LONG, "max_tokens": 40})
            assert call(url, "POST", "/pause?mode=wait").value == {"status": "paused"}
            assert fe.debug_state()["table"] == 0  # its last output came before the answer
            assert last_finish(raw) == "length"
            assert call(url, "POST", "/resume").value == {"status": "resumed"}

            # sleep (no memory effect on CPU, but it pauses) and wake_up
            assert call(url, "POST", "/sleep?level=1").value == {"status": "sleeping", "level": 1}
            assert call(url, "GET", "/is_sleeping").value == {"is_sleeping": True}
            assert call(url, "POST", "/wake_up").value == {"status": "awake", "tags": None}
            assert call(url, "GET", "/is_sleeping").value == {"is_sleeping": False}
            assert call(url, "POST", "/reset_prefix_cache").value == {"success": True}
            checksums = call(url, "POST", "/weight_checker", {"action": "checksum"}).value
            assert checksums["checksums"] and all(
                k.startswith("dp0:pp0:pcp0:tp0:") for k in checksums["checksums"])

            real = answers(url)
            refused = real[5]
            assert refused[:2] == ("/release_kv_cache_memory", 500), refused
            assert refused[2]["error"]["message"] == (
                "Call to release_kv_cache_memory method failed: "
                "Selective discard is not supported on CPU."), refused
        finally:
            call(url, "POST", "/wake_up")
            call(url, "POST", "/resume")
        assert call(url, "GET", "/is_paused").value == {"is_paused": False}
        wait_for(lambda: fe.debug_state()["table"] == 0, 30)
    mock = ours_on_mock(tiny_model_dir, tmp_path, env=DEV_MODE,
                        engine_args=("--distributed-executor-backend", "uni"))
    try:
        assert answers(mock.url) == real
    finally:
        mock.stop()
