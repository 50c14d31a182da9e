"""Render benchmark results (JSON from tools.bench.run) as Markdown and a PNG plot.

    .venv/bin/python -m tools.bench.report docs/benchmarks.json [--md docs/benchmarks.md]
    .venv/bin/python -m tools.bench.report docs/benchmarks-paced.json

The second (``--suite paced``) renders the "Engine-paced regime" section,
which ``docs/benchmarks.md`` carries after the frontend-bound results
(``benchmarks-paced.json`` beside ``benchmarks.json``).
"""

from __future__ import annotations

import argparse
import json
import statistics
from collections import defaultdict
from pathlib import Path
from typing import Any, Callable, Iterable

FRONTENDS = ("ours", "rust", "vllm")
LABEL = {"ours": "ours", "rust": "vLLM Rust", "vllm": "vLLM Python"}
REFERENCES = ("rust", "vllm")  # vLLM's frontends, in the order of the tables
ENGINE_TITLE = {"mock": "mock engine (frontend-bound)",
                "real": "real engine (tiny model, vLLM CPU EngineCore)"}


def _med(values: Iterable[float | None]) -> float | None:
    vals = [v for v in values if v is not None]
    return statistics.median(vals) if vals else None


def _spread(values: list[float | None], fmt: str, show_range: bool) -> str:
    vals = [v for v in values if v is not None]
    if not vals:
        return "-"
    text = format(statistics.median(vals), fmt)
    if show_range and len(vals) > 1:
        text += f" ({format(min(vals), fmt)}–{format(max(vals), fmt)})"
    return text


class Results:
    def __init__(self, data: dict) -> None:
        self.data = data
        self.points = [p["name"] for p in data["points"]]
        self.point_info = {p["name"]: p for p in data["points"]}
        self.by: dict[tuple, list[dict]] = defaultdict(list)
        for r in data["runs"]:
            self.by[(r["engine"], r["point"], r["frontend"])].append(r)
        self.engines = [e for e in ("mock", "real") if any(k[0] == e for k in self.by)]
        self.repeats = max((r["repeat"] for r in data["runs"]), default=-1) + 1
        self.references = [fe for fe in REFERENCES if any(k[2] == fe for k in self.by)]

    def values(self, engine: str, point: str, fe: str, get: Callable[[dict], Any]) -> list:
        out = []
        for r in sorted(self.by.get((engine, point, fe), []), key=lambda r: r["repeat"]):
            try:
                out.append(get(r))
            except (KeyError, TypeError):
                out.append(None)
        return out

    def ratios(self, engine: str, point: str, get: Callable[[dict], Any],
               ref: str = "vllm") -> list[float]:
        """ours/``ref`` per repeat (both measured in the same repeat, seconds apart)."""
        a = {r["repeat"]: r for r in self.by.get((engine, point, "ours"), [])}
        b = {r["repeat"]: r for r in self.by.get((engine, point, ref), [])}
        out = []
        for rep in sorted(set(a) & set(b)):
            try:
                x, y = get(a[rep]), get(b[rep])
            except (KeyError, TypeError):
                continue
            if x is not None and y:
                out.append(x / y)
        return out


def tok_per_cpu_s(r: dict) -> float | None:
    v = r.get("frontend_cpu_s_per_1k_tok")
    return 1000.0 / v if v else None


def _stream_points(res: Results) -> list[tuple[int, str]]:
    return sorted((res.point_info[p]["concurrency"], p) for p in res.points
                  if p.startswith("stream-c"))


def targets(res: Results) -> list[str]:
    rng = res.repeats > 1
    lines = ["| target (mock engine, frontend on one core) | measured | status |",
             "|---|---|---|"]
    if "mock" not in res.engines:
        return ["(no mock-engine results)"]
    for c, p in _stream_points(res):
        if c not in (64, 256):
            continue
        rat = res.ratios("mock", p, lambda r: r["tok_s"])
        cpu = res.ratios("mock", p, tok_per_cpu_s)
        if rat:
            m = statistics.median(rat)
            lines.append(f"| streaming c={c}: output tok/s ≥ 3× vLLM | "
                         f"{_spread(rat, '.2f', rng)}× (per frontend CPU-second: "
                         f"{_spread(cpu, '.2f', rng)}×) | "
                         f"{'met' if m >= 3 else f'missed ({m / 3:.0%} of target)'} |")
    for c, p in _stream_points(res):
        rat = res.ratios("mock", p, lambda r: r["ttft_ms"]["p99"])
        if rat:
            m = statistics.median(rat)
            lines.append(f"| streaming c={c}: p99 TTFT ≤ 0.5× vLLM | "
                         f"{_spread(rat, '.2f', rng)}× | "
                         f"{'met' if m <= 0.5 else f'missed (needs {m / 0.5:.1f}× lower)'} |")
    rss = res.values("mock", "stream-c256", "ours", lambda r: r["rss_peak_mb"])
    if any(v is not None for v in rss):
        m = _med(rss)
        lines.append(f"| RSS < 150 MB with 256 open streams | {_spread(rss, '.0f', rng)} MB | "
                     f"{'met' if m < 150 else 'missed'} |")
    st = [s.get("engine_ready_to_serving_s") for s in res.data["startup"]
          if s["frontend"] == "ours" and s["engine"] == "mock"]
    if any(v is not None for v in st):
        m = _med(st)
        lines.append(f"| start-up < 1 s after the engine is ready | "
                     f"{_spread(st, '.3f', rng)} s | {'met' if m < 1 else 'missed'} |")
    return lines


