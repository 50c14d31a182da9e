"""One-image chat side by side: this frontend vs vLLM 0.32's API server, on the tiny VLM.

    .venv/bin/python -m tools.bench.multimodal [--quick] [--duration S] [--concurrency 16 64]
                                               [--frontends ours vllm [vllm-cache]]

For each frontend, a fresh real CPU engine (``engine-core``) on the tiny
Idefics3 VLM (``harness.models.tiny_vlm_dir``) and, in front of it, our
frontend (with its ``--mm-processor-workers`` processor worker(s), children of
the frontend process) or ``vllm serve`` attached to the engine, the frontend
pinned to one core (its workers inherit the pinning), the engines and this
process with its load generator on the other, as ``tools/bench/run.py`` does.
Engines and frontends get the same flags: ``--mm-processor-cache-gb 0``, since
our workers never cache processed images (README, "Multimodal models"), so
both frontends run the processor on every image; ``vllm-cache`` (opt-in) is
vLLM's server and engine with vLLM's default processor cache, which
processes each distinct image once.

Load: a closed loop of C clients (16 and 64) sending streaming chat
completions with one user message: a short text and one PNG image as a data:
URL, one of ``--images`` distinct images (each request picks one at random);
``max_tokens`` small (16, ``ignore_eos``), so the per-request work (fetching
the data URL, the HF processor, the vision tower) weighs as much as the
tokens. The stacks run side by side, every point on each back to back.

Per point: requests/s, TTFT p50/p99, errors, the frontend's CPU (its whole
process tree; the workers' part separately) and its RSS after the point (main
process and workers separately). Per stack: idle RSS after start. And our
frontend's idle RSS on the *text-only* tiny model (mock engine), against the
figure ``docs/benchmarks.json`` records: it stays one process, no worker
(``--baseline-tree DIR``: also with the code of an earlier commit, extracted
into DIR, measured alternately with this one).
Results: ``docs/benchmarks-multimodal.json``, ``docs/benchmarks-multimodal.png``
and the "Multimodal: one-image chat" section of ``docs/benchmarks.md``
(replaced in place; the rest of the page is kept); ``--render JSON``
re-renders those two from the JSON.
"""

from __future__ import annotations

import argparse
import base64
import io
import json
import os
import random
import statistics
import time
from pathlib import Path
from typing import Any

from harness import procs
from harness.ports import HOST
from tools.bench.loadgen import Client, Workload
from tools.bench.page import write_section
from tools.bench.run import Stack, add_stack_arguments, log, machine_info, measure

REPO = procs.REPO_ROOT
SECTION = "## Multimodal: one-image chat"
FRONTENDS = ("ours", "vllm", "vllm-cache")
LABEL = {"ours": "ours", "vllm": "vLLM", "vllm-cache": "vLLM (processor cache on)"}
NO_CACHE = ["--mm-processor-cache-gb", "0"]
PROMPT = "Describe this picture in a few words."


def image_data_urls(count: int, size: tuple[int, int] = (64, 48)) -> list[str]:
    """``count`` distinct PNG images (color gradients) as data: URLs."""
    from PIL import Image

    urls = []
    for i in range(count):
        image = Image.new("RGB", size)
        r, g, b = (37 * i) % 256, (91 * i + 50) % 256, (53 * i + 100) % 256
        image.putdata(
            [
                ((r + 5 * x) % 256, (g + 7 * y) % 256, b)
                for y in range(size[1])
                for x in range(size[0])
            ]
        )
        out = io.BytesIO()
        image.save(out, "PNG")
        urls.append("data:image/png;base64," + base64.b64encode(out.getvalue()).decode())
    return urls


