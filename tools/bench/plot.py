"""The benchmark plot (docs/benchmarks.png): output tok/s and p99 TTFT against
concurrency, per frontend and engine."""

from __future__ import annotations

import statistics
from pathlib import Path

from tools.bench.results import ENGINE_TITLE, FRONTENDS, LABEL, Results


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