def machine_section(d: dict) -> list[str]:
    m = d["machine"]
    vers = ", ".join(f"{k[:-8]} {v}" for k, v in m.items() if k.endswith("_version"))
    return [
        f"* CPU: {m.get('cpu_model', '?')}, {m.get('cpus')} cores "
        f"(AVX-512: {m.get('avx512')}), {m.get('mem_gb')} GiB RAM, Linux {m.get('kernel')}, "
        f"Python {m.get('python')}",
        f"* packages: {vers}",
        f"* code: git {m.get('git_commit')}"
        + (" + uncommitted changes" if m.get("git_dirty") else ""),
        f"* run: {d['started']} → {d.get('finished', '?')}; load average at start "
        f"{'/'.join(f'{v:.1f}' for v in d['loadavg_start'])}, at end "
        f"{'/'.join(f'{v:.1f}' for v in d.get('loadavg_end', []))}",
        f"* layout: frontend under test on core {d['args']['frontend_cpu']} "
        f"(`taskset -c {d['args']['frontend_cpu']}`); engine, load generator and harness on "
        f"core {d['args']['other_cpu']}; {d['args']['duration']:.0f} s measurement window per "
        f"point, {d['args']['repeats']} repeat(s) with the mock engine and "
        f"{d['args'].get('real_repeats', d['args']['repeats'])} with the real one, "
        f"at most {d['args']['max_requests']} "
        f"requests per point; engines' --max-num-seqs {d['args']['max_num_seqs']}; "
        f"mock engine --step-time {d['args'].get('mock_step_time', 0.0):g}"
        + (f"; every benchmark process at nice {d['args']['nice']}"
           if d['args'].get('nice') else ""),
    ]


def ceiling_section(d: dict) -> list[str]:
    lines = ["| when | load | tok/s | req/s | load generator CPU (share of its core) | "
             "load generator CPU s / 1k tok | trivial server CPU share | core busy 0/1 |",
             "|---|---|---|---|---|---|---|---|"]
    for r in d["ceiling"]:
        lines.append(
            f"| {r['label']} | {r['workload']['name']} | {r['tok_s']:,.0f} | "
            f"{r['req_s']:,.1f} | {r['loadgen_cpu_share']:.0%} | "
            f"{_f(r.get('loadgen_cpu_s_per_1k_tok'), '.4f')} | "
            f"{r.get('server_cpu_share', 0):.0%} | "
            f"{'/'.join(f'{v:.0%}' for v in r['core_busy'].values())} |")
    return lines


def _f(v: Any, fmt: str) -> str:
    return "-" if v is None else format(v, fmt)


def startup_section(res: Results) -> list[str]:
    rng = res.repeats > 1
    lines = ["| engine | frontend | process start → serving (s) | engine ready → serving (s) "
             "| idle RSS after start (MB) | RSS after the run (MB) | processes |",
             "|---|---|---|---|---|---|---|"]
    groups: dict[tuple, list[dict]] = defaultdict(list)
    for s in res.data["startup"]:
        groups[(s["engine"], s["frontend"])].append(s)
    for (engine, fe), ss in sorted(groups.items()):
        lines.append(
            f"| {engine} | {LABEL[fe]} | "
            f"{_spread([s.get('start_to_serving_s') for s in ss], '.2f', rng)} | "
            f"{_spread([s.get('engine_ready_to_serving_s') for s in ss], '.3f', rng)} | "
            f"{_spread([s.get('rss_idle_mb') for s in ss], '.0f', rng)}"
            + (f" (vllm-rs alone {_spread([s.get('rss_idle_binary_mb') for s in ss], '.0f', rng)})"
               if fe == "rust" else "") + " | "
            f"{_spread([s.get('rss_after_mb') for s in ss], '.0f', rng)} | "
            f"{ss[0].get('frontend_processes', '-')} |")
    return lines