class ImageChatStack(Stack):
    """A benchmark stack whose engine (and vLLM's server) run the VLM with the
    processor cache off, except for ``vllm-cache``."""

    def _cache_flags(self) -> list[str]:
        return [] if self.frontend_kind == "vllm-cache" else NO_CACHE

    def _engine_argv(self) -> list[str]:
        return [*super()._engine_argv(), *self._cache_flags()]

    def _frontend_argv(self) -> tuple[list[str], dict[str, str]]:
        argv, env = super()._frontend_argv()
        return [*argv, *self._cache_flags()], env

    def main_and_workers(self) -> tuple[list[int], list[int]]:
        """The frontend's main process, and its children (our processor workers)."""
        pids = self.frontend.pids()
        return pids[:1], pids[1:]

    def rss_split_mb(self) -> dict[str, float]:
        main, workers = self.main_and_workers()
        return {
            "rss_main_mb": procs.rss_bytes(main) / 2**20,
            "rss_workers_mb": procs.rss_bytes(workers) / 2**20,
            "worker_processes": len(workers),
        }


class ImageChatClient(Client):
    """Streaming chat completions: a text and one of ``images`` (data: URLs)."""

    def __init__(self, host: str, port: int, images: list[str], model: str = "tiny") -> None:
        super().__init__(host, port, [PROMPT], model=model)
        self.images = images
        self._rng = random.Random(1234)

    def build(self, w: Workload, max_tokens: int) -> bytes:
        url = self.images[self._rng.randrange(len(self.images))]
        body: dict[str, Any] = {
            "model": self.model,
            "messages": [
                {
                    "role": "user",
                    "content": [
                        {"type": "text", "text": PROMPT},
                        {"type": "image_url", "image_url": {"url": url}},
                    ],
                }
            ],
            "max_tokens": max_tokens,
            "ignore_eos": True,
            "temperature": w.temperature,
            "stream": w.stream,
        }
        if w.stream:
            body["stream_options"] = {"include_usage": True}
        data = json.dumps(body, separators=(",", ":")).encode()
        return (
            f"POST /v1/chat/completions HTTP/1.1\r\nHost: {self.host}:{self.port}\r\n"
            f"Content-Type: application/json\r\nAccept: */*\r\n"
            f"Content-Length: {len(data)}\r\n\r\n"
        ).encode() + data


def points(args: argparse.Namespace) -> list[Workload]:
    return [
        Workload(f"image-chat-c{c}", c, stream=True, max_tokens=args.max_tokens, api="chat")
        for c in args.concurrency
    ]


def warm_up(client: Client, max_tokens: int) -> None:
    r = measure(client, Workload("warm-up", 4, max_tokens=max_tokens, api="chat"), 2.0, 400, None)
    if r["errors"] or not r["requests_done"]:
        raise RuntimeError(f"warm-up failed: {r['error_samples'][:1]}")


class TextOnlyStack(Stack):
    """Our frontend on the mock engine, its code from ``tree`` (None: this checkout)."""

    def __init__(self, tree: Path | None, *args: Any) -> None:
        super().__init__("ours", "mock", *args)
        self.tree = tree

    def _frontend_argv(self) -> tuple[list[str], dict[str, str]]:
        argv, env = super()._frontend_argv()
        return argv, ({**env, "PYTHONPATH": str(self.tree)} if self.tree else env)


def text_only_idle(args: argparse.Namespace, logdir: Path) -> dict[str, Any]:
    """Our frontend's idle RSS and processes on the text-only tiny model (mock
    engine), alternating with ``--baseline-tree``'s code when given."""
    from harness.models import tiny_model_dir

    text_args = argparse.Namespace(
        **{**vars(args), "model": tiny_model_dir(), "mock_step_time": 0.0, "ours_arg": []}
    )
    trees = [None, args.baseline_tree] if args.baseline_tree else [None]
    runs: dict[str, list[dict[str, Any]]] = {"this": [], "baseline": []}
    for rep in range(args.text_repeats):
        for tree in trees:
            label = "baseline" if tree else "this"
            stack = TextOnlyStack(tree, text_args, logdir, f"text-only-{label}-{rep}")
            try:
                info = stack.start()
            finally:
                stack.stop()
            runs[label].append(
                {
                    "rss_idle_mb": info["rss_idle_mb"],
                    "frontend_processes": info["frontend_processes"],
                }
            )
    out: dict[str, Any] = {
        "runs": runs,
        "rss_idle_mb": statistics.median(r["rss_idle_mb"] for r in runs["this"]),
        "frontend_processes": max(r["frontend_processes"] for r in runs["this"]),
        "recorded_rss_idle_mb": recorded_text_idle_rss(args.out_dir / "benchmarks.json"),
    }
    if runs["baseline"]:
        out["baseline_tree"] = str(args.baseline_tree)
        out["baseline_rss_idle_mb"] = statistics.median(r["rss_idle_mb"] for r in runs["baseline"])
    return out


