"""Data parallel on a multi-turn chat workload: prefix-cache reuse and balance.

Usage::

    .venv/bin/python -m tools.bench.dp_prefix [--conversations 32] [--turns 6]
        [--system-words 300] [--out docs/dp_prefix.json]

Four setups, one after another on real tiny-model engines (each fresh):

* ``single``: one engine and our frontend (the reuse a conversation can get);
* ``ours``: two ranks (one ``engine-core`` launcher each) and our frontend with
  ``--data-parallel-size 2`` and prefix-aware routing (the default);
* ``ours-load``: the same with ``--dp-routing load`` (vLLM-like balancing, no
  prefix awareness);
* ``vllm``: vLLM's own server, ``vllm serve --data-parallel-size 2`` (its own
  engines and its DPLB balancer).

The workload: ``--conversations`` chats of ``--turns`` turns, interleaved
(turn t of every conversation, then turn t+1), each with a system prompt of its
own of ``--system-words`` words; each turn's prompt is the conversation so far
(greedy replies of ``--reply-tokens`` tokens). Then, with two engines,
``--uniform-requests`` independent completions (uniform load: how evenly the
requests spread). Figures, from each server's
``/metrics``: prefix-cache queries and hits per engine
(``vllm:prefix_cache_queries_total`` / ``vllm:prefix_cache_hits_total``, which
both frontends export per engine from the engines' scheduler stats), prompt
tokens the engines recomputed (queries - hits), hit rate, and requests per
engine (``vllm:request_success_total``). The replies of every setup are
compared with the single engine's (greedy: identical).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import sys
import time
from pathlib import Path

import aiohttp
from prometheus_client.parser import text_string_to_metric_families

from engine_core import launcher
from harness import procs
from harness.engines import cpu_flags, real_engine_command
from harness.frontend import SERVED_NAME, frontend_command
from harness.models import tiny_model_dir
from harness.ports import HOST, free_port, free_port_triple
from harness.waits import wait_healthy
from tools.bench.prompts import WORDS

MODEL_ARGS = ["--max-model-len", "2048", "--dtype", "float32"]  # the model's positions
SERVED = SERVED_NAME
READY_TIMEOUT_S = 900


def cpu_env() -> dict[str, str]:
    """engine-core's CPU environment for vLLM's own server, but with engine
    processes (its DP ranks need them) and unpinned threads."""
    env = dict(launcher.OFFLINE_ENV)
    if launcher.engine_runs_on_cpu():
        env |= {**launcher.CPU_ENV, "VLLM_CPU_OMP_THREADS_BIND": "nobind"}
        del env["VLLM_ENABLE_V1_MULTIPROCESSING"]
    return env


# ------------------------------------------------------------------ setups
class Setup:
    """Engines and a server on one URL; ``stop`` ends them all."""

    def __init__(self, name: str, logdir: Path) -> None:
        self.name, self.logdir = name, logdir
        self.procs: list[procs.Proc] = []
        self.url = ""

    def start(self, name: str, argv: list[str], env: dict | None = None) -> procs.Proc:
        proc = procs.Proc(name, argv, None, self.logdir / f"{self.name}-{name}.log", env)
        self.procs.append(proc)
        return proc

    def stop(self) -> None:
        for proc in reversed(self.procs):
            proc.stop()


def start_ours(name: str, model: Path, logdir: Path, ranks: int, *frontend_args: str
               ) -> Setup:
    setup = Setup(name, logdir)
    port = free_port_triple()
    addr = f"tcp://{HOST}:{port}"
    http = free_port()
    setup.start("frontend", frontend_command(addr, model, http, "--data-parallel-size",
                                             str(ranks), *frontend_args))
    for rank in range(ranks):
        dp = (["--data-parallel-size", str(ranks), "--data-parallel-size-local", "1",
               "--data-parallel-start-rank", str(rank)] if ranks > 1 else [])
        setup.start(f"rank{rank}", real_engine_command(model, addr, *MODEL_ARGS, *dp))
    setup.url = f"http://{HOST}:{http}"
    return setup


def start_vllm(model: Path, logdir: Path, ranks: int) -> Setup:
    setup = Setup("vllm", logdir)
    http = free_port()
    setup.start("vllm-serve", [str(procs.BIN_DIR / "vllm"), "serve", str(model),
                               "--host", HOST, "--port", str(http),
                               "--served-model-name", SERVED, *MODEL_ARGS, *cpu_flags(),
                               "--data-parallel-size", str(ranks)], env=cpu_env())
    setup.url = f"http://{HOST}:{http}"
    return setup


# ------------------------------------------------------------------ workload
def conversations(count: int, system_words: int, turn_words: int, seed: int
                  ) -> list[tuple[str, list[str]]]:
    rng = random.Random(seed)
    words = [w for w in WORDS]

    def text(n: int) -> str:
        return " ".join(rng.choice(words) for _ in range(n))
    return [(f"You are assistant {c}. " + text(system_words), [text(turn_words)
                                                            for _ in range(64)])
            for c in range(count)]


async def run_workload(url: str, convs, turns: int, reply_tokens: int, concurrency: int
                       ) -> list[list[str]]:
    """Turn t of every conversation (``concurrency`` at a time), then turn t+1."""
    history = [[{"role": "system", "content": system}] for system, _ in convs]
    replies: list[list[str]] = [[] for _ in convs]
    limit = asyncio.Semaphore(concurrency)
    async with aiohttp.ClientSession() as session:
        async def turn(c: int, t: int) -> None:
            messages = history[c] + [{"role": "user", "content": convs[c][1][t]}]
            async with limit:
                async with session.post(url + "/v1/chat/completions", json={
                        "model": SERVED, "messages": messages, "max_tokens": reply_tokens,
                        "temperature": 0}) as r:
                    body = await r.json()
            if r.status != 200:
                raise RuntimeError(f"{url}: {r.status} {body}")
            reply = body["choices"][0]["message"]["content"]
            history[c] = messages + [{"role": "assistant", "content": reply}]
            replies[c].append(reply)

        for t in range(turns):
            await asyncio.gather(*(turn(c, t) for c in range(len(convs))))
    return replies


async def run_uniform(url: str, requests: int, concurrency: int, seed: int) -> None:
    """Independent short completions, every prompt its own: the balance figure."""
    rng = random.Random(seed)
    limit = asyncio.Semaphore(concurrency)
    async with aiohttp.ClientSession() as session:
        async def one(i: int) -> None:
            prompt = f"request {i}: " + " ".join(rng.choice(WORDS) for _ in range(20))
            async with limit:
                async with session.post(url + "/v1/completions", json={
                        "model": SERVED, "prompt": prompt, "max_tokens": 16,
                        "temperature": 0}) as r:
                    if r.status != 200:
                        raise RuntimeError(f"{url}: {r.status} {await r.text()}")
        await asyncio.gather(*(one(i) for i in range(requests)))


def scrape(url: str) -> dict:
    import urllib.request
    with urllib.request.urlopen(url + "/metrics", timeout=10) as r:
        text = r.read().decode()
    per_engine: dict[str, dict[str, float]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            key = {"vllm:prefix_cache_queries_total": "queries",
                   "vllm:prefix_cache_hits_total": "hits",
                   "vllm:request_success_total": "requests",
                   "vllm:prompt_tokens_total": "prompt_tokens"}.get(sample.name)
            if key is None:
                continue
            engine = per_engine.setdefault(sample.labels.get("engine", "0"),
                                           dict.fromkeys(("queries", "hits", "requests",
                                                          "prompt_tokens"), 0.0))
            engine[key] += sample.value
    return per_engine


def figures(per_engine: dict) -> dict:
    queries = sum(e["queries"] for e in per_engine.values())
    hits = sum(e["hits"] for e in per_engine.values())
    requests = [e["requests"] for e in per_engine.values()]
    return {"queries": queries, "hits": hits, "recomputed": queries - hits,
            "hit_rate": hits / queries if queries else 0.0,
            "requests_per_engine": requests,
            "busiest_vs_quietest": (max(requests) / min(requests)
                                    if requests and min(requests) else None),
            "per_engine": per_engine}


def measure(setup: Setup, convs, args) -> dict:
    try:
        started = time.monotonic()
        wait_healthy(setup.url, setup.procs, READY_TIMEOUT_S, poll=0.5)
        ready_s = time.monotonic() - started
        t0 = time.monotonic()
        replies = asyncio.run(run_workload(setup.url, convs, args.turns, args.reply_tokens,
                                           args.concurrency))
        elapsed = time.monotonic() - t0
        time.sleep(1.0)  # the last steps' stats
        per_engine = scrape(setup.url)
        result = figures(per_engine)
        result |= {"ready_s": round(ready_s, 1), "workload_s": round(elapsed, 1),
                   "replies": replies}
        if len(per_engine) > 1 and args.uniform_requests:
            asyncio.run(run_uniform(setup.url, args.uniform_requests, args.concurrency,
                                    args.seed))
            time.sleep(1.0)
            after = scrape(setup.url)
            split = [after[e]["requests"] - per_engine[e]["requests"] for e in sorted(after)]
            result["uniform_requests_per_engine"] = split
            result["uniform_busiest_vs_quietest"] = (max(split) / min(split)
                                                     if min(split) else None)
        print(f"{setup.name}: hit rate {result['hit_rate']:.3f}, recomputed "
              f"{result['recomputed']:.0f} of {result['queries']:.0f} prompt tokens, "
              f"requests per engine {result['requests_per_engine']}, uniform load "
              f"{result.get('uniform_requests_per_engine')}", file=sys.stderr)
        return result
    finally:
        setup.stop()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--conversations", type=int, default=32)
    p.add_argument("--turns", type=int, default=6)
    p.add_argument("--system-words", type=int, default=300)
    p.add_argument("--turn-words", type=int, default=30)
    p.add_argument("--reply-tokens", type=int, default=24)
    p.add_argument("--concurrency", type=int, default=8)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--uniform-requests", type=int, default=512,
                   help="then this many independent completions: requests per engine")
    p.add_argument("--setups", default="single,ours,ours-load,vllm")
    p.add_argument("--out", type=Path, default=None, help="write the figures as JSON")
    args = p.parse_args()
    model = tiny_model_dir()
    logdir = Path(procs.REPO_ROOT / "build" / "dp-prefix-logs")
    logdir.mkdir(parents=True, exist_ok=True)
    convs = conversations(args.conversations, args.system_words, args.turn_words, args.seed)
    makers = {
        "single": lambda: start_ours("single", model, logdir, 1),
        "ours": lambda: start_ours("ours", model, logdir, 2),
        "ours-load": lambda: start_ours("ours-load", model, logdir, 2, "--dp-routing", "load"),
        "vllm": lambda: start_vllm(model, logdir, 2),
    }
    results = {}
    for name in args.setups.split(","):
        for attempt in (1, 2):
            try:
                results[name] = measure(makers[name](), convs, args)
                break
            except RuntimeError as e:  # a free port taken meanwhile by another program
                if attempt == 2 or "address already in use" not in str(e):
                    raise
                print(f"{name}: a port was taken, starting again", file=sys.stderr)
    reference = results.get("single", {}).get("replies")
    for name, result in results.items():
        replies = result.pop("replies")
        result["replies_equal_single"] = None if reference is None else replies == reference
    report = {"workload": vars(args) | {"out": str(args.out)}, "results": results}
    if "vllm" in results and "ours" in results:
        report["recomputed_ours_vs_vllm"] = (results["ours"]["recomputed"]
                                             / results["vllm"]["recomputed"])
    if "single" in results and "ours" in results:
        report["hit_rate_ours_minus_single"] = (results["ours"]["hit_rate"]
                                                - results["single"]["hit_rate"])
    text = json.dumps(report, indent=1, default=str)
    if args.out:
        args.out.write_text(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