def results_section(res: Results, engine: str) -> list[str]:
    rng = res.repeats > 1
    out = [f"#### Throughput and latency ({ENGINE_TITLE[engine]})", "",
           "| point | frontend | output tok/s | req/s | TTFT p50 / p99 (ms) | "
           "ITL p50 / p99 (ms) | TPOT p50 (ms) | latency p50 / p99 (ms) | errors |",
           "|---|---|---|---|---|---|---|---|---|"]
    for p in res.points:
        for fe in FRONTENDS:
            rs = res.by.get((engine, p, fe))
            if not rs:
                continue
            v = lambda g: res.values(engine, p, fe, g)  # noqa: E731
            stream = res.point_info[p]["stream"]
            ttft = (f"{_spread(v(lambda r: r['ttft_ms']['p50']), '.1f', False)} / "
                    f"{_spread(v(lambda r: r['ttft_ms']['p99']), '.1f', rng)}") if stream else "-"
            itl = (f"{_spread(v(lambda r: r['itl_ms']['p50']), '.2f', False)} / "
                   f"{_spread(v(lambda r: r['itl_ms']['p99']), '.1f', False)}") \
                if stream and res.point_info[p]["n"] * res.point_info[p][
                    "prompts_per_request"] == 1 else "-"
            tpot = _spread(v(lambda r: r['tpot_ms']['p50']), '.2f', False) if stream else "-"
            lat = (f"{_spread(v(lambda r: r['latency_ms']['p50']), '.0f', False)} / "
                   f"{_spread(v(lambda r: r['latency_ms']['p99']), '.0f', False)}")
            errs = sum(r["errors"] + r["bad_token_counts"] for r in rs)
            out.append(f"| {p} | {LABEL[fe]} | {_spread(v(lambda r: r['tok_s']), ',.0f', rng)} | "
                       f"{_spread(v(lambda r: r['req_s']), ',.1f', False)} | {ttft} | {itl} | "
                       f"{tpot} | {lat} | {errs} |")
    out += ["", f"#### CPU, memory and noise ({ENGINE_TITLE[engine]})", "",
            "| point | frontend | frontend CPU s / 1k tok | tok per frontend CPU-s | "
            "frontend CPU share | engine CPU share | load generator CPU share | "
            "core busy 0/1 | frontend RSS peak (MB) |",
            "|---|---|---|---|---|---|---|---|---|"]
    for p in res.points:
        for fe in FRONTENDS:
            if not res.by.get((engine, p, fe)):
                continue
            v = lambda g: res.values(engine, p, fe, g)  # noqa: E731
            busy = [r["core_busy"] for r in res.by[(engine, p, fe)]]
            keys = list(busy[0])
            busy_s = "/".join(f"{_med(b[k] for b in busy):.0%}" for k in keys)
            out.append(
                f"| {p} | {LABEL[fe]} | "
                f"{_spread(v(lambda r: r['frontend_cpu_s_per_1k_tok']), '.4f', rng)} | "
                f"{_spread(v(tok_per_cpu_s), ',.0f', False)} | "
                f"{_spread(v(lambda r: r['frontend_cpu_share'] * 100), '.0f', False)} % | "
                f"{_spread(v(lambda r: r['engine_cpu_share'] * 100), '.0f', False)} % | "
                f"{_spread(v(lambda r: r['loadgen_cpu_share'] * 100), '.0f', False)} % | "
                f"{busy_s} | {_spread(v(lambda r: r.get('rss_peak_mb')), '.0f', False)} |")
    for ref in res.references:
        out += ["", f"#### Ratios, ours / {LABEL[ref]}, per repeat ({ENGINE_TITLE[engine]})",
                "", "| point | output tok/s | tok per frontend CPU-s | p99 TTFT | p50 TTFT |",
                "|---|---|---|---|---|"]
        for p in res.points:
            stream = res.point_info[p]["stream"]
            tok = res.ratios(engine, p, lambda r: r["tok_s"], ref)
            if not tok:
                continue
            eff = res.ratios(engine, p, tok_per_cpu_s, ref)
            t99 = res.ratios(engine, p, lambda r: r["ttft_ms"]["p99"], ref) if stream else []
            t50 = res.ratios(engine, p, lambda r: r["ttft_ms"]["p50"], ref) if stream else []
            out.append(f"| {p} | {_spread(tok, '.2f', rng)}× | {_spread(eff, '.2f', rng)}× | "
                       f"{_spread(t99, '.2f', rng) + '×' if t99 else '-'} | "
                       f"{_spread(t50, '.2f', rng) + '×' if t50 else '-'} |")
    return out


def plot(res: Results, png: Path) -> Path:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    engines = res.engines
    fig, axes = plt.subplots(2, max(1, len(engines)), figsize=(6.2 * max(1, len(engines)), 8),
                             squeeze=False)
    colors = {"ours": "tab:blue", "vllm": "tab:orange", "rust": "tab:green"}
    for col, engine in enumerate(engines):
        ax_t, ax_l = axes[0][col], axes[1][col]
        for fe in FRONTENDS:
            for kind, style in (("stream", "-o"), ("plain", "--s")):
                pts = sorted((res.point_info[p]["concurrency"], p) for p in res.points
                             if p.startswith(f"{kind}-c") and res.by.get((engine, p, fe)))
                if not pts:
                    continue
                xs = [c for c, _ in pts]
                for ax, get in ((ax_t, lambda r: r["tok_s"]),
                                (ax_l, lambda r: r["ttft_ms"]["p99"])):
                    if ax is ax_l and kind != "stream":
                        continue
                    ys, lo, hi = [], [], []
                    for _, p in pts:
                        vals = [v for v in res.values(engine, p, fe, get) if v is not None]
                        m = statistics.median(vals) if vals else float("nan")
                        ys.append(m)
                        lo.append(m - min(vals) if vals else 0)
                        hi.append(max(vals) - m if vals else 0)
                    label = f"{LABEL[fe]} {'streaming' if kind == 'stream' else 'non-streaming'}"
                    ax.errorbar(xs, ys, yerr=[lo, hi], fmt=style, color=colors[fe],
                                label=label, capsize=3, alpha=0.9 if kind == "stream" else 0.6)
        concs = sorted({res.point_info[p]["concurrency"] for p in res.points
                        if p.startswith(("stream-c", "plain-c"))})
        for ax in (ax_t, ax_l):
            ax.set_xscale("log", base=2)
            ax.set_xticks(concs)
            ax.set_xticklabels([str(c) for c in concs])
            ax.minorticks_off()
            ax.set_xlabel("concurrency (closed loop)")
            ax.grid(True, which="both", alpha=0.3)
            ax.legend(fontsize=8)
        ax_t.set_ylabel("output tokens/s")
        ax_t.set_title(f"throughput: {ENGINE_TITLE[engine]}", fontsize=9)
        ax_l.set_ylabel("p99 TTFT (ms, streaming)")
        ax_l.set_yscale("log")
        ax_l.set_title(f"p99 TTFT: {ENGINE_TITLE[engine]}", fontsize=9)
    fig.suptitle("/v1/completions, 128 prompt + 128 output tokens, frontend on one core\n"
                 "median over repeats, bars: min–max", fontsize=10)
    fig.tight_layout()
    fig.savefig(png, dpi=110)
    plt.close(fig)
    return png