def recorded_text_idle_rss(path: Path) -> float | None:
    """The median idle RSS of our frontend on the mock engine in the main benchmark."""
    try:
        startup = json.loads(path.read_text())["startup"]
    except (OSError, ValueError, KeyError):
        return None
    values = [
        s["rss_idle_mb"]
        for s in startup
        if s.get("frontend") == "ours" and s.get("engine") == "mock"
    ]
    return statistics.median(values) if values else None


def run(args: argparse.Namespace) -> dict[str, Any]:
    logdir = args.logdir or Path(f"/tmp/bench-multimodal-{time.strftime('%Y%m%d-%H%M%S')}")
    logdir.mkdir(parents=True, exist_ok=True)
    log(f"logs in {logdir}")
    images = image_data_urls(args.images)
    results: dict[str, Any] = {
        "command": " ".join([".venv/bin/python -m tools.bench.multimodal", *args.argv]),
        "machine": machine_info(),
        "started": time.strftime("%Y-%m-%d %H:%M:%S"),
        "loadavg_start": procs.loadavg(),
        "duration_s": args.duration,
        "max_tokens": args.max_tokens,
        "images": args.images,
        "cores": [args.frontend_cpu, args.other_cpu],
        "points": [],
        "startup": [],
    }
    log("text-only model: our frontend's idle RSS")
    results["text_only"] = text_only_idle(args, logdir)
    t = results["text_only"]
    log(
        f"  idle RSS {t['rss_idle_mb']:.1f} MB, {t['frontend_processes']} process(es); "
        f"baseline tree {t.get('baseline_rss_idle_mb')}, recorded {t['recorded_rss_idle_mb']}"
    )
    workloads = points(args)
    for rep in range(args.repeats):
        stacks = [
            ImageChatStack(kind, "real", args, logdir, f"{kind}-r{rep}") for kind in args.frontends
        ]
        try:
            for stack in stacks:  # the real engines load for a while: side by side
                stack.launch()
            clients = {}
            for stack in stacks:
                info = stack.wait_serving()
                info.update(frontend=stack.frontend_kind, repeat=rep, **stack.rss_split_mb())
                results["startup"].append(info)
                log(
                    f"  {stack.name}: serving after {info['start_to_serving_s']:.1f} s, idle "
                    f"RSS main {info['rss_main_mb']:.0f} MB, workers "
                    f"{info['rss_workers_mb']:.0f} MB ({info['worker_processes']})"
                )
                clients[stack.frontend_kind] = ImageChatClient(HOST, stack.port, images)
                warm_up(clients[stack.frontend_kind], args.max_tokens)
                stack.refresh_pids()
            for j, w in enumerate(workloads):
                k = (rep + j) % len(stacks)  # rotate who goes first
                for stack in stacks[k:] + stacks[:k]:
                    _, workers = stack.main_and_workers()
                    r = measure(
                        clients[stack.frontend_kind],
                        w,
                        args.duration,
                        args.max_requests,
                        stack,
                        extra_pids=workers,
                    )
                    r.update(
                        point=w.name,
                        frontend=stack.frontend_kind,
                        repeat=rep,
                        **stack.rss_split_mb(),
                    )
                    results["points"].append(r)
                    log(
                        f"  {stack.frontend_kind:10} {w.name:16} {r['req_s']:7.1f} req/s  "
                        f"TTFT p50 {r['ttft_ms'].get('p50', 0):7.1f} p99 "
                        f"{r['ttft_ms'].get('p99', 0):7.1f} ms  frontend CPU "
                        f"{r['frontend_cpu_share']:.0%} (workers "
                        f"{r.get('server_cpu_share', 0.0):.0%}), RSS main "
                        f"{r['rss_main_mb']:.0f} + workers {r['rss_workers_mb']:.0f} MB, "
                        f"errors {r['errors']}"
                    )
        finally:
            for stack in stacks:
                stack.stop()
    results["loadavg_end"] = procs.loadavg()
    results["finished"] = time.strftime("%Y-%m-%d %H:%M:%S")
    return results


