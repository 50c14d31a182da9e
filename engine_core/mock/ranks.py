"""Several data-parallel ranks from one launcher (``--data-parallel-size-local L > 1``).

Like ``vllm serve --headless -dp N -dpl L``: ranks K..K+L-1 each run as their
own process (``python -m engine_core.mock`` for that one rank), so a test can
kill, stop or continue one rank alone. As vLLM's CoreEngineProcManager does, the
launcher stops every rank (SIGTERM, SIGKILL after 5 s) as soon as one exits or
when it gets SIGTERM/SIGINT itself, and ranks die with the launcher. To restart
a single rank, run one launcher per rank (``-dpl 1 -dpr k``), vLLM's
one-launcher-per-rank layout.

With ``--control-addr tcp://HOST:PORT``, rank K+i binds its control socket at
``tcp://HOST:PORT+i``.
"""

from __future__ import annotations

import argparse
import ctypes
import logging
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from urllib.parse import urlsplit

logger = logging.getLogger("engine_core.mock")

PR_SET_PDEATHSIG = 1
STOP_GRACE_S = 5.0  # vLLM's process manager waits as long before SIGKILL


def control_addr(addr: str, offset: int) -> str:
    """The control address of the rank ``offset`` places after the start rank."""
    url = urlsplit(addr)
    if url.scheme != "tcp" or not url.port:
        raise ValueError(
            "with --data-parallel-size-local > 1, --control-addr must be "
            "tcp://HOST:PORT (each rank adds its offset to PORT)"
        )
    return f"tcp://{url.netloc.rsplit(':', 1)[0]}:{url.port + offset}"


def rank_command(argv: Sequence[str], args: argparse.Namespace, rank: int) -> list[str]:
    """The mock's own command line for one rank (later flags win in argparse)."""
    command = [
        sys.executable,
        "-m",
        "engine_core.mock",
        *argv,
        "--data-parallel-start-rank",
        str(rank),
        "--data-parallel-size-local",
        "1",
    ]
    if args.control_addr:
        offset = rank - args.data_parallel_start_rank
        command += ["--control-addr", control_addr(args.control_addr, offset)]
    return command


def run_ranks(argv: Sequence[str], args: argparse.Namespace) -> int:
    """Run the local ranks until one exits or a signal comes; 1 if a rank failed."""
    signals: list[int] = []
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda signum, _frame: signals.append(signum))
    first = args.data_parallel_start_rank
    ranks = range(first, first + args.data_parallel_size_local)
    procs = {
        rank: subprocess.Popen(
            rank_command(argv, args, rank),
            preexec_fn=_term_with_parent if sys.platform == "linux" else None,
        )
        for rank in ranks
    }
    logger.info(
        "mock launcher: data parallel ranks %s of %d, pids %s",
        list(ranks),
        args.data_parallel_size,
        [p.pid for p in procs.values()],
    )
    failed = False
    try:
        while not signals:
            if exited := {r: p.returncode for r, p in procs.items() if p.poll() is not None}:
                logger.info("mock launcher: rank(s) exited %s; stopping the others", exited)
                failed = any(code != 0 for code in exited.values())
                break
            time.sleep(0.1)
    finally:
        _stop(list(procs.values()))
    return 1 if failed else 0


def _stop(procs: list[subprocess.Popen]) -> None:
    for proc in procs:
        if proc.poll() is None:
            proc.terminate()
    deadline = time.monotonic() + STOP_GRACE_S
    for proc in procs:
        try:
            proc.wait(max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _term_with_parent() -> None:
    """In a rank, before exec: SIGTERM it when the launcher dies, even by SIGKILL."""
    ctypes.CDLL(None).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