def noise_section(res: Results) -> list[str]:
    """What the run says about its own noise."""
    out = []
    d = res.data
    for engine in res.engines:
        shares = {fe: [r["frontend_cpu_share"] for (e, _, f), rs in res.by.items()
                       if e == engine and f == fe for r in rs] for fe in FRONTENDS}
        busy = [float(v) for (e, _, _), rs in res.by.items() if e == engine for r in rs
                for k, v in r["core_busy"].items() if k == str(d["args"]["frontend_cpu"])]
        parts = [f"{LABEL[fe]} {min(v):.0%}–{max(v):.0%} (median {_med(v):.0%})"
                 for fe, v in shares.items() if v]
        if parts:
            out.append(f"* {engine} engine: the frontend under test got "
                       f"{'; '.join(parts)} of its core; the frontend core was "
                       f"{_med(busy):.0%} busy (median) in all, so other work on the machine "
                       "took the rest.")
        spreads = []
        for p in res.points:
            rat = res.ratios(engine, p, lambda r: r["tok_s"])
            if len(rat) > 1:
                spreads.append((max(rat) / min(rat), p))
        if spreads:
            spreads.sort()
            out.append(f"* {engine} engine: the ours/vLLM throughput ratio of a point varied "
                       f"between repeats by a factor of {spreads[0][0]:.2f} ({spreads[0][1]}) "
                       f"to {spreads[-1][0]:.2f} ({spreads[-1][1]}), median "
                       f"{statistics.median(x for x, _ in spreads):.2f}.")
    ceil: dict[str, list[float]] = defaultdict(list)
    for r in d["ceiling"]:
        ceil[r["workload"]["name"]].append(r["tok_s"])
    if ceil:
        out.append("* load generator ceiling, before → after the run: " + "; ".join(
            f"{k} " + " → ".join(f"{v:,.0f}" for v in vs) for k, vs in ceil.items())
            + " tok/s (it moves with the load on the machine).")
    return out


READING = """\
### Reading the numbers

* **The mock engine runs ahead.** With step time 0 it steps as fast as it can,
  independently of the frontend, so when a frontend is slower than the mock the
  engine's output messages queue up in front of it. A new request's first token
  then waits behind everything queued: at high concurrency TTFT under the mock
  measures how fast a frontend drains that backlog (roughly the time it needs for
  a whole request's worth of output), not a scheduling delay. This is the same
  for both frontends.
* **vLLM merges deltas when it lags.** vLLM's output collector (DELTA mode)
  merges the outputs a stream has not consumed yet, so when its frontend falls
  behind it sends fewer, bigger SSE events (at c=64/256 under the mock often one
  event with all 128 tokens: TPOT 0, TTFT ≈ the whole request). Ours writes every
  engine step of a stream as its own SSE event, in one write per wake-up. ITL
  p50 of 0 ms means several events arrived in one read.
* **Step time 0 favours the slower frontend.** An engine message carries the
  tokens of the requests that happen to be running at that step. With step time
  0 the mock steps thousands of times a second, so a frontend that keeps up
  gets many small messages (a few tokens each) and pays its per-message costs
  per few tokens, while a frontend that lags lets requests pile up into bigger
  steps. `--mock-step-time 0.002` makes every step batch all running requests,
  as a real engine's steps do (frontend-bound as long as C × 500 tok/s exceeds
  what the frontend can do).
* **Shared machine.** Use the ratio columns (both frontends measured seconds apart)
  and "tok per frontend CPU-s" (insensitive to how much of its core the frontend
  got) rather than absolute tokens/s; the min–max ranges show the spread.
* **Real engine.** On two cores the tiny model's engine, not the frontend, is the
  bottleneck (it shares its core with the load generator), so throughput is
  about equal; the frontend's CPU per token and TTFT are what differ.

"""