# ------------------------------------------------------------------ report


def row_values(p: dict[str, Any], cores: tuple[str, ...]) -> dict[str, float]:
    busy = p.get("core_busy", {})
    return {
        "req_s": p["req_s"],
        "ttft_p50": p["ttft_ms"].get("p50", 0.0),
        "ttft_p99": p["ttft_ms"].get("p99", 0.0),
        "errors": p["errors"],
        "frontend_cpu_share": p["frontend_cpu_share"],
        "workers_cpu_share": p.get("server_cpu_share", 0.0),
        "frontend_cpu_ms_per_req": p.get("frontend_cpu_ms_per_req") or 0.0,
        "engine_cpu_share": p.get("engine_cpu_share", 0.0),
        "frontend_core_busy": busy.get(cores[0], 0.0),
        "other_core_busy": busy.get(cores[1], 0.0),
        "rss_main_mb": p["rss_main_mb"],
        "rss_workers_mb": p["rss_workers_mb"],
    }


SPREAD = ("req_s", "ttft_p99")  # also min and max over the repeats: "<key>_lo", "<key>_hi"


def summary(results: dict[str, Any]) -> dict[str, dict[str, dict[str, float]]]:
    """point -> frontend -> medians over the repeats (and ranges of ``SPREAD``)."""
    cores = tuple(str(c) for c in results.get("cores", (0, 1)))
    out: dict[str, dict[str, dict[str, list[float]]]] = {}
    for p in results["points"]:
        row = out.setdefault(p["point"], {}).setdefault(p["frontend"], {})
        for k, v in row_values(p, cores).items():
            row.setdefault(k, []).append(v)
    med: dict[str, dict[str, dict[str, float]]] = {}
    for point, fes in out.items():
        for fe, row in fes.items():
            m = med.setdefault(point, {})[fe] = {k: statistics.median(v) for k, v in row.items()}
            for k in SPREAD:
                m[f"{k}_lo"], m[f"{k}_hi"] = min(row[k]), max(row[k])
    return med


def with_range(r: dict[str, float], key: str, fmt: str) -> str:
    if r[f"{key}_lo"] == r[f"{key}_hi"]:
        return format(r[key], fmt)
    return f"{r[key]:{fmt}} ({r[f'{key}_lo']:{fmt}}–{r[f'{key}_hi']:{fmt}})"


