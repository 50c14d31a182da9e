"""Benchmark results (JSON from tools.bench.run) read for the report: per point,
frontend and repeat, with the ratios between frontends and the number formats
of the tables."""

from __future__ import annotations

import statistics
from collections import defaultdict
from pathlib import Path
from typing import Any, Callable, Iterable

FRONTENDS = ("ours", "rust", "vllm")
LABEL = {"ours": "ours", "rust": "vLLM Rust", "vllm": "vLLM Python"}
REFERENCES = ("rust", "vllm")  # vLLM's frontends, in the order of the tables
ENGINE_TITLE = {"mock": "mock engine (frontend-bound)",
                "real": "real engine (tiny model, vLLM CPU EngineCore)"}


def med(values: Iterable[float | None]) -> float | None:
    vals = [v for v in values if v is not None]
    return statistics.median(vals) if vals else None


def spread(values: list[float | None], fmt: str, show_range: bool) -> str:
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

    def floor_ratios(self, point: str, floor_point: str, key: str,
                     floor_key: str) -> list[float]:
        """ours / the trivial server's floor (``floor_point``) of the same repeat."""
        floors = {(r["repeat"], r["point"]): r for r in self.data.get("floor", [])}
        out = []
        for r in self.by.get(("mock", point, "ours"), []):
            f = floors.get((r["repeat"], floor_point))
            if f and r.get(key) and f.get(floor_key):
                out.append(r[key] / f[floor_key])
        return out


def tok_per_cpu_s(r: dict) -> float | None:
    v = r.get("frontend_cpu_s_per_1k_tok")
    return 1000.0 / v if v else None


def or_dash(v: Any, fmt: str) -> str:
    return "-" if v is None else format(v, fmt)


def repo_relative(path: Path) -> str:
    root = Path(__file__).resolve().parents[2]
    try:
        return str(Path(path).resolve().relative_to(root))
    except ValueError:
        return str(path)