METHOD = """\
### How it is measured

* **Load.** `/v1/completions` with a text prompt that the model's tokenizer turns
  into exactly 128 tokens (BOS included; 512 different prompts, so no request is
  a prefix-cache repeat of the previous one), `max_tokens` 128, `ignore_eos`,
  temperature 0 (n=4: temperature 1). Streaming requests ask for
  `stream_options.include_usage`, and the usage chunk is what counts the tokens.
  Batch points send 8 prompts per request; n=4 points ask for 4 choices.
* **Closed loop** with C connections (HTTP/1.1 keep-alive), each sending its next
  request when the previous one has ended. The first request of connection i
  asks for only 1 + 127·i/C tokens and is not measured, so that the loop does not
  run in lock-step waves. The measurement window starts when all those are done
  and lasts the window length (or until the request bound is hit); requests in
  flight at its end are completed (drained), not counted as throughput beyond it.
* **Throughput** is output tokens received inside the window (each SSE event
  credited with its share of the response's `completion_tokens`; a non-streamed
  response's tokens spread evenly over its lifetime, send → end), divided by
  the window length. Requests/s counts responses completed inside the window. **Latency** statistics
  cover the requests sent inside the window: TTFT = send → first token event;
  ITL = gaps between token events of one response (events arriving in the same
  read count as 0 ms; batch and n>1 points have no ITL); TPOT = (last − first
  token event) / (tokens − 1); latency = send → end of response.
* **CPU** is utime+stime of the frontend's process tree (`/proc/PID/stat`) over
  the window; "CPU s / 1k tok" divides it by the tokens of the window. "Share"
  is CPU seconds per wall second (1.0 = a whole core). "Core busy" is
  `/proc/stat` for each core over the window: it includes everything else that
  ran on the machine, so a core that is 100 % busy while the frontend's share is
  well below 100 % means the frontend was competing for its core.
* **RSS** is the sum of the resident set sizes of the frontend's processes,
  sampled every 0.2 s during a point (peak) and after start-up (idle).
* **Start-up**: the engine is started first (the mock: until it says HELLO);
  "process start → serving" is from spawning the frontend to its first
  `/health` 200 (polled every 5 ms); "engine ready → serving" is from the mock
  engine's "EngineCore ready" log line (after it has sent READY) to that 200.
* **Noise.** Every frontend gets a fresh engine per repeat; both stacks of a
  repeat are up at the same time (the idle one costs nothing) and each point
  runs on one right after the other, the order alternating, so the ratios
  compare measurements taken seconds apart. Medians over repeats, with
  min–max in parentheses. The tokens-per-frontend-CPU-second columns are the
  least sensitive to other load on the machine.
* **vLLM's Rust frontend** (`--reference rust`) is the same `vllm serve` command
  under `VLLM_USE_RUST_FRONTEND=1`: its Python supervisor does the engine
  handshake and hands the HTTP and engine sockets to the `vllm-rs` binary from
  the CUDA wheel (`python -m tools.bench.rust_frontend`). CPU and RSS are of the
  whole tree (the supervisor idles); the start-up table also gives `vllm-rs`'s
  RSS alone. It answers 400 to batch prompts and n > 1, so those points have no
  Rust row.
* **vLLM's frontend** is `vllm serve` with `--data-parallel-size-local 0`
  attached to a headless engine, with vLLM's defaults (uvloop, one API server
  process, stats logging on) except `--disable-uvicorn-access-log`; request
  logging is off by default in 0.32. Environment: engine_core.launcher.CPU_ENV.
  Both engines are the same command: `engine-core` (the launcher) with
  `--max-model-len 1024 --dtype float32 --max-num-seqs N` or `engine-core --mock`.
"""


def _rel(path: Path) -> str:
    root = Path(__file__).resolve().parents[2]
    try:
        return str(Path(path).resolve().relative_to(root))
    except ValueError:
        return str(path)


def render(json_path: Path, md_path: Path, png_path: Path,
           draw: bool = True) -> tuple[Path, Path]:
    data = json.loads(Path(json_path).read_text())
    res = Results(data)
    if res.engines and draw:
        try:
            plot(res, png_path)
        except ImportError:
            print("matplotlib is missing (pip install -e '.[bench]'): no plot")
    rel_png = png_path.name
    rel_json = json_path.name
    vs = " and ".join(f"{LABEL[r].split()[1]}" for r in res.references) or "Python"
    out = [f"# Benchmarks: this frontend vs vLLM 0.32's {vs} frontend"
           f"{'s' if len(res.references) > 1 else ''}", "",
           "Generated by `tools/bench/run.py` (re-render with "
           f"`.venv/bin/python -m tools.bench.report {_rel(json_path)}`)."
           f" Raw results: [{rel_json}]({rel_json}).", "",
           "Reproduce:", "", "```", data["command"], "```", "",
           "## Targets", "", *targets(res), "",
           f"![throughput and p99 TTFT vs concurrency]({rel_png})", "",
           "## Machine and run", "", *machine_section(data), ""]
    if data.get("rust_skipped"):
        out += [f"**The Rust frontend was skipped:** {data['rust_skipped']}", ""]
    if data.get("failures"):
        out += ["**Failures during the run:**", ""]
        out += [f"* {f['engine']} repeat {f['repeat']}: `{f['error'][:500]}`"
                for f in data["failures"]]
        out += [""]
    out += ["## Load generator ceiling", "",
            "The load generator (`tools/bench/loadgen.py`, raw asyncio HTTP/1.1 on uvloop, "
            "one process) against `tools/bench/trivial_server.py` (canned chunks, one write "
            "per chunk), server on the frontend core, client on the other core, as in the "
            "benchmark. This is the load generator's worst case: every token arrives in a "
            "TCP read of its own, so its CPU seconds per 1k tokens here are an upper bound "
            "(against the frontends, several events share a read). When the trivial server "
            "is at 100 % of its core, the tokens/s are a lower bound of the load generator's "
            "ceiling. In the results below, the \"load generator CPU share\" column is what it "
            "actually used per point.", "",
            *ceiling_section(data), "",
            "## Start-up and memory", "", *startup_section(res), ""]
    for engine in res.engines:
        out += [f"## Results: {ENGINE_TITLE[engine]}", "", *results_section(res, engine), ""]
    paced_json = Path(json_path).with_name(f"{Path(json_path).stem}-paced.json")
    if paced_json.exists():
        out += paced_section(json.loads(paced_json.read_text()), paced_json)
    out += ["## Noise in this run", "", *noise_section(res), "", READING, METHOD]
    profile = md_path.parent / "profile.md"
    if profile.exists():
        out += ["", f"Profile of our frontend under the mock: [{profile.name}]({profile.name})."]
    md_path.write_text("\n".join(out) + "\n")
    return md_path, png_path


