"""``engine-core``'s own logic, without vLLM: arguments, CPU defaults, signals."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from engine_core import cli, launcher
from tests.support.waits import wait_for

REPO_ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("addr, expected", [
    ("tcp://127.0.0.1:5555", ("127.0.0.1", 5555)),
    ("tcp://engine-host:1", ("engine-host", 1)),
    ("tcp://[::1]:5555", ("::1", 5555)),
])
def test_parse_frontend_addr(addr, expected):
    assert launcher.parse_frontend_addr(addr) == expected


@pytest.mark.parametrize("addr", [
    "ipc:///tmp/engine", "tcp://127.0.0.1", "tcp://:5555", "tcp://h:99999",
    "tcp://h:port", "tcp://h:5555/x", "127.0.0.1:5555",
])
def test_parse_frontend_addr_rejects(addr):
    with pytest.raises(ValueError, match="tcp://HOST:PORT"):
        launcher.parse_frontend_addr(addr)


def test_command_on_cpu_adds_defaults(tmp_path):
    model = str(tmp_path)
    command, env = launcher.build_command(model, "127.0.0.1", 7000, ["--dtype", "float32"],
                                          on_cpu=True, env={"OMP_NUM_THREADS": "4"})
    assert command[1:] == [
        "-m", "vllm.entrypoints.cli.main", "serve", model, "--headless",
        "--data-parallel-address", "127.0.0.1", "--data-parallel-rpc-port", "7000",
        "--distributed-executor-backend", "uni", "--enforce-eager",
        "--kv-cache-memory-bytes", "128M", "--dtype", "float32"]
    expected_env = {**launcher.CPU_ENV, **launcher.OFFLINE_ENV}
    del expected_env["OMP_NUM_THREADS"]  # the user's value stays
    assert env == expected_env


def test_hub_model_name_stays_online():
    _, env = launcher.build_command("org/model", "h", 1, [], on_cpu=True, env={})
    assert env == launcher.CPU_ENV


@pytest.mark.parametrize("user_args, env, absent", [
    (["--no-enforce-eager"], {}, "--enforce-eager"),
    (["--distributed_executor_backend=mp"], {}, "uni"),
    (["--kv-cache-memory-bytes=1G"], {}, "128M"),
    (["--gpu-memory-utilization", "0.5"], {}, "128M"),
    ([], {"VLLM_CPU_KVCACHE_SPACE": "1"}, "128M"),
])
def test_command_keeps_user_choices(user_args, env, absent):
    command, _ = launcher.build_command("/m", "h", 1, user_args, on_cpu=True, env=env)
    ours = command[:len(command) - len(user_args)]
    assert absent not in ours
    assert command[len(ours):] == user_args


def test_command_off_cpu_is_plain_vllm_serve():
    command, env = launcher.build_command("/m", "h", 1, ["--x"], on_cpu=False, env={})
    assert command[3:] == ["serve", "/m", "--headless", "--data-parallel-address", "h",
                           "--data-parallel-rpc-port", "1", "--x"]
    assert env == {}


@pytest.mark.parametrize("flag", ["--headless", "--data-parallel-rpc-port=1", "-dpa"])
def test_cli_rejects_flags_it_sets(flag, capsys):
    with pytest.raises(SystemExit) as exc:
        cli.main(["--model", "m", "--frontend-addr", "tcp://h:1", flag])
    assert exc.value.code == 2
    assert "engine-core sets this from --frontend-addr" in capsys.readouterr().err


def test_cli_mock_dispatch(monkeypatch):
    from engine_core import mock

    seen = []
    monkeypatch.setattr(mock, "main", lambda argv: seen.append(argv) or 7)
    assert cli.main(["--frontend-addr", "tcp://h:1", "--mock", "--step-time", "0"]) == 7
    assert seen == [["--frontend-addr", "tcp://h:1", "--step-time", "0"]]


def test_help_runs_without_vllm():
    out = subprocess.run([sys.executable, "-S", "-m", "engine_core.cli", "--help"],
                         cwd=REPO_ROOT, capture_output=True, text=True, timeout=30)
    assert out.returncode == 0 and "--frontend-addr" in out.stdout


# ------------------------------------------------------------------ signals
# launcher.run() on a stand-in for `vllm serve`: a child that exits 3 on
# SIGTERM (or ignores it) and has a grandchild that ignores SIGTERM, like a
# wedged EngineCore. The test signals the launcher only.

_RUN = ("import os, sys; from engine_core.launcher import run; "
        "sys.exit(run([sys.executable, '-c', sys.argv[1]], os.environ))")
_STAND_IN = """
import signal, subprocess, sys, time
grandchild = subprocess.Popen(
    [sys.executable, "-c", "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
     "print(flush=True); time.sleep(60)"], stdout=subprocess.PIPE)
grandchild.stdout.readline()
signal.signal(signal.SIGTERM, {handler})
print(grandchild.pid, flush=True)
time.sleep(60)
"""


def _running(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return False
    return state != "Z"


def _start_launcher(handler: str) -> tuple[subprocess.Popen, int]:
    launcher_proc = subprocess.Popen(
        [sys.executable, "-S", "-c", _RUN, _STAND_IN.format(handler=handler)],
        cwd=REPO_ROOT, stdout=subprocess.PIPE, text=True)
    grandchild = int(launcher_proc.stdout.readline())
    return launcher_proc, grandchild


@pytest.mark.skipif(sys.platform != "linux", reason="reads /proc")
def test_sigterm_is_forwarded_and_leftovers_are_killed():
    proc, grandchild = _start_launcher("lambda *_: sys.exit(3)")
    try:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(10) == 3
        wait_for(lambda: not _running(grandchild), 5, message="the grandchild is left")
    finally:
        proc.kill()


@pytest.mark.skipif(sys.platform != "linux", reason="reads /proc")
def test_second_signal_kills_the_group():
    proc, grandchild = _start_launcher("signal.SIG_IGN")
    try:
        proc.send_signal(signal.SIGTERM)
        time.sleep(0.3)
        assert proc.poll() is None
        proc.send_signal(signal.SIGINT)
        assert proc.wait(10) == 128 + signal.SIGKILL
        wait_for(lambda: not _running(grandchild), 5, message="the grandchild is left")
    finally:
        proc.kill()
