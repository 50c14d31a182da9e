"""Render benchmark results (JSON from tools.bench.run) as Markdown and a PNG plot.

    .venv/bin/python -m tools.bench.report docs/benchmarks.json [--md docs/benchmarks.md]
    .venv/bin/python -m tools.bench.report docs/benchmarks-paced.json

The second (``--suite paced``) renders the "Engine-paced regime" section,
which ``docs/benchmarks.md`` carries after the frontend-bound results
(``benchmarks-paced.json`` beside ``benchmarks.json``).

The page's prose is in docs/prose/, the targets in tools/bench/targets.toml;
this module lays out the page and its tables.
"""

import argparse
import json
import statistics
from collections import defaultdict
from pathlib import Path

from tools import prose
from tools.bench import targets
from tools.bench.plot import plot
from tools.bench.report_paced import paced_section
from tools.bench.results import (ENGINE_TITLE, FRONTENDS, LABEL, Results, med, or_dash,
                                 repo_relative, spread, tok_per_cpu_s)


def targets_section(res: Results) -> list[str]:
    if "mock" not in res.engines:
        return ["(no mock-engine results)"]
    return targets.table("frontend_bound", res)


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
            f"{or_dash(r.get('loadgen_cpu_s_per_1k_tok'), '.4f')} | "
            f"{r.get('server_cpu_share', 0):.0%} | "
            f"{'/'.join(f'{v:.0%}' for v in r['core_busy'].values())} |")
    return lines


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
            f"{spread([s.get('start_to_serving_s') for s in ss], '.2f', rng)} | "
            f"{spread([s.get('engine_ready_to_serving_s') for s in ss], '.3f', rng)} | "
            f"{spread([s.get('rss_idle_mb') for s in ss], '.0f', rng)}"
            + (f" (vllm-rs alone {spread([s.get('rss_idle_binary_mb') for s in ss], '.0f', rng)})"
               if fe == "rust" else "") + " | "
            f"{spread([s.get('rss_after_mb') for s in ss], '.0f', rng)} | "
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
            ttft = (f"{spread(v(lambda r: r['ttft_ms']['p50']), '.1f', False)} / "
                    f"{spread(v(lambda r: r['ttft_ms']['p99']), '.1f', rng)}") if stream else "-"
            itl = (f"{spread(v(lambda r: r['itl_ms']['p50']), '.2f', False)} / "
                   f"{spread(v(lambda r: r['itl_ms']['p99']), '.1f', False)}") \
                if stream and res.point_info[p]["n"] * res.point_info[p][
                    "prompts_per_request"] == 1 else "-"
            tpot = spread(v(lambda r: r['tpot_ms']['p50']), '.2f', False) if stream else "-"
            lat = (f"{spread(v(lambda r: r['latency_ms']['p50']), '.0f', False)} / "
                   f"{spread(v(lambda r: r['latency_ms']['p99']), '.0f', False)}")
            errs = sum(r["errors"] + r["bad_token_counts"] for r in rs)
            out.append(f"| {p} | {LABEL[fe]} | {spread(v(lambda r: r['tok_s']), ',.0f', rng)} | "
                       f"{spread(v(lambda r: r['req_s']), ',.1f', False)} | {ttft} | {itl} | "
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
            busy_s = "/".join(f"{med(b[k] for b in busy):.0%}" for k in keys)
            out.append(
                f"| {p} | {LABEL[fe]} | "
                f"{spread(v(lambda r: r['frontend_cpu_s_per_1k_tok']), '.4f', rng)} | "
                f"{spread(v(tok_per_cpu_s), ',.0f', False)} | "
                f"{spread(v(lambda r: r['frontend_cpu_share'] * 100), '.0f', False)} % | "
                f"{spread(v(lambda r: r['engine_cpu_share'] * 100), '.0f', False)} % | "
                f"{spread(v(lambda r: r['loadgen_cpu_share'] * 100), '.0f', False)} % | "
                f"{busy_s} | {spread(v(lambda r: r.get('rss_peak_mb')), '.0f', False)} |")
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
            out.append(f"| {p} | {spread(tok, '.2f', rng)}× | {spread(eff, '.2f', rng)}× | "
                       f"{spread(t99, '.2f', rng) + '×' if t99 else '-'} | "
                       f"{spread(t50, '.2f', rng) + '×' if t50 else '-'} |")
    return out


def noise_section(res: Results) -> list[str]:
    """What the run says about its own noise."""
    out = []
    d = res.data
    for engine in res.engines:
        shares = {fe: [r["frontend_cpu_share"] for (e, _, f), rs in res.by.items()
                       if e == engine and f == fe for r in rs] for fe in FRONTENDS}
        busy = [float(v) for (e, _, _), rs in res.by.items() if e == engine for r in rs
                for k, v in r["core_busy"].items() if k == str(d["args"]["frontend_cpu"])]
        parts = [f"{LABEL[fe]} {min(v):.0%}–{max(v):.0%} (median {med(v):.0%})"
                 for fe, v in shares.items() if v]
        if parts:
            out.append(f"* {engine} engine: the frontend under test got "
                       f"{'; '.join(parts)} of its core; the frontend core was "
                       f"{med(busy):.0%} busy (median) in all, so other work on the machine "
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
           f"`.venv/bin/python -m tools.bench.report {repo_relative(json_path)}`)."
           f" Raw results: [{rel_json}]({rel_json}).", "",
           "Reproduce:", "", "```", data["command"], "```", "",
           "## Targets", "", *targets_section(res), "",
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
            prose.paragraph("benchmarks-ceiling"), "",
            *ceiling_section(data), "",
            "## Start-up and memory", "", *startup_section(res), ""]
    for engine in res.engines:
        out += [f"## Results: {ENGINE_TITLE[engine]}", "", *results_section(res, engine), ""]
    paced_json = Path(json_path).with_name(f"{Path(json_path).stem}-paced.json")
    if paced_json.exists():
        out += paced_section(json.loads(paced_json.read_text()), paced_json)
    out += ["## Noise in this run", "", *noise_section(res), "",
            prose.text("benchmarks-reading") + "\n", prose.text("benchmarks-method")]
    profile = md_path.parent / "profile.md"
    if profile.exists():
        out += ["", f"Profile of our frontend under the mock: [{profile.name}]({profile.name})."]
    md_path.write_text("\n".join(out) + "\n")
    return md_path, png_path


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
