"""Profile our frontend under the mock engine with py-spy.

    .venv/bin/python -m tools.bench.profile [--concurrency 64 256] [--duration 20]
    .venv/bin/python -m tools.bench.profile --step-time 0.002 \
        --loads stream-c64 plain-mt1-c64 [--summary build/profile/paced.md]

Starts the mock engine and our frontend as the benchmark does (frontend on
core 0, the rest on core 1), then for each load (``--loads``, names as the
benchmark's: ``[chat-]stream-cC``, ``plain[-mtK]-cC``; default: streaming
completions at each ``--concurrency``) runs it while ``py-spy record``
samples the frontend, the mock stepping every ``--step-time`` seconds (0: as
fast as it can). Writes, per load, a flame graph (SVG) and the raw collapsed
stacks into ``--out-dir`` (default build/profile/), and a summary with the
hottest functions (self and inclusive, % of the frontend's busy samples) to
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
from typing import Iterator

from harness import procs
from harness.models import tiny_model_dir
from harness.ports import HOST
from tools.bench.loadgen import Client, Workload, run_point
from tools.bench.prompts import make_prompts
from tools.bench.run import SERVED, Stack, warm_up

REPO = procs.REPO_ROOT
_LINE = re.compile(r":\d+\)$")
_LOAD = re.compile(r"(chat-)?(stream|plain)(?:-mt(\d+))?-c(\d+)$")


def parse_load(name: str) -> Workload:
    """``chat-stream-c64``, ``plain-mt1-c64``, ... -> the benchmark's workload."""
    m = _LOAD.match(name)
    if not m:
        raise ValueError(f"not a load name: {name!r}")
    chat, kind, mt, c = m.groups()
    return Workload(name, int(c), stream=kind == "stream", max_tokens=int(mt or 128),
                    api="chat" if chat else "completions")


def _frame_name(frame: str) -> str:
    """``func (path/file.py:123)`` -> ``func (file path relative to site-packages/repo)``."""
    frame = _LINE.sub(")", frame.strip())
    frame = re.sub(r"\(.*?site-packages/", "(", frame)
    frame = frame.replace(f"({REPO}/", "(")
    return frame


# Where a sample's CPU goes, by the innermost frame that names a job (tried
# from the leaf up; the first rule that matches wins). "per request" and "per
# chunk" group them.
CATEGORIES: list[tuple[str, str, tuple[str, ...]]] = [
    ("per request", "tokenize the prompt", ("ModelInfo.encode", "Renderer.encode ")),
    ("per request", "render the chat template", ("ChatTemplate.render", "jinja2")),
    ("per request", "parse chat messages", ("parse_messages",)),
    ("per request", "ADD: validate + encode (wire.encode_add)", ("encode_add",)),
    ("per request", "ADD: zmq send", ("EngineClient.send_add",)),
    ("per request", "ADD: other submit work (ids, routing, metrics)", ("Table.submit",)),
    ("per request", "detokenizer set-up (add_choice)", ("Table.add_choice",)),
    ("per request", "sampling params", ("build_sampling_params", "child_params",
                                        "get_max_tokens")),
    ("per request", "body decode + validation", ("decode_body", "validate_request",
                                                 "count_choices")),
    ("per request", "non-streaming response body", ("full_response",)),
    ("per request", "release (abort, table, metrics)", ("Table.release",)),
    ("per request", "stream start (headers, socket options)", ("SseWriter.start",)),
    ("per request", "stream end (usage chunk, [DONE], eof)", ("SseWriter.done",
                                                             "SseWriter.write_event",
                                                             "_closing")),
    ("per request", "response: prepare + write (aiohttp)", ("StreamResponse.prepare",
                                                           "Response.write_eof",
                                                           "StreamResponse.write_eof",
                                                           "_prepare_hook",
                                                           "finish_response")),
    ("per request", "request handler, other", ("create_completion",
                                               "create_chat_completion")),
    ("per request", "middlewares", ("count_requests", "Cors.middleware", ".limits ",
                                    "error_middleware", "_fix_request_current_app",
                                    "Application._handle")),
    ("per request", "HTTP parsing + connection handling (aiohttp)", ("web_protocol.py",)),
    ("per chunk", "chunk formatting (JSON, SSE framing)", ("View._render", "View._chunk",
                                                          "_render (", "_chunk (")),
    ("per chunk", "socket write", ("SseWriter.push",)),
    ("per chunk", "detokenize", ("IncrementalDetokenizer", "ByteLevelStream")),
    ("per chunk", "metrics (per step)", ("StatsRecorder.on_step",)),
    ("per chunk", "fan-out (route, merge, wake)", ("Table.on_outputs", "Table._apply",
                                                   "Table._stream_step", "Delta.")),
    ("per chunk", "engine message decode", ("wire.py",)),
    ("per chunk", "engine reader, other (zmq recv)", ("EngineClient._on_output_readable",)),
    ("other", "event loop (uvloop/asyncio itself)", ("runners.py",)),
]


