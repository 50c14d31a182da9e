"""Embeddings side by side: this frontend vs vLLM 0.32's API server, on the mock.

    .venv/bin/python -m tools.bench.pooling [--quick] [--repeats N] [--batches 1 32]

For each repeat and frontend (the order alternating), a fresh stack: the mock
engine as an embedding model (``engine-core --mock --runner pooling --convert
embed --step-time 0``: it pools as fast as it can, so the frontend is the
bottleneck) on the tiny embedder (``tools/make_tiny_pooling_models.py``, 64
dimensions), and our frontend or ``vllm serve ... --runner pooling --convert
embed`` in front of it, pinned to one core (engine and load generator on the
other, as ``tools/bench/run.py`` does). Each point is a closed loop of
``--concurrency`` clients (default 64) sending ``POST /v1/embeddings`` with
``input`` a list of N texts of 32 tokens (N = 1 and 32), floats back.

Per point: requests/s and inputs/s, latency p50/p99, and the frontend's CPU
per request (utime+stime of its process tree over the window). Medians over
the repeats go into ``docs/benchmarks-pooling.json``, a figure
(``docs/benchmarks-pooling.png``) and the "Pooling: embeddings" section of
``docs/benchmarks.md`` (replaced in place; the rest of the page is kept).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path
from typing import Any

from harness import procs
from harness.ports import HOST
from tools.bench.loadgen import Client, Workload
from tools.bench.page import write_section
from tools.bench.prompts import make_prompts
from tools.bench.run import Stack, add_stack_arguments, log, machine_info, measure

REPO = procs.REPO_ROOT
POOLING_FLAGS = ["--runner", "pooling", "--convert", "embed"]
SECTION = "## Pooling: embeddings"
FRONTENDS = ("ours", "vllm")
LABEL = {"ours": "ours", "vllm": "vLLM"}


class EmbeddingStack(Stack):
    """A benchmark stack whose engine and vLLM's server run the embedding model."""

    def _engine_argv(self) -> list[str]:
        return [*super()._engine_argv(), *POOLING_FLAGS]

    def _frontend_argv(self) -> tuple[list[str], dict[str, str]]:
        argv, env = super()._frontend_argv()
        return (argv if self.frontend_kind == "ours" else [*argv, *POOLING_FLAGS]), env


class EmbeddingsClient(Client):
    """``POST /v1/embeddings`` with ``prompts_per_request`` texts as ``input``."""

    def build(self, w: Workload, max_tokens: int) -> bytes:
        k = w.prompts_per_request
        picks = [self.prompts[self._rng.randrange(len(self.prompts))] for _ in range(k)]
        body = {"model": self.model, "input": picks[0] if k == 1 else picks}
        data = json.dumps(body, separators=(",", ":")).encode()
        return (f"POST /v1/embeddings HTTP/1.1\r\nHost: {self.host}:{self.port}\r\n"
                f"Content-Type: application/json\r\nAccept: */*\r\n"
                f"Content-Length: {len(data)}\r\n\r\n").encode() + data


def points(args: argparse.Namespace) -> list[Workload]:
    # max_tokens 0: an embeddings answer has no completion tokens to check.
    return [Workload(f"embed-b{b}-c{args.concurrency}", args.concurrency, stream=False,
                     prompts_per_request=b, max_tokens=0) for b in args.batches]


def warm_up(client: Client, workloads: list[Workload]) -> None:
    for w in workloads:
        r = measure(client, Workload("warm-up", 4, stream=False,
                                     prompts_per_request=w.prompts_per_request, max_tokens=0),
                    1.0, 200, None)
        if r["errors"]:
            raise RuntimeError(f"warm-up failed: {r['error_samples'][:1]}")


def run(args: argparse.Namespace) -> dict[str, Any]:
    prompts = make_prompts(args.model, count=256, tokens=args.prompt_tokens)
    logdir = args.logdir or Path(f"/tmp/bench-pooling-{time.strftime('%Y%m%d-%H%M%S')}")
    logdir.mkdir(parents=True, exist_ok=True)
    results: dict[str, Any] = {"command": " ".join(["python -m tools.bench.pooling",
                                                     *args.argv]),
                               "machine": machine_info(), "points": [], "startup": []}
    workloads = points(args)
    for rep in range(args.repeats):
        order = FRONTENDS if rep % 2 == 0 else FRONTENDS[::-1]
        for kind in order:
            stack = EmbeddingStack(kind, "mock", args, logdir, f"{kind}-r{rep}")
            try:
                info = stack.start()
                info.update(frontend=kind, repeat=rep)
                results["startup"].append(info)
                client = EmbeddingsClient(HOST, stack.port, prompts)
                warm_up(client, workloads)
                stack.refresh_pids()
                for w in workloads:
                    r = measure(client, w, args.duration, args.max_requests, stack)
                    r.update(point=w.name, frontend=kind, repeat=rep,
                             inputs_s=r["req_s"] * w.prompts_per_request)
                    results["points"].append(r)
                    log(f"  {kind:5} {w.name:16} {r['req_s']:8.1f} req/s "
                        f"{r['inputs_s']:9.1f} inputs/s  p50 {r['latency_ms'].get('p50', 0):6.1f}"
                        f" ms  p99 {r['latency_ms'].get('p99', 0):6.1f} ms  frontend CPU "
                        f"{r['frontend_cpu_ms_per_req']:.3f} ms/req "
                        f"({r['frontend_cpu_share']:.0%} of a core), errors {r['errors']}")
            finally:
                stack.stop()
    return results


# ------------------------------------------------------------------ report

