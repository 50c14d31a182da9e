"""The "Targets" tables of docs/benchmarks.md: the issues' targets (targets.toml)
measured on a run's results, one row per target and point, with met or missed."""

from __future__ import annotations

import operator
import tomllib
from itertools import groupby
from pathlib import Path
from typing import Any, Callable

from tools.bench.results import Results, med, spread, tok_per_cpu_s

TARGETS = Path(__file__).with_name("targets.toml")
OPS: dict[str, Callable[[float, float], bool]] = {
    "<": operator.lt, "<=": operator.le, ">": operator.gt, ">=": operator.ge}


def table(name: str, res: Results) -> list[str]:
    """Table ``name`` of targets.toml: its header and the rows ``res`` has figures for."""
    spec = tomllib.loads(TARGETS.read_text())[name]
    lines = [spec["header"], "|---|---|---|"]
    for group, targets in groupby(spec["targets"], key=lambda t: t.get("group") or id(t)):
        targets = list(targets)
        for point in _ordered(res, targets[0].get("order", "run")):
            for target in targets:
                if _applies(target, res, point):
                    lines += _rows(target, res, point)
        for target in targets:
            if target["against"] == "startup":
                lines += _rows(target, res, None)
    return lines


def _ordered(res: Results, order: str) -> list[str]:
    if order == "concurrency":
        return [p for _, p in sorted((res.point_info[p]["concurrency"], p) for p in res.points)]
    return sorted(res.points) if order == "name" else list(res.points)


def _applies(target: dict, res: Results, point: str) -> bool:
    info = res.point_info[point]
    return (target["against"] != "startup"
            and point in target.get("points", [point])
            and point.startswith(target.get("prefix", ""))
            and point.endswith(target.get("suffix", ""))
            and info["stream"] == target.get("stream", info["stream"])
            and info["concurrency"] in target.get("concurrency", [info["concurrency"]]))


def _rows(target: dict, res: Results, point: str | None) -> list[str]:
    """One row per figure the target has on ``point``: per floor when against the floor."""
    get = _getter(target["metric"])
    against = target["against"]
    if against == "floor":
        measured = [(res.floor_ratios(point, fp, target["metric"], target["floor_metric"]),
                     label) for fp, label in target["floors"]]
    elif against == "ours":
        measured = [(res.values("mock", point, "ours", get), "")]
    elif against == "startup":
        measured = [([s.get(target["metric"]) for s in res.data["startup"]
                      if s["frontend"] == "ours" and s["engine"] == "mock"], "")]
    else:
        measured = [(res.ratios("mock", point, get, against), "")]
    rng = res.repeats > 1
    rows = []
    for values, label in measured:
        if not any(v is not None for v in values):
            continue
        m = med(values)
        also = (spread(res.ratios("mock", point, _getter(target["also"]), against),
                       target["fmt"], rng) if "also" in target else "")
        info = res.point_info.get(point, {})
        what = target["what"].format(point=point, concurrency=info.get("concurrency"),
                                     label=label)
        value = target["measured"].format(value=spread(values, target["fmt"], rng), also=also)
        met = OPS[target["op"]](m, target["goal"])
        status = "met" if met else target["missed"].format(share=m / target["goal"])
        rows.append(f"| {what} | {value} | {status} |")
    return rows


def _getter(metric: str) -> Callable[[dict], Any]:
    if metric == "tok_per_cpu_s":
        return tok_per_cpu_s

    def get(r: dict) -> Any:
        for key in metric.split("."):
            r = r[key]
        return r
    return get