def _stacks(raw: Path, keep_roots: bool = False) -> Iterator[tuple[list[str], int]]:
    """Each line of py-spy's collapsed output: its frame names (outermost
    first; the process and thread roots only with ``keep_roots``) and samples."""
    for line in raw.read_text(errors="replace").splitlines():
        stack, _, count = line.rpartition(" ")
        try:
            n = int(count)
        except ValueError:
            continue
        yield [_frame_name(f) for f in stack.split(";")
               if f and (keep_roots or not f.startswith(("process ", "thread ")))], n


def categorize(raw: Path) -> tuple[int, list[tuple[str, str, int]]]:
    """Samples per (group, category) of CATEGORIES; the rest is "other"."""
    counts: Counter = Counter()
    total = 0
    for frames, n in _stacks(raw):
        if not frames:
            continue
        total += n
        key = ("other", "other")
        for frame in reversed(frames):
            hit = next(((g, c) for g, c, needles in CATEGORIES
                        if any(x in frame + " " for x in needles)), None)
            if hit is not None:
                key = hit
                break
        counts[key] += n
    rows = sorted(((g, c, n) for (g, c), n in counts.items()),
                  key=lambda r: (r[0] != "per request", r[0] != "per chunk", -r[2]))
    return total, rows


def thread_cpu(pid: int) -> dict[str, float]:
    """CPU seconds per thread name of a process (the zmq I/O thread is not a
    Python thread: py-spy does not see it)."""
    out: dict[str, float] = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            name = Path(f"/proc/{pid}/task/{tid}/comm").read_text().strip()
            fields = Path(f"/proc/{pid}/task/{tid}/stat").read_bytes().rsplit(b")", 1)[1].split()
        except OSError:
            continue
        out[name] = out.get(name, 0.0) + (int(fields[11]) + int(fields[12])) / procs.CLK_TCK
    return out