def summary(results: dict[str, Any]) -> dict[str, dict[str, dict[str, float]]]:
    """point -> frontend -> medians over the repeats."""
    out: dict[str, dict[str, dict[str, float]]] = {}
    keys = ("req_s", "inputs_s", "frontend_cpu_ms_per_req", "frontend_cpu_share")
    for p in results["points"]:
        out.setdefault(p["point"], {}).setdefault(p["frontend"], {k: [] for k in
                                                                 (*keys, "p50", "p99")})
        row = out[p["point"]][p["frontend"]]
        for k in keys:
            row[k].append(p[k])
        row["p50"].append(p["latency_ms"].get("p50", 0.0))
        row["p99"].append(p["latency_ms"].get("p99", 0.0))
    return {point: {fe: {k: statistics.median(v) for k, v in row.items()}
                    for fe, row in fes.items()} for point, fes in out.items()}


def section(results: dict[str, Any], json_name: str, png_name: str) -> list[str]:
    med = summary(results)
    m = results["machine"]
    lines = [SECTION, "",
             "`/v1/embeddings` on the mock engine as an embedding model (pools at once, "
             "64 dimensions), 64 clients in a closed loop, `input` a list of 1 or 32 texts "
             "of 32 tokens, floats back; each frontend pinned to one core, the engine and "
             "the load generator on the other (`tools/bench/pooling.py`). Medians of "
             f"{max(p['repeat'] for p in results['points']) + 1} repeats; raw results: "
             f"[{json_name}]({json_name}). Code {m.get('git_commit', '?')}"
             f"{' (dirty)' if m.get('git_dirty') else ''}.", "",
             f"![embeddings requests/s and frontend CPU per request]({png_name})", "",
             "| point | frontend | requests/s | inputs/s | latency p50 ms | p99 ms | "
             "frontend CPU ms/request | CPU share |",
             "|---|---|---:|---:|---:|---:|---:|---:|"]
    for point, fes in med.items():
        for fe in FRONTENDS:
            if fe in fes:
                r = fes[fe]
                lines.append(f"| {point} | {LABEL[fe]} | {r['req_s']:,.1f} | "
                             f"{r['inputs_s']:,.0f} | {r['p50']:.1f} | {r['p99']:.1f} | "
                             f"{r['frontend_cpu_ms_per_req']:.3f} | "
                             f"{r['frontend_cpu_share']:.0%} |")
    lines += [""]
    for point, fes in med.items():
        if "ours" in fes and "vllm" in fes:
            o, v = fes["ours"], fes["vllm"]
            lines.append(f"* {point}: ours {o['req_s'] / v['req_s']:.2f}x vLLM's requests/s, "
                         f"{o['frontend_cpu_ms_per_req'] / v['frontend_cpu_ms_per_req']:.2f}x "
                         "its CPU per request.")
    return lines + [""]


def plot(results: dict[str, Any]) -> Any:
    """One row per point: requests/s and frontend CPU per request, side by side."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    med = summary(results)
    fig, axes = plt.subplots(len(med), 2, figsize=(9, 3.2 * len(med)), squeeze=False)
    for row, (point, fes) in zip(axes, med.items()):
        for ax, key, title in ((row[0], "req_s", "requests/s (higher is better)"),
                               (row[1], "frontend_cpu_ms_per_req",
                                "frontend CPU ms/request (lower is better)")):
            names = [fe for fe in FRONTENDS if fe in fes]
            bars = ax.bar([LABEL[fe] for fe in names], [fes[fe][key] for fe in names],
                          color=["tab:blue", "tab:orange"][:len(names)])
            ax.bar_label(bars, fmt="%.3g")
            ax.set_title(f"{point}: {title}", fontsize=10)
    fig.suptitle("/v1/embeddings on the mock engine (medians)")
    return fig


def write(results: dict[str, Any], out_dir: Path) -> Path:
    return write_section(results, out_dir, "benchmarks-pooling", SECTION, section, plot)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="3 s per point, 1 repeat")
    p.add_argument("--repeats", type=int, default=None, help="default 3 (--quick: 1)")
    p.add_argument("--duration", type=float, default=None, help="seconds per point (8)")
    p.add_argument("--concurrency", type=int, default=64)
    p.add_argument("--batches", type=int, nargs="+", default=[1, 32])
    p.add_argument("--prompt-tokens", type=int, default=32)
    p.add_argument("--max-requests", type=int, default=200000)
    p.add_argument("--max-num-seqs", type=int, default=2048, help="the mock's --max-num-seqs")
    p.add_argument("--model", type=Path, default=None,
                   help="an embedding model directory (default: build the tiny embedder)")
    add_stack_arguments(p)
    args = p.parse_args(argv)
    args.argv = list(argv or [])
    if args.repeats is None:
        args.repeats = 1 if args.quick else 3
    if args.duration is None:
        args.duration = 3.0 if args.quick else 8.0
    # What tools.bench.run.Stack reads.
    args.mock_step_time, args.ours_arg, args.vllm_arg = 0.0, [], []
    return args


def ensure_model(args: argparse.Namespace) -> None:
    if args.model is not None:
        return
    from harness.tiny_model import build as build_tiny
    from tools.make_tiny_pooling_models import build_embedder

    tiny, embed = REPO / "build" / "tiny", REPO / "build" / "tiny-embed"
    if not (tiny / "model.safetensors").exists():
        build_tiny(tiny)
    if not (embed / "config.json").exists():
        build_embedder(tiny, embed)
    args.model = embed


def main(argv: list[str] | None = None) -> int:
    import sys
    args = parse_args(sys.argv[1:] if argv is None else argv)
    ensure_model(args)
    results = run(args)
    md = write(results, args.out_dir)
    log(f"wrote {md}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
