"""Profile our frontend under the mock engine (step time 0) with py-spy.

    .venv/bin/python -m tools.bench.profile [--concurrency 64 256] [--duration 20]

Starts the mock engine and our frontend as the benchmark does (frontend on
core 0, the rest on core 1), then for each concurrency runs the streaming
completions load while ``py-spy record`` samples the frontend. Writes, per
concurrency, a flame graph (SVG) and the raw collapsed stacks into
``--out-dir`` (default build/profile/), and a summary with the hottest
functions (self and inclusive, % of the frontend's busy samples) to
``docs/profile.md``. Needs ``py-spy`` (``pip install py-spy``) and ptrace
rights (root, or CAP_SYS_PTRACE).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import shutil
import sys
import time
from collections import Counter
from pathlib import Path

from tools.bench import procs
from tools.bench.loadgen import Client, Workload, run_point
from tools.bench.prompts import make_prompts
from tools.bench.run import SERVED, Stack, warm_up

REPO = procs.REPO_ROOT
_LINE = re.compile(r":\d+\)$")


def _frame_name(frame: str) -> str:
    """``func (path/file.py:123)`` -> ``func (file path relative to site-packages/repo)``."""
    frame = _LINE.sub(")", frame.strip())
    frame = re.sub(r"\(.*?site-packages/", "(", frame)
    frame = frame.replace(f"({REPO}/", "(")
    return frame


def analyze(raw: Path, top: int = 25) -> dict:
    """Self and inclusive sample counts per function from py-spy's raw output."""
    self_c: Counter = Counter()
    incl_c: Counter = Counter()
    file_c: Counter = Counter()
    total = 0
    for line in raw.read_text(errors="replace").splitlines():
        if not line.strip():
            continue
        stack, _, count = line.rpartition(" ")
        try:
            n = int(count)
        except ValueError:
            continue
        frames = [f for f in stack.split(";") if f and not f.startswith(("process ", "thread "))]
        if not frames:
            continue
        names = [_frame_name(f) for f in frames]
        total += n
        self_c[names[-1]] += n
        for name in set(names):
            incl_c[name] += n
        leaf = names[-1]
        m = re.search(r"\((.*)\)$", leaf)
        file_c[m.group(1) if m else leaf] += n
    return {"total": total, "self": self_c.most_common(top), "inclusive": incl_c.most_common(top),
            "files": file_c.most_common(15)}


def _table(rows: list[tuple[str, int]], total: int) -> list[str]:
    out = ["| % | function (file) |", "|---:|---|"]
    for name, n in rows:
        out.append(f"| {100 * n / total:.1f} | `{name}` |")
    return out


