"""docs/reliability.md, regenerated: the soak, chaos and fuzzing runs, one
table each.

Every run is one of the reliability tools (tools/soak.py, tools/chaos.py,
tools/fuzz.py) started with the arguments below on its own fresh stack; its
markdown section and JSON summary go to docs/reliability/, and the page is
assembled from the sections there (a run not done yet says so)::

    python -m tools.reliability                          # every run (about 90 minutes)
    python -m tools.reliability --only fuzz-mock soak-mock
    python -m tools.reliability --assemble               # the page from the stored sections

Exit status 0 when every run that ran passed.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import subprocess
import sys
import time

from harness import procs
from tools import prose

DOCS = procs.REPO_ROOT / "docs"
PIECES = DOCS / "reliability"
PAGE = DOCS / "reliability.md"

# name -> (module, arguments); what each run does: docs/prose/reliability-runs.md
RUNS: dict[str, tuple[str, list[str]]] = {
    "soak-mock": ("tools.soak", ["--engine", "mock", "--requests", "10000",
                                 "--concurrency", "32", "--seed", "1"]),
    "soak-real": ("tools.soak", ["--engine", "real", "--requests", "2000",
                                 "--concurrency", "8", "--max-tokens", "16", "--seed", "2"]),
    "chaos-engine-kill": ("tools.chaos", ["engine-kill", "--engine", "real",
                                          "--streams", "64"]),
    "chaos-frontend-kill": ("tools.chaos", ["frontend-kill", "--engine", "real",
                                            "--streams", "64"]),
    "chaos-engine-stall": ("tools.chaos", ["engine-stall", "--engine", "real",
                                           "--streams", "16"]),
    "chaos-idle-connections": ("tools.chaos", ["idle-connections", "--idle", "2000",
                                               "--streams", "500"]),
    "fuzz-mock": ("tools.fuzz", ["--engine", "mock", "--requests", "20000"]),
    "fuzz-real": ("tools.fuzz", ["--engine", "real", "--requests", "500",
                                 "--max-tokens-cap", "16"]),
    "fuzz-link-mock": ("tools.fuzz_link", ["--engine", "mock", "--frames", "50000"]),
    "fuzz-link-real": ("tools.fuzz_link", ["--engine", "real", "--frames", "20000",
                                           "--max-tokens", "64", "--streams", "4"]),
}
SECTIONS = [("Soak", ["soak-mock", "soak-real"]),
            ("Chaos", ["chaos-engine-kill", "chaos-frontend-kill", "chaos-engine-stall",
                       "chaos-idle-connections"]),
            ("Fuzzing", ["fuzz-mock", "fuzz-real", "fuzz-link-mock", "fuzz-link-real"])]


def run_one(name: str) -> bool:
    module, args = RUNS[name]
    PIECES.mkdir(parents=True, exist_ok=True)
    md, js = (str((PIECES / f"{name}.{ext}").relative_to(procs.REPO_ROOT))
              for ext in ("md", "json"))
    argv = [sys.executable, "-m", module, *args, "--markdown", md, "--json", js]
    print(f"reliability: {name}: {' '.join(argv[1:])}", file=sys.stderr, flush=True)
    code = git_describe()  # what the run's processes import
    started = time.monotonic()
    status = subprocess.run(argv, cwd=procs.REPO_ROOT, stdout=subprocess.DEVNULL).returncode
    took = time.monotonic() - started
    meta = {"name": name, "exit_status": status, "seconds": round(took),
            "finished": datetime.datetime.now().isoformat(timespec="seconds"),
            "code": code, "host": host()}
    (PIECES / f"{name}.meta.json").write_text(json.dumps(meta, indent=1) + "\n")
    print(f"reliability: {name}: exit {status} after {took:.0f} s", file=sys.stderr,
          flush=True)
    return status == 0


def git_describe() -> str:
    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=procs.REPO_ROOT, capture_output=True,
                              text=True).stdout.strip()

    dirty = git("status", "--porcelain", "--untracked-files=no", "--", "frontend", "protocol",
                "engine_core", "tools")
    return git("rev-parse", "--short", "HEAD") + (" (with uncommitted changes)" if dirty else "")


def host() -> str:
    return f"{os.cpu_count()} cores, {platform.python_implementation()} " \
           f"{platform.python_version()}, {platform.system()} {platform.release()}"


def assemble() -> str:
    parts = [prose.text("reliability-intro"), "## Summary\n", summary_table()]
    what_was_done = prose.sections("reliability-runs")
    for title, names in SECTIONS:
        parts.append(f"## {title}\n")
        for name in names:
            md, meta_path = PIECES / f"{name}.md", PIECES / f"{name}.meta.json"
            if not md.exists():
                parts.append(f"### {name}\n\nNot run yet: `python -m tools.reliability "
                             f"--only {name}`.\n")
                continue
            piece = md.read_text().replace(f"{procs.REPO_ROOT}/", "").rstrip("\n").split("\n")
            meta = json.loads(meta_path.read_text()) if meta_path.exists() else {}
            # the tool's own heading and command, then what was done, then its tables
            head, rest = piece[:4], piece[4:]
            stamp = (f"Run {meta['finished']} on code {meta['code']} ({meta['host']}), "
                     f"{meta['seconds']} s, exit status {meta['exit_status']}."
                     if meta else "")
            what = f"What was done: {what_was_done[name]}"
            parts.append("\n".join([*head, what, "", stamp, "", *rest]) + "\n")
    parts.append(prose.text("reliability-found"))
    return "\n".join(parts)


def summary_table() -> str:
    """One line per run: passed, and the figures the issue asks for."""
    def load(name: str) -> dict | None:
        path = PIECES / f"{name}.json"
        return json.loads(path.read_text()) if path.exists() else None

    def soak(s: dict) -> str:
        return (f"{s['requests']['main']:,} requests: {s['lost']} lost, {s['truncated']} "
                f"truncated, {s['leaked']['table']} leaked; RSS {s['rss']['growth_pct']:+.1f} %")

    def fuzz(s: dict) -> str:
        return (f"{s['requests']:,} requests over {s['routes']} routes: {s['server_errors']} "
                f"5xx, {s['bad_error_shapes']} 4xx not in OpenAI's shape; engine alive "
                f"{s['after']['engine_alive']}, idle {s['after']['idle']}")

    def fuzz_link(s: dict) -> str:
        f, c, a = s["frames"], s["clients"], s["after"]
        return (f"{sum(f.values()):,} rogue frames (handshake {f['handshake']:,}, input "
                f"{f['input']:,}, output {f['output']:,}): {c['completed']}/{c['requests']} "
                f"client requests completed, {sum(s['rejected'].values()):,} messages "
                f"rejected; /health not 200 {s['watch']['health_not_200']} times; frontend "
                f"alive {a['frontend_alive']}, engine alive {a['engine_alive']} and "
                f"attached {a['rank_serving']}")

    def stall(s: dict) -> str:
        if s["detector"]:
            return (f"SIGSTOP → /health 503 in {s['stop_to_health_503_s']} s, "
                    f"{s['streams_ended_with_error_and_done']}/{s['streams']} streams ended "
                    f"with an error; SIGCONT → 200 in {s['cont_to_health_200_s']} s")
        return (f"no stall detector yet: {s['streams_still_open']}/{s['streams']} streams hung "
                f"silently for {s['watched_s']:.0f} s, /health {s['health_while_stopped']}; "
                f"all completed after SIGCONT")

    figures = {
        "soak-mock": soak, "soak-real": soak, "fuzz-mock": fuzz, "fuzz-real": fuzz,
        "fuzz-link-mock": fuzz_link, "fuzz-link-real": fuzz_link,
        "chaos-engine-stall": stall,
        "chaos-engine-kill": lambda s: (
            f"{s['streams_ended_with_error_and_done']}/{s['streams']} streams ended with an "
            f"error and [DONE], kill → last end {s['kill_to_last_stream_end_s']} s, /health "
            f"{s['health_after_kill']}; restarted engine ready → first 200 "
            f"{s['engine_ready_to_first_200_s']} s (no frontend restart)"),
        "chaos-frontend-kill": lambda s: (
            f"kill → serving again {s['kill_to_serving_s']} s (new process → serving "
            f"{s['start_to_serving_s']} s, of which the re-attach {s['reattach_s']} s); "
            f"orphaned requests aborted: serving → engine idle "
            f"{s['serving_to_engine_idle_s']} s"),
        "chaos-idle-connections": lambda s: (
            f"{s['idle_connections']:,} idle + {s['silent_streams']} silent: reading TTFT "
            f"p50 ×{s['ttft_ratio_p50']}, p99 ×{s['ttft_ratio_p99']}; peak RSS "
            f"{s['alone (medians)']['rss_peak_mib']} → "
            f"{s['with idle and silent clients (medians)']['rss_peak_mib']} MiB"),
    }
    lines = ["| run | passed | figures |", "|---|---|---|"]
    for _, names in SECTIONS:
        for name in names:
            s = load(name)
            lines.append(f"| {name} | {'yes' if s['passed'] else '**no**'} | "
                         f"{figures[name](s)} |" if s else f"| {name} | not run | |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tools.reliability",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("--only", nargs="+", choices=list(RUNS), help="these runs only")
    p.add_argument("--assemble", action="store_true", help="no run: the page from the "
                                                          "stored sections")
    args = p.parse_args(argv)
    ok = True
    if not args.assemble:
        for name in args.only or list(RUNS):
            ok &= run_one(name)
    PAGE.write_text(assemble())
    print(f"reliability: wrote {PAGE}", file=sys.stderr)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