def idle_lines(results: dict[str, Any]) -> list[str]:
    lines = [
        "| stack | idle RSS, main process MB | workers MB | worker processes |",
        "|---|---:|---:|---:|",
    ]
    by_frontend: dict[str, list[dict[str, Any]]] = {}
    for s in results["startup"]:
        by_frontend.setdefault(s["frontend"], []).append(s)
    for fe, starts in by_frontend.items():
        main = statistics.median(s["rss_main_mb"] for s in starts)
        workers = statistics.median(s["rss_workers_mb"] for s in starts)
        lines.append(
            f"| {LABEL[fe]} on the tiny VLM | {main:.0f} | {workers:.0f} | "
            f"{max(s['worker_processes'] for s in starts)} |"
        )
    t = results["text_only"]
    recorded = t.get("recorded_rss_idle_mb")
    baseline = t.get("baseline_rss_idle_mb")
    lines.append(
        f"| ours on the text-only tiny model (mock engine) | {t['rss_idle_mb']:.1f} | "
        f"- | {t['frontend_processes'] - 1} |"
    )
    if baseline is not None:
        lines.append(f"| the same, code of `--baseline-tree` | {baseline:.1f} | - | - |")
    if recorded is not None:
        lines.append(f"| the same, recorded in benchmarks.json | {recorded:.1f} | - | - |")
    return lines


