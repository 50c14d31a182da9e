"""Instructions per request and per token of our frontend, counted by callgrind.

    .venv/bin/python -m tools.bench.instructions --load plain-mt1-c16 --requests 400
    .venv/bin/python -m tools.bench.instructions --load stream-c16 --requests 32

CPU seconds on a shared two-core machine move by 10-30 % from run to run,
which hides the few-percent cuts that per-request work is made of. This runs
our frontend under ``valgrind --tool=callgrind`` (all its threads, the zmq I/O
thread included), sends a fixed number of requests (``--load`` as the
benchmark names them, closed loop) and counts the user-space instructions
executed from the first to the last of them (``callgrind_control`` zeroes
and dumps the counters around that window). The count is the same from run
to run within a fraction of a percent; system calls count as one instruction
each, so their kernel time is not in it (the benchmark's CPU seconds are).

The mock engine steps every ``--step-time`` seconds (default 0.05: slow
enough for a frontend running ~50x slower under valgrind to take every step
on its own, as a frontend that keeps up with a GPU engine does). Compare two
versions of the code by running this with ``PYTHONPATH`` pointing at each.
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

from harness import procs
from harness.models import tiny_model_dir
from harness.ports import HOST
from tools.bench.loadgen import Client, run_point
from tools.bench.profile import parse_load
from tools.bench.prompts import make_prompts
from tools.bench.run import SERVED, Stack, warm_up

REPO = procs.REPO_ROOT


class ValgrindStack(Stack):
    """Our frontend under callgrind, not instrumented until the window opens
    (which also makes its start-up several times faster)."""

    def __init__(self, *a, out: Path, **kw) -> None:
        super().__init__(*a, **kw)
        self.out = out

    def _frontend_argv(self) -> tuple[list[str], dict[str, str]]:
        argv, env = super()._frontend_argv()
        return (["valgrind", "--tool=callgrind", "--instr-atstart=no",
                 f"--callgrind-out-file={self.out}", "--dump-line=no", *argv], env)


def control(pid: int, *args: str) -> None:
    subprocess.run(["callgrind_control", *args, str(pid)], check=True,
                   capture_output=True, timeout=120)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--load", default="plain-mt1-c16",
                   help="[chat-]stream-cC or plain[-mtK]-cC (default plain-mt1-c16)")
    p.add_argument("--requests", type=int, default=400, help="requests in the window")
    p.add_argument("--step-time", type=float, default=0.05)
    p.add_argument("--model", type=Path, default=None,
                   help="model directory (default: the tiny test model, built if missing)")
    p.add_argument("--frontend-cpu", type=int, default=0)
    p.add_argument("--other-cpu", type=int, default=1)
    p.add_argument("--ours-arg", action="append", default=[])
    args = p.parse_args(argv)
    args.model = args.model or tiny_model_dir()
    if not shutil.which("valgrind") or not shutil.which("callgrind_control"):
        print("valgrind (with callgrind_control) is needed", file=sys.stderr)
        return 2
    w = parse_load(args.load)
    logdir = Path(f"/tmp/bench-instructions-{time.strftime('%Y%m%d-%H%M%S')}")
    logdir.mkdir(parents=True)
    out = logdir / "callgrind.out"
    ns = argparse.Namespace(model=args.model, max_num_seqs=512, mock_step_time=args.step_time,
                            frontend_cpu=args.frontend_cpu, other_cpu=args.other_cpu,
                            vllm_arg=[], ours_arg=args.ours_arg, start_timeout=600.0, nice=0)
    stack = ValgrindStack("ours", "mock", ns, logdir, "instructions", out=out)
    prompts = make_prompts(args.model, count=512)
    import uvloop
    try:
        stack.start()
        client = Client(HOST, stack.port, prompts, model=SERVED)
        client.timeout = 600.0
        warm_up(client, "ours")
        pid = stack.frontend.pid
        # taskset execs valgrind: the pid is valgrind's (the frontend's) own.
        control(pid, "--instr=on")
        control(pid, "--zero")
        t0 = time.monotonic()
        r = uvloop.run(run_point(client, w, duration=1e9, max_requests=args.requests,
                                 stagger=False))
        elapsed = time.monotonic() - t0
        control(pid, "--dump=window")
        control(pid, "--instr=off")
    finally:
        stack.stop()
    ir = 0
    for f in logdir.glob("callgrind.out*"):
        text = f.read_text(errors="replace")
        if re.search(r"^desc: Trigger: .*window", text, re.M):
            m = re.search(r"^(?:summary|totals): (\d+)", text, re.M)
            ir += int(m.group(1)) if m else 0
    requests = r.requests_sent
    tokens = requests * w.max_tokens * w.choices
    print(f"{args.load}: {requests} requests ({r.errors} errors), {tokens} output tokens, "
          f"{elapsed:.0f} s under callgrind")
    print(f"  {ir / requests / 1e3:,.1f} k instructions per request, "
          f"{ir / tokens / 1e3:,.2f} k per output token (all threads)")
    return 0 if r.errors == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