# ------------------------------------------------------------------ the paced suite
PACED_INTRO = """\
A GPU engine steps every 1-3 ms, and every running stream gets one token per
step: the frontend does one socket write per stream per step and cannot merge
steps, so what counts is its CPU per token and per request, not its peak
tokens/s. Here the mock engine is paced by its control channel: `@2ms` and
`@1ms` points run it at that `--step-time`, `@0ms` as fast as it can (the
frontend-bound regime of the sections above). `chat-` points are
`/v1/chat/completions` (the prompt as one user message), `plain-mtK-` points
non-streaming completions with `max_tokens` K (request rate: agents and
classifiers). **Floor**: in every repeat, `tools/bench/trivial_server.py`
(raw asyncio, canned chunks, one write per chunk, no engine) on the frontend's
core under the same load generator, unpaced (`@0ms`, the ceiling table's
setting) and paced by one timer per step (`@2ms`: one write per stream per
tick, the cheapest a frontend can be in that regime); its CPU per 1000 chunks
and per request is what the frontends' CPU per 1000 tokens and per request is
compared with. CPU is the frontend process tree's utime+stime over the window
(10 ms ticks), per 1000 output tokens received in the window or per response
completed in it.
"""


def _paced_floor(data: dict) -> dict[tuple[int, str], dict]:
    return {(r["repeat"], r["point"]): r for r in data.get("floor", [])}


def _floor_ratios(res: Results, data: dict, point: str, floor_point: str,
                  key: str, floor_key: str) -> list[float]:
    floors = _paced_floor(data)
    out = []
    for r in res.by.get(("mock", point, "ours"), []):
        f = floors.get((r["repeat"], floor_point))
        if f and r.get(key) and f.get(floor_key):
            out.append(r[key] / f[floor_key])
    return out


def _status(m: float, ok: bool, missed: str) -> str:
    return "met" if ok else f"missed ({missed})"


def paced_targets(res: Results, data: dict) -> list[str]:
    rng = res.repeats > 1
    lines = ["| target (issue 15) | measured: median (min–max) over repeats | status |",
             "|---|---|---|"]
    cpu = lambda r: r["frontend_cpu_s_per_1k_tok"]  # noqa: E731
    for c in (64, 256):
        p = f"stream-c{c}@2ms"
        rat = res.ratios("mock", p, cpu)
        if rat:
            m = statistics.median(rat)
            lines.append(f"| {p}: frontend CPU per output token ≤ 1/4 of vLLM's | "
                         f"{_spread(rat, '.3f', rng)}× vLLM's | "
                         f"{_status(m, m <= 0.25, f'{m / 0.25:.2f}× the target')} |")
    for fp, label in (("stream-c64@0ms", "unpaced"), ("stream-c64@2ms", "paced 2 ms")):
        rat = _floor_ratios(res, data, "stream-c64@2ms", fp, "frontend_cpu_s_per_1k_tok",
                            "server_cpu_s_per_1k_tok")
        if rat:
            m = statistics.median(rat)
            lines.append(f"| stream-c64@2ms: frontend CPU per token ≤ 1.5× the floor "
                         f"(trivial server, {label}, CPU per chunk) | {_spread(rat, '.2f', rng)}×"
                         f" the floor | {_status(m, m <= 1.5, f'{m / 1.5:.2f}× the target')} |")
    for p in sorted(p for p in res.points if p.endswith("@0ms") and p.startswith("stream-")):
        rat = res.ratios("mock", p, lambda r: r["tok_s"])
        if rat:
            m = statistics.median(rat)
            lines.append(f"| {p} (frontend-bound): output tok/s ≥ 5× vLLM's | "
                         f"{_spread(rat, '.2f', rng)}× | "
                         f"{_status(m, m >= 5, f'{m / 5:.0%} of the target')} |")
    p = "plain-mt1-c64@2ms"
    rat = res.ratios("mock", p, lambda r: r["req_s"])
    if rat:
        m = statistics.median(rat)
        lines.append(f"| {p}: requests/s ≥ 4× vLLM's | {_spread(rat, '.2f', rng)}× | "
                     f"{_status(m, m >= 4, f'{m / 4:.0%} of the target')} |")
    return lines + rust_targets(res)


def rust_targets(res: Results) -> list[str]:
    """Issue 30's targets against vLLM's Rust frontend (rows for the points run)."""
    if "rust" not in res.references:
        return []
    rng = res.repeats > 1
    lines = []

    def row(point: str, what: str, get: Callable[[dict], Any], ok: Callable[[float], bool],
            goal: float) -> None:
        rat = res.ratios("mock", point, get, "rust")
        if rat:
            m = statistics.median(rat)
            lines.append(f"| {point}: {what} (issue 30) | {_spread(rat, '.2f', rng)}× "
                         f"vLLM Rust's | {_status(m, ok(m), f'{m / goal:.2f}× the target')} |")

    for p in res.points:
        info = res.point_info[p]
        if p.endswith("@2ms") and info["stream"] and info["concurrency"] in (16, 64, 256):
            row(p, "frontend CPU per output token ≤ 0.8× vLLM Rust's",
                lambda r: r["frontend_cpu_s_per_1k_tok"], lambda m: m <= 0.8, 0.8)
            row(p, "p99 TTFT ≤ vLLM Rust's", lambda r: r["ttft_ms"]["p99"],
                lambda m: m <= 1.0, 1.0)
        elif p.endswith("@2ms") and not info["stream"] and info["concurrency"] == 64:
            row(p, "frontend CPU per request ≤ 0.8× vLLM Rust's",
                lambda r: r.get("frontend_cpu_ms_per_req"), lambda m: m <= 0.8, 0.8)
        elif p == "stream-c256@0ms":
            row(p, "output tok/s ≥ 1.25× vLLM Rust's", lambda r: r["tok_s"],
                lambda m: m >= 1.25, 1.25)
    return lines


