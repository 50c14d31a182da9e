"""How fast the mock engine steps, with no frontend in the way.

Usage::

    .venv/bin/python -m tools.bench.mock_steps [--concurrency 1 64 1024] [--seconds 5]

For each concurrency N it starts ``python -m engine_core.mock --max-num-seqs N``
(step time 0), binds the handshake ROUTER / input ROUTER / output PULL itself,
keeps N greedy requests with a huge ``max_tokens`` and no EOS (ignore_eos) in
flight, and measures for ``--seconds``:

* steps/s and tokens/s: engine steps (the mock's own counter) and output tokens
  received, per second of wall time;
* mock CPU: the share of one core the mock got; on a busy host it is starved,
  and then the per-CPU-second figures are the mock's real capacity;
* steps and tokens per mock CPU second: what the mock can produce per core.

The mock must out-run any frontend, so these are the ceilings a frontend
benchmark against it can reach.
"""

from __future__ import annotations

import argparse
import itertools
import os
import tempfile
import time
from pathlib import Path

from engine_core.mock_control import MockControl
from harness.engine_harness import EngineHarness, make_request, spawn_mock
from protocol.wire import decode_outputs

MAX_MODEL_LEN = 1 << 20  # requests never reach it within a run


def bench(concurrency: int, seconds: float, prompt_len: int, mock_args: list[str]) -> dict:
    harness = EngineHarness()
    with tempfile.NamedTemporaryFile(suffix=".log") as log:
        proc, control = spawn_mock(harness.handshake_addr, Path(log.name),
                                   "--max-num-seqs", str(concurrency),
                                   "--max-model-len", str(MAX_MODEL_LEN), *mock_args)
        try:
            harness.handshake()
            return _drive(harness, proc.pid, control, concurrency, seconds, prompt_len)
        finally:
            proc.kill()
            proc.wait()
            harness.close()


def _cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process (Linux /proc)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _drive(harness: EngineHarness, pid: int, control: MockControl, concurrency: int,
           seconds: float, prompt_len: int) -> dict:
    ids = itertools.count()

    def submit() -> None:
        i = next(ids)
        prompt = [10 + (i * 7 + j) % 1000 for j in range(prompt_len)]
        harness.add(make_request(f"r{i}", prompt, max_tokens=MAX_MODEL_LEN - prompt_len - 1))

    def receive() -> int:
        frames = harness.recv_frames(5.0)
        if frames is None:
            raise TimeoutError("the mock stopped producing output")
        outs = decode_outputs(frames)
        for out in outs.outputs:
            if out.finish_reason is not None:
                submit()
        return sum(len(out.new_token_ids) for out in outs.outputs)

    for _ in range(concurrency):
        submit()
    warmup_end = time.monotonic() + 0.5
    while time.monotonic() < warmup_end:
        receive()
    steps0, cpu0, start = control.stats()["steps"], _cpu_seconds(pid), time.monotonic()
    tokens = 0
    while time.monotonic() < start + seconds:
        tokens += receive()
    steps = control.stats()["steps"] - steps0
    cpu, elapsed = _cpu_seconds(pid) - cpu0, time.monotonic() - start
    return {"concurrency": concurrency, "steps_per_s": steps / elapsed,
            "tokens_per_s": tokens / elapsed, "mock_cpu": cpu / elapsed,
            "steps_per_cpu_s": steps / cpu, "tokens_per_cpu_s": steps * concurrency / cpu}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--concurrency", type=int, nargs="+", default=[1, 64, 1024])
    p.add_argument("--seconds", type=float, default=5.0)
    p.add_argument("--prompt-len", type=int, default=32)
    p.add_argument("mock_args", nargs="*", help="extra mock args, after --")
    args = p.parse_args()
    print(f"{'concurrency':>11} {'steps/s':>9} {'tokens/s':>9} {'mock CPU':>9} "
          f"{'steps/CPU-s':>12} {'tokens/CPU-s':>13}")
    for n in args.concurrency:
        r = bench(n, args.seconds, args.prompt_len, args.mock_args)
        print(f"{n:>11} {r['steps_per_s']:>9.0f} {r['tokens_per_s']:>9.0f} "
              f"{r['mock_cpu']:>8.0%} {r['steps_per_cpu_s']:>12.0f} "
              f"{r['tokens_per_cpu_s']:>13.0f}")


if __name__ == "__main__":
    main()
