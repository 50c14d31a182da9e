"""Chaos runs (tools/chaos.py) in short form: an engine killed, a frontend
killed, an engine stopped, idle and silent clients. Each run starts its own
stack; the full runs' figures are in docs/reliability.md.

A fault test first makes sure that the fault hits running streams: 1000
tokens each with ``ignore_eos`` (tools/chaos.py's default for the fault runs),
and the run's ``streams_open_at_fault`` asserted, on any engine speed. Its
timing goals are figures of the full runs; here a timing only has to show
that the frontend, not a timeout, ended the streams: bounds that hold on a
loaded host."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from frontend.engine_ranks import DISCONNECT_GRACE_S
from harness.procs import REPO_ROOT
from tests.support.requirements import require_vllm
from tools.chaos import Stream

# Scheduling delays of a loaded 2-core host, on top of what the frontend waits.
LOADED_HOST_SLACK_S = 5.0


def chaos(run: str, model: Path, workdir: Path, *args: str, timeout: float = 300) -> dict:
    out = workdir / f"{run}.json"
    proc = subprocess.run(
        [sys.executable, "-m", "tools.chaos", run, "--model", str(model),
         "--logdir", str(workdir), "--json", str(out), *args],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=timeout)
    assert out.exists(), proc.stderr[-4000:]
    return json.loads(out.read_text())


def sse(*events: bytes) -> Stream:
    return Stream(body=bytearray(b"HTTP/1.1 200 OK\r\n\r\n" + b"".join(
        b"9\r\ndata: " + e + b"\n\n\r\n" for e in events)))


def test_stream_endings():
    chunk = b'{"choices":[]}'
    error = b'{"error":{"message":"x"}}'
    assert sse(chunk, error, b"[DONE]").ended_with_error_then_done()
    assert not sse(chunk, error, b"[DONE]").completed()
    assert sse(chunk, b"[DONE]").completed()
    assert not sse(chunk, b"[DONE]").ended_with_error_then_done()
    assert not sse(chunk, error).ended_with_error_then_done()
    assert not sse(chunk, error, b"[DONE]", b"[DONE]").ended_with_error_then_done()


@pytest.mark.real_engine
@pytest.mark.timeout(600)
def test_engine_killed_under_open_streams_then_restarted(tiny_model_dir, tmp_path):
    """SIGKILL of VLLM::EngineCore under 16 streams; a new engine on the same address."""
    require_vllm()
    s = chaos("engine-kill", tiny_model_dir, tmp_path, "--engine", "real", "--streams", "16",
              timeout=560)
    assert s["max_tokens"] == 1000 and s["streams_open_at_fault"] == 16, s
    assert s["streams_ended_with_error_and_done"] == 16, s["stream_problems"]
    # A dropped engine is dead after DISCONNECT_GRACE_S (the full run's goal: 1.5 s).
    assert s["kill_to_last_stream_end_s"] < DISCONNECT_GRACE_S + LOADED_HOST_SLACK_S, s
    assert s["health_after_kill"] == 503
    assert s["engine_exit_status"] == 1  # engine-core: systemd restarts it
    assert s["same_frontend_serving"] and s["engine_ready_to_first_200_s"] is not None
    assert s["idle_after"], s


def test_frontend_killed_under_load_aborts_the_orphans(tiny_model_dir, tmp_path):
    """A new frontend re-attaches and aborts what the killed one left running,
    including requests whose outputs the engine queued while no frontend ran
    (these used to run to their end: 7.6 s here, at 100 steps/s)."""
    s = chaos("frontend-kill", tiny_model_dir, tmp_path, "--engine", "mock", "--streams", "16")
    assert s["max_tokens"] == 1000 and s["streams_open_at_fault"] == 16, s
    assert s["engine_had_work_before_kill"] and s["streams_cut_by_the_kill"] == 16
    # The engine went idle because the new frontend aborted all 16 (1000 tokens
    # at the mock's 100 steps/s would have taken 10 s more).
    assert s["orphans_aborted_by_the_new_frontend"] == 16, s
    assert s["serving_to_engine_idle_s"] is not None and s["request_after_restart"] == 200, s


def test_engine_stalled_on_the_mock(tiny_model_dir, tmp_path):
    """SIGSTOP of the mock: with the frontend's stall detector, the streams end
    with an error and /health 503; without it, they hang and resume on SIGCONT."""
    s = chaos("engine-stall", tiny_model_dir, tmp_path, "--engine", "mock", "--streams", "8",
              "--stall-slack", str(LOADED_HOST_SLACK_S))
    assert_stall_detected(s, 8)


@pytest.mark.real_engine
@pytest.mark.timeout(600)
def test_engine_stalled_on_a_real_engine(tiny_model_dir, tmp_path):
    require_vllm()
    s = chaos("engine-stall", tiny_model_dir, tmp_path, "--engine", "real", "--streams", "8",
              "--stall-slack", str(LOADED_HOST_SLACK_S), timeout=560)
    assert_stall_detected(s, 8)


def assert_stall_detected(s: dict, streams: int) -> None:
    """The frontend's stall detector (--engine-stall-timeout 2) ended every open
    stream with an error, turned /health 503, and served again after SIGCONT."""
    assert s["max_tokens"] == 1000 and s["streams_open_at_fault"] == streams, s
    assert s["detector"] and s["streams_ended_with_error_and_done"] == streams, s
    assert s["stop_to_health_503_s"] is not None and s["stop_to_last_stream_end_s"] is not None
    assert s["request_after_cont"] == 200 and s["idle_after"], s
    assert s["passed"], s


def test_idle_connections_and_silent_clients(tiny_model_dir, tmp_path):
    """Short form: 300 idle keep-alive connections, 40 streams of which 4 never
    read. The TTFT ratio is a figure of the full run (noisy at this size)."""
    s = chaos("idle-connections", tiny_model_dir, tmp_path, "--idle", "300", "--streams", "40",
              "--repeats", "1")
    runs = s["runs"]["alone"] + s["runs"]["with_idle_and_silent"]
    assert all(r["completed"] == r["reading"] == 36 for r in runs), runs
    assert s["idle_still_open_after"] == 300 and s["idle_after"]
    rss = s["rss_mib"]
    assert rss["end_all_closed"] < 1.5 * rss["start"], rss