def _ours_figures(data: dict) -> dict[str, list]:
    """What must not get worse, per repeat where it applies (ours only)."""
    res = Results(data)
    st = [s for s in data["startup"] if s["frontend"] == "ours"]
    out: dict[str, list] = {
        "engine ready → serving (s)": [s.get("engine_ready_to_serving_s") for s in st],
        "idle RSS (MB)": [s.get("rss_idle_mb") for s in st],
        "peak RSS, any point (MB)": [
            max((r.get("rss_peak_mb") or 0) for r in data["runs"]
                if r["frontend"] == "ours" and r["repeat"] == rep)
            for rep in range(res.repeats)]}
    for p in res.points:
        if res.point_info[p]["stream"]:
            out[f"{p} p99 TTFT (ms)"] = res.values("mock", p, "ours",
                                                    lambda r: r["ttft_ms"]["p99"])
    return out


def paced_regressions(data: dict, json_path: Path) -> list[str]:
    base = None
    if data.get("baseline"):
        bp = Path(data["baseline"])
        if not bp.is_absolute():
            bp = Path(__file__).resolve().parents[2] / bp
        if bp.exists() and bp.resolve() != Path(json_path).resolve():
            base = _ours_figures(json.loads(bp.read_text()))
    now = _ours_figures(data)
    rng = Results(data).repeats > 1
    if base is None:
        lines = ["| ours | this run |", "|---|---|"]
        lines += [f"| {k} | {_spread(v, '.3f' if k.endswith('(s)') else '.1f', rng)} |"
                  for k, v in now.items()]
        return lines
    lines = [f"| ours | this run | baseline ({data['baseline']}) | ratio |", "|---|---|---|---|"]
    for k, v in now.items():
        fmt = ".3f" if k.endswith("(s)") else ".1f"
        b = base.get(k)
        ratio = (_med(v) / _med(b)) if b and _med(b) and _med(v) is not None else None
        lines.append(f"| {k} | {_spread(v, fmt, rng)} | {_spread(b or [], fmt, rng)} | "
                     f"{_f(ratio, '.2f')} |")
    return lines


def paced_floor_section(data: dict) -> list[str]:
    groups: dict[str, list[dict]] = defaultdict(list)
    for r in data.get("floor", []):
        groups[r["point"]].append(r)
    rng = len({r["repeat"] for r in data.get("floor", [])}) > 1
    lines = ["| trivial server load | chunks/s | req/s | server CPU s / 1k chunks | "
             "server CPU ms / request | server CPU share | load generator CPU share |",
             "|---|---|---|---|---|---|---|"]
    for p, rs in groups.items():
        g = lambda k: [r.get(k) for r in rs]  # noqa: E731
        lines.append(
            f"| {p} | {_spread(g('tok_s'), ',.0f', rng)} | {_spread(g('req_s'), ',.0f', False)} "
            f"| {_spread(g('server_cpu_s_per_1k_tok'), '.4f', rng)} | "
            f"{_spread(g('server_cpu_ms_per_req'), '.3f', rng)} | "
            f"{_spread([v * 100 for v in g('server_cpu_share')], '.0f', False)} % | "
            f"{_spread([v * 100 for v in g('loadgen_cpu_share')], '.0f', False)} % |")
    return lines


