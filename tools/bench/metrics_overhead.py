"""What the /metrics bookkeeping costs on the hot path (engine step -> SSE).

Usage::

    .venv/bin/python -m tools.bench.metrics_overhead [--rounds 3] [--seconds 10]

For each round it starts a mock engine (``engine-core --mock``, step time 0)
and two frontends in turn on it -- one as shipped (metrics observer on), one
with ``--disable-log-stats`` (the fan-out table's observer is None) -- and
drives each with 64 concurrent streaming /v1/completions of 128 output tokens
(ignore_eos), back to back, for ``--seconds`` after a warm-up. It reports
output tokens/s and the frontend's CPU time per output token (from
/proc/PID/stat, which is less sensitive to other load on the host), per round
and as medians. First, ``micro``: the fan-out table alone in this process
(``Table.on_outputs`` per engine step with and without the observer), which a
busy host disturbs far less.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import tempfile
import time
from pathlib import Path

import aiohttp

from harness.engines import mock_engine_command
from harness.frontend import SERVED_NAME, frontend_command
from harness.models import tiny_model_dir
from harness.ports import HOST, free_port, free_port_triple
from harness.procs import Proc
from harness.state import SCHEDULER_STATS, NullEngine
from harness.waits import wait_healthy

MAX_MODEL_LEN = 4096


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def drive(url: str, pid: int, concurrency: int, tokens: int, warmup: float,
                seconds: float) -> dict:
    body = {"model": SERVED_NAME, "prompt": "benchmark prompt with a few words", "stream": True,
            "max_tokens": tokens, "ignore_eos": True}
    state = {"measuring": False, "done": 0, "stop": False}

    async def worker(session: aiohttp.ClientSession) -> None:
        while not state["stop"]:
            async with session.post(url + "/v1/completions", json=body) as r:
                assert r.status == 200, r.status
                tail = b""
                async for chunk in r.content.iter_any():
                    tail = (tail + chunk)[-64:]
                if not tail.endswith(b"data: [DONE]\n\n") or b'"error"' in tail:
                    raise RuntimeError(f"stream did not end cleanly: {tail!r}")
            if state["measuring"]:
                state["done"] += 1

    connector = aiohttp.TCPConnector(limit=concurrency)
    async with aiohttp.ClientSession(connector=connector) as session:
        tasks = [asyncio.create_task(worker(session)) for _ in range(concurrency)]
        await asyncio.sleep(warmup)
        state["measuring"], cpu0, t0 = True, cpu_seconds(pid), time.monotonic()
        await asyncio.sleep(seconds)
        state["measuring"], cpu1, t1 = False, cpu_seconds(pid), time.monotonic()
        done = state["done"]
        state["stop"] = True
        await asyncio.gather(*tasks)
    out_tokens = done * tokens  # streams finished inside the window, 128 tokens each
    return {"tokens_per_s": out_tokens / (t1 - t0),
            "cpu_us_per_token": 1e6 * (cpu1 - cpu0) / max(out_tokens, 1),
            "frontend_cpu": (cpu1 - cpu0) / (t1 - t0)}


def run_frontend(model: Path, engine_addr: str, extra: list[str], workdir: Path,
                 concurrency: int, tokens: int, warmup: float, seconds: float) -> dict:
    port = free_port()
    proc = Proc("frontend", frontend_command(engine_addr, model, port, "--log-level", "warning",
                                             *extra, state_file=workdir / "engine.state"),
                None, workdir / f"frontend-{port}.log")
    url = f"http://{HOST}:{port}"
    try:
        wait_healthy(url, [proc], 60)
        return asyncio.run(drive(url, proc.pid, concurrency, tokens, warmup, seconds))
    finally:
        proc.stop(30)


def micro(concurrency: int, tokens: int, repeats: int) -> dict[str, float]:
    """The fan-out table alone, in this process, in microseconds per output token:

    * ``hooks``: the observer's own work (on_submit, on_step per engine step,
      on_choice_finished, on_release) for ``concurrency`` streaming choices of
      ``tokens`` tokens, one token each per step -- timed directly, so other
      load on the host hardly moves it;
    * ``table_none`` / ``table_metrics``: ``Table.on_outputs`` for the same
      steps (routing, detokenization, deltas) without and with the observer.

    Each figure is the best of ``repeats`` runs.
    """
    from frontend.choices import Group
    from frontend.fanout import Table
    from frontend.model import load_model_info
    from frontend.openai.completions import CompletionRequest
    from frontend.openai.sampling import build_sampling_params
    from frontend.ops.stats_recorder import StatsRecorder
    from frontend.ops.vllm_metrics import GENERATION_TOKENS
    from protocol import wire
    from protocol.sampling import ModelLimits

    model = load_model_info(str(tiny_model_dir()), served_names=[SERVED_NAME])
    limits = ModelLimits(vocab_size=model.vocab_size, max_model_len=MAX_MODEL_LEN,
                         max_logprobs=20)
    req = CompletionRequest(prompt="x", max_tokens=tokens, ignore_eos=True, stream=True)
    params = build_sampling_params(model, req.to_sampling_fields(), max_tokens=tokens,
                                   stream=True)
    prompt = [10 + j for j in range(16)]
    token_ids = [100 + (7 * i) % 900 for i in range(tokens)]
    length = int(wire.FinishReason.LENGTH)
    # What a vLLM 0.32 engine with log stats sends: a SchedulerStats map on
    # every step, prefill stats and QUEUED/SCHEDULED events on first outputs.
    stats = {**SCHEDULER_STATS, "num_running_reqs": concurrency, "kv_cache_usage": 0.1,
             "num_kv_fetch_reqs_by_stage": {"waiting_to_start": 0, "in_progress": 0,
                                            "completed_waiting": 0}}
    prefill = {"num_prompt_tokens": len(prompt), "num_computed_tokens": len(prompt),
               "num_cached_tokens": 0, "num_local_cached_tokens": 0,
               "num_external_cached_tokens": 0, "num_cache_creation_tokens": 0}

    def output(rid: str, i: int, tok: int, t0: float) -> wire.EngineCoreOutput:
        out = wire.EngineCoreOutput(rid, [tok], finish_reason=length
                                    if i == tokens - 1 else None)
        if i == 0:
            out.prefill_stats = prefill
            out.events = [{"type": 1, "timestamp": t0}, {"type": 2, "timestamp": t0}]
        return out

    def scenario(observer):
        table = Table(NullEngine(), model, lambda: limits, observer=observer)
        groups = []
        for g in range(concurrency):
            group = Group(f"cmpl-{g}", stream=True)
            table.add_choice(group, index=0, prompt_index=0, prompt_token_ids=prompt,
                             params=params)
            groups.append(group)
        ids = [grp.choices[0].engine_id for grp in groups]
        t0 = time.monotonic()
        steps = [wire.decode_step(wire.encode_outputs(wire.EngineCoreOutputs(
            outputs=[output(rid, i, tok, t0) for rid in ids],
            scheduler_stats=stats, timestamp=t0 + i * 0.01)))
            for i, tok in enumerate(token_ids)]
        return table, groups, steps

    def table_run(observer) -> float:
        table, groups, steps = scenario(observer)
        for grp in groups:
            table.submit(grp)
        t0 = time.perf_counter()
        for outs in steps:
            table.on_outputs([outs])
            for grp in groups:  # what each stream handler does when woken
                grp.take()
        for grp in groups:
            table.release(grp)
        elapsed = time.perf_counter() - t0
        assert len(table) == 0
        return 1e6 * elapsed / (concurrency * tokens)

    _, groups, steps = scenario(None)
    for grp in groups:
        grp.choices[0].finish_reason = "length"

    def hooks_run() -> float:
        obs = StatsRecorder(lambda: MAX_MODEL_LEN)
        obs.rank(0)  # once per process (the first message), not per request
        t0 = time.perf_counter()
        for grp in groups:
            obs.on_submit(grp)
        for outs in steps:
            obs.on_step(outs)
        for grp in groups:
            obs.on_choice_finished(grp.choices[0])
            obs.on_release(grp)
        elapsed = time.perf_counter() - t0
        assert obs.rank(0).counters[GENERATION_TOKENS] == concurrency * tokens
        return 1e6 * elapsed / (concurrency * tokens)

    best = {"hooks": float("inf"), "table_none": float("inf"),
            "table_metrics": float("inf")}
    for _ in range(repeats):
        best["hooks"] = min(best["hooks"], hooks_run())
        best["table_none"] = min(best["table_none"], table_run(None))
        best["table_metrics"] = min(best["table_metrics"],
                                    table_run(StatsRecorder(lambda: MAX_MODEL_LEN)))
    return best


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--micro-only", action="store_true",
                   help="only the in-process fan-out table measurement")
    p.add_argument("--micro-repeats", type=int, default=30)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--seconds", type=float, default=10.0)
    p.add_argument("--warmup", type=float, default=3.0)
    p.add_argument("--concurrency", type=int, default=64)
    p.add_argument("--tokens", type=int, default=128)
    p.add_argument("--step-time", type=float, default=0.0,
                   help="mock engine seconds per step: 0 saturates the frontend (tokens/s); "
                        "e.g. 0.01 paces it, so CPU per token is compared at equal batching")
    args = p.parse_args()
    try:
        import uvloop
        uvloop.install()
    except ImportError:
        pass
    m = micro(args.concurrency, args.tokens, args.micro_repeats)
    print(f"per output token, best of {args.micro_repeats}: observer hooks alone "
          f"{m['hooks']:.3f} us; Table.on_outputs observer None {m['table_none']:.2f} us, "
          f"metrics on {m['table_metrics']:.2f} us", flush=True)
    if args.micro_only:
        return
    model = tiny_model_dir()
    variants = {"metrics on": [], "observer None (--disable-log-stats)": ["--disable-log-stats"]}
    results: dict[str, list[dict]] = {name: [] for name in variants}
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        engine_addr = f"tcp://{HOST}:{free_port_triple()}"
        engine = Proc("mock engine", mock_engine_command(
            engine_addr, model, "--max-model-len", str(MAX_MODEL_LEN),
            "--max-num-seqs", str(max(args.concurrency, 256)), "--step-time", str(args.step_time)),
            None, workdir / "engine.log")
        try:
            for rnd in range(args.rounds):
                order = list(variants.items())
                if rnd % 2:
                    order.reverse()  # alternate, so drift on the host evens out
                for name, extra in order:
                    r = run_frontend(model, engine_addr, extra, workdir, args.concurrency,
                                     args.tokens, args.warmup, args.seconds)
                    results[name].append(r)
                    print(f"round {rnd + 1} {name:<36} {r['tokens_per_s']:>8.0f} tok/s "
                          f"{r['cpu_us_per_token']:>6.1f} frontend CPU-us/token "
                          f"(frontend at {r['frontend_cpu']:.0%} of a core)", flush=True)
        finally:
            engine.stop(10)
    print()
    summary = {}
    for name, rs in results.items():
        tps = [r["tokens_per_s"] for r in rs]
        cpu = [r["cpu_us_per_token"] for r in rs]
        summary[name] = (statistics.median(tps), max(tps), statistics.median(cpu), min(cpu))
        print(f"{name:<36} median {summary[name][0]:>7.0f} tok/s, best {max(tps):>7.0f} "
              f"tok/s; frontend CPU-us/token median {summary[name][2]:.1f}, "
              f"best {min(cpu):.1f}")
    on, off = summary.values()
    print(f"metrics on vs off: tokens/s median {100 * (on[0] / off[0] - 1):+.1f} %, "
          f"best {100 * (on[1] / off[1] - 1):+.1f} %; CPU per token median "
          f"{100 * (on[2] / off[2] - 1):+.1f} %, best {100 * (on[3] / off[3] - 1):+.1f} %")
    print(f"(observer hooks measured alone: {m['hooks']:.3f} us per token, "
          f"{100 * m['hooks'] / off[3]:.1f} % of the best frontend CPU per token)")


if __name__ == "__main__":
    main()
