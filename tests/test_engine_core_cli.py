"""``engine-core``'s own logic: arguments, CPU defaults, signals, exit status.

All of it without vLLM (a stand-in for ``vllm serve``). A real engine core
SIGKILLed under open streams (exit 1, so that systemd restarts it) is
tests/test_chaos.py's engine-kill run.
"""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from engine_core import cli, launcher
from harness.waits import wait_for
from tests.support.requirements import require_linux

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


@pytest.mark.parametrize("dp_args", [["--data-parallel-size", "2"], ["-dp=2"]])
def test_data_parallel_ranks_on_cpu_are_not_pinned_together(dp_args):
    _, env = launcher.build_command("/m", "h", 1, dp_args, on_cpu=True, env={})
    assert env["VLLM_CPU_OMP_THREADS_BIND"] == "nobind"
    _, env = launcher.build_command("/m", "h", 1, dp_args, on_cpu=True,
                                    env={"VLLM_CPU_OMP_THREADS_BIND": "0|1"})
    assert "VLLM_CPU_OMP_THREADS_BIND" not in env  # the user's choice stays
    _, env = launcher.build_command("/m", "h", 1, [], on_cpu=True, env={})
    assert "VLLM_CPU_OMP_THREADS_BIND" not in env


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


# ------------------------------------------------------------------ exit status

DIED = "engine-core: the engine core process died"


@pytest.mark.parametrize("returncode, stop_requested, status", [
    (0, True, 0),                   # systemctl stop
    (-signal.SIGTERM, True, 0),     # the signal came before vLLM's handler
    (-signal.SIGINT, True, 0),
    (3, True, 3),                   # vLLM's own failure while stopping
    (-signal.SIGKILL, True, 137),   # a second signal kills the group
    (0, False, 1),                  # vllm serve --headless after its engine core died
    (1, False, 1),                  # vLLM failed (e.g. while loading the model)
    (-signal.SIGKILL, False, 137),  # vllm serve itself killed (OOM)
])
def test_exit_status(returncode, stop_requested, status):
    got, why = launcher.exit_status(returncode, stop_requested)
    assert got == status
    assert (why is None) == stop_requested  # an unasked-for end always says why
    if why:
        assert f"exiting {status} so that systemd restarts the engine" in why


# ------------------------------------------------------------------ signals
# launcher.supervise() on a stand-in for `vllm serve --headless`: a child with
# a grandchild that ignores SIGTERM, like a wedged EngineCore. Like vllm serve,
# the child exits 0 once the grandchild has died; on SIGTERM it does what the
# test says. The test signals the launcher only.

_RUN = ("import os, sys; from engine_core.launcher import supervise; "
        "sys.exit(supervise([sys.executable, '-c', sys.argv[1]], os.environ))")
_STAND_IN = """
import signal, subprocess, sys, time
grandchild = subprocess.Popen(
    [sys.executable, "-c", "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
     "print(flush=True); time.sleep(60)"], stdout=subprocess.PIPE)
grandchild.stdout.readline()
signal.signal(signal.SIGTERM, {handler})
print(grandchild.pid, flush=True)
grandchild.wait()
"""


def _running(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return False
    return state != "Z"


def _start_launcher(handler: str) -> tuple[subprocess.Popen, int]:
    require_linux("the launcher's tests read /proc")
    launcher_proc = subprocess.Popen(
        [sys.executable, "-S", "-c", _RUN, _STAND_IN.format(handler=handler)],
        cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    grandchild = int(launcher_proc.stdout.readline())
    return launcher_proc, grandchild


def test_sigterm_is_forwarded_and_leftovers_are_killed():
    proc, grandchild = _start_launcher("lambda *_: sys.exit(3)")
    try:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(10) == 3
        wait_for(lambda: not _running(grandchild), 30, message="the grandchild is left")
    finally:
        proc.kill()


def test_second_signal_kills_the_group():
    # The child survives SIGTERM, and says when it got it.
    proc, grandchild = _start_launcher('lambda *_: print("SIGTERM", flush=True)')
    try:
        proc.send_signal(signal.SIGTERM)
        ready, _, _ = select.select([proc.stdout], [], [], 10)
        assert ready and proc.stdout.readline() == "SIGTERM\n", "SIGTERM was not forwarded"
        assert proc.poll() is None
        proc.send_signal(signal.SIGINT)
        assert proc.wait(10) == 128 + signal.SIGKILL
        wait_for(lambda: not _running(grandchild), 30, message="the grandchild is left")
    finally:
        proc.kill()


@pytest.mark.parametrize("handler", ["lambda *_: sys.exit(0)", "signal.SIG_DFL"])
def test_requested_stop_exits_0(handler):
    """SIGTERM: vLLM stops with 0 (or, before it set its handler, dies of the signal)."""
    proc, grandchild = _start_launcher(handler)
    try:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(10) == 0
        assert DIED not in proc.stderr.read()
        wait_for(lambda: not _running(grandchild), 30, message="the grandchild is left")
    finally:
        proc.kill()


def test_dead_engine_core_exits_1():
    """The grandchild (EngineCore) is killed: the child exits 0, engine-core 1."""
    proc, grandchild = _start_launcher("lambda *_: sys.exit(0)")
    try:
        os.kill(grandchild, signal.SIGKILL)
        assert proc.wait(10) == 1
        err = proc.stderr.read()
        assert "engine-core: vLLM exited with status 0\n" in err
        assert f"{DIED} (vllm serve --headless exits 0 " in err
        assert "exiting 1 so that systemd restarts the engine" in err
    finally:
        proc.kill()
