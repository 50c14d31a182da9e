"""Chaos runs (tools/chaos.py) in short form: an engine killed, a frontend
killed, an engine stopped, idle and silent clients. Each run starts its own
stack; the full runs' figures are in docs/reliability.md."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.real_engine import REPO_ROOT, require_vllm
from tools.chaos import STALL_FLAG, Stream
from tools.stack import frontend_has_flag


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
    assert s["streams_ended_with_error_and_done"] == 16, s["stream_problems"]
    assert s["kill_to_last_stream_end_s"] < 1.5
    assert s["health_after_kill"] == 503
    assert s["engine_exit_status"] == 1  # engine-core: systemd restarts it
    assert s["same_frontend_serving"] and s["engine_ready_to_first_200_s"] is not None
    assert s["passed"], s


def test_frontend_killed_under_load_aborts_the_orphans(tiny_model_dir, tmp_path):
    """A new frontend re-attaches and aborts what the killed one left running,
    including requests whose outputs the engine queued while no frontend ran
    (these used to run to their end: 7.6 s here, at 100 steps/s)."""
    s = chaos("frontend-kill", tiny_model_dir, tmp_path, "--engine", "mock", "--streams", "16")
    assert s["engine_had_work_before_kill"] and s["streams_cut_by_the_kill"] == 16
    assert s["serving_to_engine_idle_s"] < 1.0, s
    assert s["passed"], s


def test_engine_stalled_on_the_mock(tiny_model_dir, tmp_path):
    """SIGSTOP of the mock: with the frontend's stall detector, the streams end
    with an error and /health 503; without it, they hang and resume on SIGCONT."""
    s = chaos("engine-stall", tiny_model_dir, tmp_path, "--engine", "mock", "--streams", "8",
              "--hang-seconds", "2")
    assert s["detector"] == frontend_has_flag(STALL_FLAG)
    assert s["request_after_cont"] == 200 and s["idle_after"]
    assert s["passed"], s


@pytest.mark.real_engine
@pytest.mark.timeout(600)
@pytest.mark.skipif(not frontend_has_flag(STALL_FLAG),
                    reason=f"the frontend has no {STALL_FLAG} yet")
def test_engine_stalled_on_a_real_engine(tiny_model_dir, tmp_path):
    require_vllm()
    s = chaos("engine-stall", tiny_model_dir, tmp_path, "--engine", "real", "--streams", "8",
              timeout=560)
    assert s["detector"] and s["streams_ended_with_error_and_done"] == 8, s
    assert s["stop_to_health_503_s"] is not None and s["request_after_cont"] == 200
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