def analyze(raw: Path, top: int = 25) -> dict:
    """Self and inclusive sample counts per function from py-spy's raw output."""
    self_c: Counter = Counter()
    incl_c: Counter = Counter()
    file_c: Counter = Counter()
    total = 0
    for names, n in _stacks(raw):
        if not names:
            continue
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
    return {"tok_s": r.tok_s, "req_s": r.req_s, "ttft_p99": r.ttft_ms.get("p99"),
            "errors": r.errors}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--concurrency", type=int, nargs="+", default=[64, 256])
    p.add_argument("--loads", nargs="+", default=None,
                   help="load names (default: stream-cC for each --concurrency)")
    p.add_argument("--step-time", type=float, default=0.0,
                   help="the mock engine's step time, seconds (default 0)")
    p.add_argument("--duration", type=float, default=20.0, help="seconds sampled per point")
    p.add_argument("--rate", type=int, default=100, help="py-spy samples per second")
    p.add_argument("--model", type=Path, default=None,
                   help="model directory (default: the tiny test model, built if missing)")
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
    args.model = args.model or tiny_model_dir()
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
    loads = [parse_load(n) for n in (args.loads or [f"stream-c{c}" for c in args.concurrency])]
    ns = argparse.Namespace(model=args.model, max_num_seqs=512,
                            mock_step_time=args.step_time, frontend_cpu=args.frontend_cpu,
                            other_cpu=args.other_cpu, vllm_arg=[], ours_arg=args.ours_arg,
                            start_timeout=120.0, nice=0)
    stack = Stack(args.frontend, "mock", ns, logdir, "profile")
    prompts = make_prompts(args.model, count=512)
    sections = []
    try:
        stack.start()
        client = Client(HOST, stack.port, prompts, model=SERVED)
        warm_up(client, "ours")
        import uvloop
        step = f"{args.step_time * 1000:g}ms"
        for w in loads:
            svg = args.out_dir / f"{args.frontend}-mock-{w.name}@{step}.svg"
            raw = args.out_dir / f"{args.frontend}-mock-{w.name}@{step}.txt"
            # Load first (past its staggered start), then sample.
            spy_cmd = [pyspy, "record", "--pid", str(stack.frontend.pid), "--rate",
                       str(args.rate), "--duration", str(int(args.duration)), "--format", "raw",
                       "-o", str(raw)] + (["--native"] if args.native else [])

            async def both() -> tuple[dict, float, float]:
                task = asyncio.create_task(_load(client, w, args.duration + 8))
                await asyncio.sleep(4.0)
                threads0 = thread_cpu(stack.frontend.pid)
                cpu0, t0 = procs.cpu_seconds(stack.pids), time.monotonic()
                spy = await asyncio.create_subprocess_exec(
                    *spy_cmd, stdout=asyncio.subprocess.DEVNULL,
                    stderr=asyncio.subprocess.PIPE)
                _, err = await spy.communicate()
                share = (procs.cpu_seconds(stack.pids) - cpu0) / (time.monotonic() - t0)
                threads1 = thread_cpu(stack.frontend.pid)
                threads.clear()
                threads.update({k: v - threads0.get(k, 0.0) for k, v in threads1.items()})
                if spy.returncode != 0:
                    print(err.decode(errors="replace"), file=sys.stderr)
                return await task, share, spy.returncode

            threads: dict[str, float] = {}
            load, share, rc = uvloop.run(both())
            if rc != 0 or not raw.exists():
                raise RuntimeError(f"py-spy failed ({rc})")
            _raw_to_svg(raw, svg)  # an icicle graph from the same samples
            a = analyze(raw)
            print(f"{w.name}: {load['tok_s']:,.0f} tok/s, {load['req_s']:,.0f} req/s, "
                  f"frontend CPU share {share:.0%}, {a['total']} busy samples")
            for name, n in a["self"][:15]:
                print(f"  {100 * n / a['total']:5.1f}%  {name}")
            sections.append((w, load, share, a, svg, raw, dict(threads)))
    finally:
        stack.stop()
    who = "our frontend" if args.frontend == "ours" else "vLLM's Python API server"
    lines = [f"# Profile: {who} under the mock engine", "",
             "Generated by `.venv/bin/python -m tools.bench.profile "
             + " ".join(argv if argv is not None else sys.argv[1:]) + "` "
             f"({time.strftime('%Y-%m-%d %H:%M')}, code: {_git()}): py-spy {args.rate} Hz, "
             f"{args.duration:.0f} s per point, 128-token prompts (128 output tokens unless "
             f"the load says mtK), mock engine with step time {args.step_time * 1000:g} ms, "
             "frontend on one core. "
             "Percentages are of the samples in which the frontend's Python thread was busy "
             "(idle samples in the event loop's poll are excluded); time spent in C code "
             "(msgspec, zmq, uvloop, tokenizers) is attributed to the Python function that "
             "called it. Icicle graphs (SVG) and raw collapsed stacks: "
             f"`{_rel(args.out_dir)}/` (not committed).",
             ""]
    for w, load, share, a, svg, raw, threads in sections:
        total_cpu = sum(threads.values()) or 1.0
        total, rows = categorize(raw)
        lines += [f"## {w.name} (step time {args.step_time * 1000:g} ms)", "",
                  f"{load['tok_s']:,.0f} output tok/s, {load['req_s']:,.0f} req/s while "
                  f"sampled, frontend CPU share {share:.0%}, {a['total']} busy samples.", "",
                  "CPU by thread while sampled (py-spy sees only the Python ones): "
                  + ", ".join(f"{name} {100 * v / total_cpu:.0f} %"
                              for name, v in sorted(threads.items(), key=lambda kv: -kv[1])
                              if v > 0) + ".", "",
                  "### By job (innermost frame that names one)", "",
                  "| group | job | % |", "|---|---|---:|",
                  *[f"| {g} | {c} | {100 * n / total:.1f} |" for g, c, n in rows],
                  *[f"| **{g}, total** | | **{100 * sum(n for gg, _, n in rows if gg == g) / total:.1f}** |"
                    for g in ("per request", "per chunk", "other")], "",
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
    for names, n in _stacks(raw, keep_roots=True):
        total += n
        node = root
        for name in names:
            child = node.setdefault(name, {"n": 0, "c": {}})
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