def paced_results(res: Results, data: dict) -> list[str]:
    rng = res.repeats > 1
    out = ["| point | frontend | output tok/s | req/s | frontend CPU s / 1k tok | "
           "frontend CPU ms / request | frontend CPU share | TTFT p50 / p99 (ms) | "
           "ITL p50 / p99 (ms) | frontend RSS peak (MB) | core busy 0/1 | errors |",
           "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for p in res.points:
        stream = res.point_info[p]["stream"]
        for fe in FRONTENDS:
            rs = res.by.get(("mock", p, fe))
            if not rs:
                continue
            v = lambda g: res.values("mock", p, fe, g)  # noqa: E731
            ttft = (f"{_spread(v(lambda r: r['ttft_ms']['p50']), '.1f', False)} / "
                    f"{_spread(v(lambda r: r['ttft_ms']['p99']), '.1f', rng)}") if stream else "-"
            itl = (f"{_spread(v(lambda r: r['itl_ms']['p50']), '.2f', False)} / "
                   f"{_spread(v(lambda r: r['itl_ms']['p99']), '.1f', False)}") if stream else "-"
            busy = [r["core_busy"] for r in rs]
            busy_s = "/".join(f"{_med(b[k] for b in busy):.0%}" for k in busy[0])
            errs = sum(r["errors"] + r["bad_token_counts"] for r in rs)
            out.append(
                f"| {p} | {LABEL[fe]} | {_spread(v(lambda r: r['tok_s']), ',.0f', rng)} | "
                f"{_spread(v(lambda r: r['req_s']), ',.0f', rng)} | "
                f"{_spread(v(lambda r: r['frontend_cpu_s_per_1k_tok']), '.4f', rng)} | "
                f"{_spread(v(lambda r: r.get('frontend_cpu_ms_per_req')), '.3f', rng)} | "
                f"{_spread(v(lambda r: r['frontend_cpu_share'] * 100), '.0f', False)} % | "
                f"{ttft} | {itl} | {_spread(v(lambda r: r.get('rss_peak_mb')), '.0f', False)} | "
                f"{busy_s} | {errs} |")
    refs = res.references or ["vllm"]  # ours alone: the floor ratios still
    for ref in refs:
        out += paced_ratios(res, data, ref, floors=ref == refs[-1])
    return out


def paced_ratios(res: Results, data: dict, ref: str, floors: bool) -> list[str]:
    """Ours / ``ref`` per repeat, and (``floors``) ours / the trivial server's floor."""
    rng = res.repeats > 1
    vs = LABEL[ref]
    out = ["", f"Ratios per repeat (ours / {vs} measured seconds apart"
           + ("; ours / the floor of the same repeat):" if floors else "):"), "",
           f"| point | CPU per token, ours / {vs} | CPU per request, ours / {vs} | "
           f"tok/s, ours / {vs} | req/s, ours / {vs} | "
           + ("ours / floor (unpaced) | ours / floor (paced, same step) | " if floors else "")
           + f"p99 TTFT, ours / {vs} |",
           "|---|---|---|---|---|" + ("---|---|" if floors else "") + "---|"]
    for p in res.points:
        info = res.point_info[p]
        load = info.get("load", p.split("@")[0])
        step = p.split("@")[1] if "@" in p else "0ms"
        if info["stream"]:
            base = load.replace("chat-", "")
            key, fkey = "frontend_cpu_s_per_1k_tok", "server_cpu_s_per_1k_tok"
        else:
            base, key, fkey = load, "frontend_cpu_ms_per_req", "server_cpu_ms_per_req"
        f0 = _floor_ratios(res, data, p, f"{base}@0ms", key, fkey)
        fs = _floor_ratios(res, data, p, f"{base}@{step}", key, fkey) if step != "0ms" else []
        t99 = (res.ratios("mock", p, lambda r: r["ttft_ms"]["p99"], ref)
               if info["stream"] else [])
        if not floors and not res.by.get(("mock", p, ref)):
            continue
        row = [_spread(res.ratios("mock", p, lambda r: r["frontend_cpu_s_per_1k_tok"], ref),
                       '.3f', rng),
               _spread(res.ratios("mock", p, lambda r: r.get("frontend_cpu_ms_per_req"), ref),
                       '.3f', rng),
               _spread(res.ratios("mock", p, lambda r: r["tok_s"], ref), '.2f', rng),
               _spread(res.ratios("mock", p, lambda r: r["req_s"], ref), '.2f', rng),
               *([_spread(f0, '.2f', rng), _spread(fs, '.2f', rng)] if floors else []),
               _spread(t99, '.2f', rng)]
        out.append(f"| {p} | " + " | ".join(row) + " |")
    return out


def paced_section(data: dict, json_path: Path) -> list[str]:
    res = Results(data)
    m = data["machine"]
    a = data["args"]
    return [
        "## Engine-paced regime and request rate", "",
        f"Generated by `{data['command']}` (re-render with "
        f"`.venv/bin/python -m tools.bench.report {_rel(json_path)}`). "
        f"Raw results: [{Path(json_path).name}]({Path(json_path).name}).", "",
        PACED_INTRO,
        "### Targets", "", *paced_targets(res, data), "",
        "What must not get worse (ours):", "", *paced_regressions(data, json_path), "",
        "### Machine and run", "",
        f"* code: git {m.get('git_commit')}"
        + (" + uncommitted changes" if m.get("git_dirty") else "")
        + f"; CPU: {m.get('cpu_model', '?')}, {m.get('cpus')} cores",
        f"* run: {data['started']} → {data.get('finished', '?')}; load average at start "
        f"{'/'.join(f'{v:.1f}' for v in data['loadavg_start'])}, at end "
        f"{'/'.join(f'{v:.1f}' for v in data.get('loadavg_end', []))} (other work "
        "on the machine: see the core busy column)",
        f"* frontend under test on core {a['frontend_cpu']}, mock engine, load generator and "
        f"harness on core {a['other_cpu']}; {a['duration']:g} s window per point "
        f"({a['ceiling_duration']:g} s for the floor), {res.repeats} repeat(s), every "
        "stack started once per repeat, points rotating which frontend goes first; "
        f"mock --max-num-seqs {a['max_num_seqs']}; prompts of 128 tokens, 128 output tokens "
        "unless the point says otherwise",
        "",
        *(["**Failures during the run:**", ""]
          + [f"* repeat {f['repeat']}: `{f['error'][:500]}`" for f in data["failures"]] + [""]
          if data.get("failures") else []),
        "### Floor: the trivial server on the frontend's core", "",
        *paced_floor_section(data), "",
        "### Results", "", *paced_results(res, data), ""]


def render_paced_into(paced_json: Path, md_path: Path) -> Path:
    """Re-render ``md_path`` from its own JSON (which picks up the paced section),
    or, when there is none, write the paced section alone."""
    main_json = md_path.with_suffix(".json")
    if main_json.exists() and Path(paced_json).resolve() == main_json.with_name(
            f"{main_json.stem}-paced.json").resolve():
        render(main_json, md_path, md_path.with_suffix(".png"), draw=False)
    else:
        data = json.loads(Path(paced_json).read_text())
        md_path.write_text("\n".join(["# Benchmarks", "", *paced_section(data, paced_json)])
                           + "\n")
    return md_path


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("json", type=Path)
    p.add_argument("--md", type=Path, default=None)
    p.add_argument("--png", type=Path, default=None)
    a = p.parse_args()
    if json.loads(a.json.read_text())["args"].get("suite") == "paced":
        print(render_paced_into(a.json, a.md or a.json.with_name("benchmarks.md")))
        return
    md = a.md or a.json.with_suffix(".md")
    png = a.png or a.json.with_suffix(".png")
    render(a.json, md, png)
    print(md, png)


if __name__ == "__main__":
    main()