async def _load(client: Client, w: Workload, duration: float) -> dict:
    r = await run_point(client, w, duration, max_requests=10 ** 6)
    return {"tok_s": r.tok_s, "ttft_p99": r.ttft_ms.get("p99"), "errors": r.errors}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--concurrency", type=int, nargs="+", default=[64, 256])
    p.add_argument("--duration", type=float, default=20.0, help="seconds sampled per point")
    p.add_argument("--rate", type=int, default=100, help="py-spy samples per second")
    p.add_argument("--model", type=Path, default=REPO / "build" / "tiny")
    p.add_argument("--out-dir", type=Path, default=REPO / "build" / "profile")
    p.add_argument("--summary", type=Path, default=None,
                   help="default: docs/profile.md (ours), build/profile/profile-vllm.md (vllm)")
    p.add_argument("--frontend", choices=("ours", "vllm"), default="ours",
                   help="which frontend to profile (vllm: vLLM's API server, for comparison)")
    p.add_argument("--frontend-cpu", type=int, default=0)
    p.add_argument("--other-cpu", type=int, default=1)
    p.add_argument("--native", action="store_true", help="py-spy --native (C frames too)")
    p.add_argument("--ours-arg", action="append", default=[],
                   help="extra argument for our frontend (repeatable; --ours-arg=--flag)")
    args = p.parse_args(argv)
    if args.summary is None:
        args.summary = (REPO / "docs" / "profile.md" if args.frontend == "ours"
                        else args.out_dir / "profile-vllm.md")
    pyspy = shutil.which("py-spy", path=str(procs.BIN_DIR)) or shutil.which("py-spy")
    if not pyspy:
        print("py-spy not found: .venv/bin/pip install py-spy", file=sys.stderr)
        return 2
    args.out_dir.mkdir(parents=True, exist_ok=True)
    os.sched_setaffinity(0, {args.other_cpu})
    logdir = Path(f"/tmp/bench-profile-{time.strftime('%Y%m%d-%H%M%S')}")
    logdir.mkdir(parents=True)
    # Stack wants the benchmark's arguments.
    ns = argparse.Namespace(model=args.model, max_num_seqs=512, mock_step_time=0.0, frontend_cpu=args.frontend_cpu,
                            other_cpu=args.other_cpu, vllm_arg=[], ours_arg=args.ours_arg,
                            start_timeout=120.0, nice=0)
    stack = Stack(args.frontend, "mock", ns, logdir, "profile")
    prompts = make_prompts(args.model, count=512)
    sections = []
    try:
        stack.start()
        client = Client(procs.HOST, stack.port, prompts, model=SERVED)
        warm_up(client)
        import uvloop
        for c in args.concurrency:
            w = Workload(f"stream-c{c}", c)
            svg = args.out_dir / f"{args.frontend}-mock-stream-c{c}.svg"
            raw = args.out_dir / f"{args.frontend}-mock-stream-c{c}.txt"
            # Load first (past its staggered start), then sample.
            spy_cmd = [pyspy, "record", "--pid", str(stack.frontend.pid), "--rate",
                       str(args.rate), "--duration", str(int(args.duration)), "--format", "raw",
                       "-o", str(raw)] + (["--native"] if args.native else [])

            async def both() -> tuple[dict, float, float]:
                task = asyncio.create_task(_load(client, w, args.duration + 8))
                await asyncio.sleep(4.0)
                cpu0, t0 = procs.cpu_seconds(stack.pids), time.monotonic()
                spy = await asyncio.create_subprocess_exec(
                    *spy_cmd, stdout=asyncio.subprocess.DEVNULL,
                    stderr=asyncio.subprocess.PIPE)
                _, err = await spy.communicate()
                share = (procs.cpu_seconds(stack.pids) - cpu0) / (time.monotonic() - t0)
                if spy.returncode != 0:
                    print(err.decode(errors="replace"), file=sys.stderr)
                return await task, share, spy.returncode

            load, share, rc = uvloop.run(both())
            if rc != 0 or not raw.exists():
                raise RuntimeError(f"py-spy failed ({rc})")
            _raw_to_svg(raw, svg)  # an icicle graph from the same samples
            a = analyze(raw)
            print(f"stream c={c}: {load['tok_s']:,.0f} tok/s, frontend CPU share {share:.0%}, "
                  f"{a['total']} busy samples")
            for name, n in a["self"][:15]:
                print(f"  {100 * n / a['total']:5.1f}%  {name}")
            sections.append((c, load, share, a, svg, raw))
    finally:
        stack.stop()
    who = "our frontend" if args.frontend == "ours" else "vLLM's Python API server"
    lines = [f"# Profile: {who} under the mock engine", "",
             "Generated by `.venv/bin/python -m tools.bench.profile "
             + " ".join(argv if argv is not None else sys.argv[1:]) + "` "
             f"({time.strftime('%Y-%m-%d %H:%M')}, code: {_git()}): py-spy {args.rate} Hz, "
             f"{args.duration:.0f} s per point, streaming /v1/completions (128 prompt + 128 "
             "output tokens), mock engine with step time 0, frontend on one core. "
             "Percentages are of the samples in which the frontend's Python thread was busy "
             "(idle samples in the event loop's poll are excluded); time spent in C code "
             "(msgspec, zmq, uvloop, tokenizers) is attributed to the Python function that "
             "called it. Icicle graphs (SVG) and raw collapsed stacks: "
             f"`{_rel(args.out_dir)}/` (not committed).",
             ""]
    for c, load, share, a, svg, raw in sections:
        lines += [f"## Streaming, concurrency {c}", "",
                  f"{load['tok_s']:,.0f} output tok/s while sampled, frontend CPU share "
                  f"{share:.0%}, {a['total']} busy samples.", "",
                  "### Self time (the function itself, and C code it calls)", "",
                  *_table(a["self"], a["total"]), "",
                  "### Inclusive time (the function and everything below it)", "",
                  *_table(a["inclusive"], a["total"]), "",
                  "### Self time by file", "", *_table(a["files"], a["total"]), ""]
    args.summary.parent.mkdir(parents=True, exist_ok=True)
    args.summary.write_text("\n".join(lines) + "\n")
    print(f"wrote {args.summary} and {args.out_dir}")
    return 0


def _git() -> str:
    from tools.bench.run import machine_info
    m = machine_info()
    return f"git {m.get('git_commit')}" + (" + uncommitted changes" if m.get("git_dirty") else "")


def _rel(path: Path) -> str:
    try:
        return str(path.resolve().relative_to(REPO))
    except ValueError:
        return str(path)


def _raw_to_svg(raw: Path, svg: Path) -> None:
    """An icicle graph (root on top) from collapsed stacks, as a plain SVG file."""
    root: dict = {}
    total = 0
    for line in raw.read_text(errors="replace").splitlines():
        stack, _, count = line.rpartition(" ")
        try:
            n = int(count)
        except ValueError:
            continue
        total += n
        node = root
        for f in [f for f in stack.split(";") if f]:
            child = node.setdefault(_frame_name(f), {"n": 0, "c": {}})
            child["n"] += n
            node = child["c"]
    width, row_h = 1800.0, 16
    rects: list[str] = []
    max_depth = [0]

    def draw(children: dict, x: float, depth: int) -> None:
        max_depth[0] = max(max_depth[0], depth)
        for name, node in sorted(children.items(), key=lambda kv: -kv[1]["n"]):
            w = width * node["n"] / total
            if w >= 0.5:
                label = name.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
                hue = (hash(name.split(" ")[0]) % 60) + 10
                rects.append(
                    f'<g><title>{label} ({100 * node["n"] / total:.1f}%)</title>'
                    f'<rect x="{x:.1f}" y="{depth * row_h}" width="{w:.1f}" height="{row_h - 1}" '
                    f'fill="hsl({hue},80%,60%)"/>'
                    + (f'<text x="{x + 2:.1f}" y="{depth * row_h + 12}" font-size="10">'
                       f'{label[:int(w / 6)]}</text>' if w > 30 else "") + "</g>")
                draw(node["c"], x, depth + 1)
            x += w

    draw(root, 0.0, 0)
    h = (max_depth[0] + 2) * row_h
    svg.write_text(f'<svg xmlns="http://www.w3.org/2000/svg" width="{width:.0f}" height="{h}" '
                   f'font-family="monospace">' + "".join(rects) + "</svg>\n")


if __name__ == "__main__":
    sys.exit(main())