def section(results: dict[str, Any], json_name: str, png_name: str) -> list[str]:
    med = summary(results)
    m = results["machine"]
    repeats = max((p["repeat"] for p in results["points"]), default=0) + 1
    lines = [
        SECTION,
        "",
        "Streaming `/v1/chat/completions`, one user message with a short text and one "
        f"PNG image as a data: URL (one of {results['images']} distinct images, 64x48), "
        f"`max_tokens` {results['max_tokens']} (`ignore_eos`), C clients in a closed "
        "loop; each frontend on a fresh real CPU engine on the tiny Idefics3 VLM "
        "(`tools/make_tiny_vlm.py`), the processor cache off on both "
        "(`--mm-processor-cache-gb 0` on engines and frontends: our workers never "
        "cache), each frontend pinned to one core with its processor worker(s), "
        "the engines and the load generator on the other (`tools/bench/multimodal.py`)"
        + (
            "; *vLLM (processor cache on)*: vLLM's server and engine with vLLM's default "
            "processor cache (each distinct image processed once). "
            if any(p["frontend"] == "vllm-cache" for p in results["points"])
            else ". "
        )
        + f"{results['duration_s']:g} s per point, {repeats} repeat(s) (medians); raw "
        f"results: [{json_name}]({json_name}). Code {m.get('git_commit', '?')}"
        f"{' (dirty)' if m.get('git_dirty') else ''}, run {results['started']}, load "
        f"average {results['loadavg_start'][0]:.1f} at start, "
        f"{results['loadavg_end'][0]:.1f} at the end.",
        "",
        "```",
        results["command"],
        "```",
        "",
        f"![one-image chat: requests/s and p99 TTFT]({png_name})",
        "",
        "| point | frontend | requests/s | TTFT p50 ms | TTFT p99 ms | errors | "
        "frontend CPU share (workers) | frontend CPU ms/request | engine CPU share | "
        "cores busy (frontend / other) | RSS after, main MB | workers MB |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for point, fes in med.items():
        for fe in FRONTENDS:
            if fe in fes:
                r = fes[fe]
                lines.append(
                    f"| {point} | {LABEL[fe]} | {with_range(r, 'req_s', ',.1f')} | "
                    f"{r['ttft_p50']:.1f} | {with_range(r, 'ttft_p99', '.1f')} | "
                    f"{r['errors']:.0f} | "
                    f"{r['frontend_cpu_share']:.0%} ({r['workers_cpu_share']:.0%}) | "
                    f"{r['frontend_cpu_ms_per_req']:.2f} | {r['engine_cpu_share']:.0%} | "
                    f"{r['frontend_core_busy']:.0%} / {r['other_core_busy']:.0%} | "
                    f"{r['rss_main_mb']:.0f} | {r['rss_workers_mb']:.0f} |"
                )
    lines += ["", *idle_lines(results), ""]
    for point, fes in med.items():
        if "ours" in fes and "vllm" in fes and fes["vllm"]["req_s"] and fes["vllm"]["ttft_p99"]:
            o, v = fes["ours"], fes["vllm"]
            lines.append(
                f"* {point}: ours {o['req_s'] / v['req_s']:.2f}x vLLM's requests/s, "
                f"{o['ttft_p99'] / v['ttft_p99']:.2f}x its p99 TTFT."
            )
    return lines + [""]


def plot(results: dict[str, Any]) -> Any:
    """Requests/s and p99 TTFT per point, the frontends side by side."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    med = summary(results)
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.6))
    colors = {"ours": "tab:blue", "vllm": "tab:orange", "vllm-cache": "tab:green"}
    names = [fe for fe in FRONTENDS if any(fe in fes for fes in med.values())]
    width = 0.8 / max(1, len(names))
    for ax, key, title in (
        (axes[0], "req_s", "requests/s (higher is better)"),
        (axes[1], "ttft_p99", "p99 TTFT ms (lower is better)"),
    ):
        for i, fe in enumerate(names):
            xs = [j + i * width for j, fes in enumerate(med.values()) if fe in fes]
            bars = ax.bar(
                xs,
                [fes[fe][key] for fes in med.values() if fe in fes],
                width,
                label=LABEL[fe],
                color=colors[fe],
            )
            ax.bar_label(bars, fmt="%.4g", fontsize=8)
        ax.set_xticks([j + width * (len(names) - 1) / 2 for j in range(len(med))], list(med))
        ax.set_title(title, fontsize=10)
    axes[0].legend(fontsize=8)
    fig.suptitle("One-image streaming chat, tiny Idefics3 on the CPU engine")
    return fig


def write(results: dict[str, Any], out_dir: Path) -> Path:
    return write_section(results, out_dir, "benchmarks-multimodal", SECTION, section, plot)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="5 s per point")
    p.add_argument("--repeats", type=int, default=1)
    p.add_argument("--duration", type=float, default=None, help="seconds per point (20)")
    p.add_argument("--concurrency", type=int, nargs="+", default=[16, 64])
    p.add_argument("--frontends", nargs="+", choices=FRONTENDS, default=["ours", "vllm"])
    p.add_argument("--images", type=int, default=8, help="distinct images")
    p.add_argument("--max-tokens", type=int, default=16)
    p.add_argument("--max-requests", type=int, default=200000)
    p.add_argument("--max-num-seqs", type=int, default=256, help="the engines' --max-num-seqs")
    p.add_argument(
        "--mm-processor-workers",
        type=int,
        default=None,
        help="our frontend's processor workers (default: its own default)",
    )
    p.add_argument(
        "--model",
        type=Path,
        default=None,
        help="a VLM directory (default: build the tiny Idefics3)",
    )
    add_stack_arguments(p)
    p.add_argument(
        "--baseline-tree",
        type=Path,
        default=None,
        help="a copy of an earlier commit (git archive REV | tar -x -C DIR): "
        "its frontend's idle RSS on the text-only model too",
    )
    p.add_argument(
        "--text-repeats", type=int, default=3, help="text-only idle RSS measurements per code tree"
    )
    p.add_argument(
        "--render",
        type=Path,
        default=None,
        help="only re-render the section and figure from this JSON",
    )
    args = p.parse_args(argv)
    args.argv = list(argv or [])
    if args.duration is None:
        args.duration = 5.0 if args.quick else 20.0
    # What tools.bench.run.Stack reads.
    args.mock_step_time, args.vllm_arg = 0.0, []
    args.ours_arg = (
        []
        if args.mm_processor_workers is None
        else ["--mm-processor-workers", str(args.mm_processor_workers)]
    )
    return args


def main(argv: list[str] | None = None) -> int:
    import sys

    args = parse_args(sys.argv[1:] if argv is None else argv)
    if args.render is not None:
        log(f"wrote {write(json.loads(args.render.read_text()), args.out_dir)}")
        return 0
    if args.model is None:
        from harness.models import tiny_vlm_dir

        args.model = tiny_vlm_dir()
    os.sched_setaffinity(0, {args.other_cpu})
    results = run(args)
    md = write(results, args.out_dir)
    log(f"wrote {md}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
