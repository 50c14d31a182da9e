"""The "Engine-paced regime and request rate" section of docs/benchmarks.md,
from the paced suite's JSON (tools.bench.run --suite paced)."""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

from tools import prose
from tools.bench import targets
from tools.bench.results import (FRONTENDS, LABEL, Results, med, or_dash, repo_relative,
                                 spread)


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
        lines += [f"| {k} | {spread(v, '.3f' if k.endswith('(s)') else '.1f', rng)} |"
                  for k, v in now.items()]
        return lines
    lines = [f"| ours | this run | baseline ({data['baseline']}) | ratio |", "|---|---|---|---|"]
    for k, v in now.items():
        fmt = ".3f" if k.endswith("(s)") else ".1f"
        b = base.get(k)
        ratio = (med(v) / med(b)) if b and med(b) and med(v) is not None else None
        lines.append(f"| {k} | {spread(v, fmt, rng)} | {spread(b or [], fmt, rng)} | "
                     f"{or_dash(ratio, '.2f')} |")
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
            f"| {p} | {spread(g('tok_s'), ',.0f', rng)} | {spread(g('req_s'), ',.0f', False)} "
            f"| {spread(g('server_cpu_s_per_1k_tok'), '.4f', rng)} | "
            f"{spread(g('server_cpu_ms_per_req'), '.3f', rng)} | "
            f"{spread([v * 100 for v in g('server_cpu_share')], '.0f', False)} % | "
            f"{spread([v * 100 for v in g('loadgen_cpu_share')], '.0f', False)} % |")
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
            ttft = (f"{spread(v(lambda r: r['ttft_ms']['p50']), '.1f', False)} / "
                    f"{spread(v(lambda r: r['ttft_ms']['p99']), '.1f', rng)}") if stream else "-"
            itl = (f"{spread(v(lambda r: r['itl_ms']['p50']), '.2f', False)} / "
                   f"{spread(v(lambda r: r['itl_ms']['p99']), '.1f', False)}") if stream else "-"
            busy = [r["core_busy"] for r in rs]
            busy_s = "/".join(f"{med(b[k] for b in busy):.0%}" for k in busy[0])
            errs = sum(r["errors"] + r["bad_token_counts"] for r in rs)
            out.append(
                f"| {p} | {LABEL[fe]} | {spread(v(lambda r: r['tok_s']), ',.0f', rng)} | "
                f"{spread(v(lambda r: r['req_s']), ',.0f', rng)} | "
                f"{spread(v(lambda r: r['frontend_cpu_s_per_1k_tok']), '.4f', rng)} | "
                f"{spread(v(lambda r: r.get('frontend_cpu_ms_per_req')), '.3f', rng)} | "
                f"{spread(v(lambda r: r['frontend_cpu_share'] * 100), '.0f', False)} % | "
                f"{ttft} | {itl} | {spread(v(lambda r: r.get('rss_peak_mb')), '.0f', False)} | "
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
        f0 = res.floor_ratios(p, f"{base}@0ms", key, fkey)
        fs = res.floor_ratios(p, f"{base}@{step}", key, fkey) if step != "0ms" else []
        t99 = (res.ratios("mock", p, lambda r: r["ttft_ms"]["p99"], ref)
               if info["stream"] else [])
        if not floors and not res.by.get(("mock", p, ref)):
            continue
        row = [spread(res.ratios("mock", p, lambda r: r["frontend_cpu_s_per_1k_tok"], ref),
                      '.3f', rng),
               spread(res.ratios("mock", p, lambda r: r.get("frontend_cpu_ms_per_req"), ref),
                      '.3f', rng),
               spread(res.ratios("mock", p, lambda r: r["tok_s"], ref), '.2f', rng),
               spread(res.ratios("mock", p, lambda r: r["req_s"], ref), '.2f', rng),
               *([spread(f0, '.2f', rng), spread(fs, '.2f', rng)] if floors else []),
               spread(t99, '.2f', rng)]
        out.append(f"| {p} | " + " | ".join(row) + " |")
    return out


def paced_section(data: dict, json_path: Path) -> list[str]:
    res = Results(data)
    m = data["machine"]
    a = data["args"]
    return [
        "## Engine-paced regime and request rate", "",
        f"Generated by `{data['command']}` (re-render with "
        f"`.venv/bin/python -m tools.bench.report {repo_relative(json_path)}`). "
        f"Raw results: [{Path(json_path).name}]({Path(json_path).name}).", "",
        prose.text("benchmarks-paced"),
        "### Targets", "", *targets.table("paced", res), "",
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
