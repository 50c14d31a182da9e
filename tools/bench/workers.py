"""``--api-server-count``: how requests spread, what a second process costs, and scaling.

Usage::

    .venv/bin/python -m tools.bench.workers [--requests 1000] [--concurrency 64]
        [--seconds 15] [--repeats 3] [--out docs/workers.json]

Against the mock engine (``engine-core --mock``) for each N in ``--counts``
(default 1 and 2), fresh stacks each repeat:

* **split**: ``--requests`` streaming completions from ``--concurrency``
  clients (keep-alive connections, one per client); how many ADDs each worker
  sent (the mock counts them by ``client_index``);
* **cost**: engine-paced (``--step-time`` 2 ms, a GPU-like step), the frontend's
  CPU seconds (supervisor and workers) per 1,000 output tokens, N=2 against N=1;
* **scaling**: frontend-bound (step time 0), output tokens/s for each N.

On a 2-core machine the workers, the mock engine and this load generator
share the two cores: the scaling figure then says what the machine allows,
not what N workers can do on N free cores (the report says how busy the cores
were).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
from pathlib import Path

from engine_core.mock_control import MockControl
from harness import procs
from harness.engines import mock_engine_command
from harness.frontend import SERVED_NAME, frontend_command
from harness.models import tiny_model_dir
from harness.ports import HOST, free_port, free_port_triple
from harness.waits import wait_healthy
from tools.bench.loadgen import Client, Workload, run_point
from tools.bench.prompts import make_prompts


class Stack:
    def __init__(self, model: Path, logdir: Path, workers: int, step_time: float) -> None:
        port = free_port_triple()  # (P+3, P+4 for a second worker: checked below)
        self.addr = f"tcp://{HOST}:{port}"
        self.http = free_port()
        self.control = f"tcp://{HOST}:{free_port()}"
        tag = f"n{workers}-{time.monotonic_ns()}"
        self.frontend = procs.Proc("frontend", frontend_command(
            self.addr, model, self.http, "--api-server-count", str(workers)),
            None, logdir / f"frontend-{tag}.log")
        self.engine = procs.Proc("mock", mock_engine_command(
            self.addr, model, "--step-time", str(step_time), "--max-num-seqs", "1024",
            control_addr=self.control),
            None, logdir / f"mock-{tag}.log")
        self.workers = workers

    def wait_ready(self) -> None:
        wait_healthy(f"http://{HOST}:{self.http}", [self.frontend, self.engine], 120, poll=0.1)
        if self.workers > 1:
            deadline = time.monotonic() + 120
            while "frontend workers" not in self.frontend.log_path.read_text(errors="replace"):
                if time.monotonic() > deadline:
                    raise TimeoutError(self.frontend.log_tail())
                time.sleep(0.1)

    def adds_by_client(self) -> dict[int, int]:
        return MockControl(self.control).stats()["adds_by_client"]

    def stop(self) -> None:
        self.frontend.stop()
        self.engine.stop()


def measure(stack: Stack, prompts: list[str], workload: Workload, seconds: float,
            max_requests: int) -> dict:
    client = Client(HOST, stack.http, prompts, model=SERVED_NAME)
    marks: dict[str, float] = {}

    def start() -> None:
        marks["cpu0"] = procs.cpu_seconds(stack.frontend.pids())
        marks["cores0"] = procs.core_times()

    def end() -> None:
        marks["cpu1"] = procs.cpu_seconds(stack.frontend.pids())
        marks["cores1"] = procs.core_times()
    before = stack.adds_by_client()
    result = asyncio.run(run_point(client, workload, seconds, max_requests=max_requests,
                                   on_window_start=start, on_window_end=end))
    after = stack.adds_by_client()
    cpu = marks["cpu1"] - marks["cpu0"]
    busy = {c: round((marks["cores1"][c][0] - marks["cores0"][c][0])
                     / max(marks["cores1"][c][1] - marks["cores0"][c][1], 1e-9), 2)
            for c in marks["cores1"]}
    return {"tok_s": result.tok_s, "req_s": result.req_s, "errors": result.errors,
            "tokens": result.tokens,
            "cpu_s_per_1k_tokens": 1000 * cpu / result.tokens if result.tokens else None,
            "split": {c: after.get(c, 0) - before.get(c, 0) for c in after},
            "core_busy": busy, "ttft_p99_ms": result.ttft_ms.get("p99")}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--counts", default="1,2")
    p.add_argument("--requests", type=int, default=1000)
    p.add_argument("--concurrency", type=int, default=64)
    p.add_argument("--seconds", type=float, default=15.0)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--out", type=Path, default=None)
    args = p.parse_args()
    model = tiny_model_dir()
    prompts = make_prompts(model, count=256, tokens=32)
    logdir = procs.REPO_ROOT / "build" / "bench-workers-logs"
    logdir.mkdir(parents=True, exist_ok=True)
    counts = [int(c) for c in args.counts.split(",")]
    runs: dict[str, list] = {}
    points = {
        "split": (0.0, Workload("split", args.concurrency, max_tokens=32), args.requests),
        "cost": (0.002, Workload("cost", args.concurrency, max_tokens=128), 100000),
        "scaling": (0.0, Workload("scaling", 256, max_tokens=128), 100000),
    }
    for repeat in range(args.repeats):
        for name, (step_time, workload, max_requests) in points.items():
            for n in counts:
                stack = Stack(model, logdir, n, step_time)
                try:
                    stack.wait_ready()
                    figures = measure(stack, prompts, workload, args.seconds, max_requests)
                finally:
                    stack.stop()
                figures["loadavg"] = procs.loadavg()
                runs.setdefault(f"{name}-n{n}", []).append(figures)
                print(f"repeat {repeat} {name} N={n}: {figures}", file=sys.stderr)
    summary = {}
    for key, items in runs.items():
        summary[key] = {
            "tok_s_median": statistics.median(r["tok_s"] for r in items),
            "tok_s_range": [min(r["tok_s"] for r in items), max(r["tok_s"] for r in items)],
            "cpu_s_per_1k_median": statistics.median(
                r["cpu_s_per_1k_tokens"] for r in items if r["cpu_s_per_1k_tokens"]),
            "splits": [r["split"] for r in items]}
    if "cost-n1" in summary and "cost-n2" in summary:
        summary["cost_n2_over_n1"] = (summary["cost-n2"]["cpu_s_per_1k_median"]
                                      / summary["cost-n1"]["cpu_s_per_1k_median"])
    report = {"args": {k: str(v) for k, v in vars(args).items()}, "summary": summary,
              "runs": runs}
    text = json.dumps(report, indent=1)
    if args.out:
        args.out.write_text(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
