"""Parity with vLLM's own API server: ``/metrics`` after the same workload.

vLLM 0.32's unmodified ``vllm serve`` (fixture ``vllm_frontend``, on its own
real engine) and our frontend (fixture ``frontend``, on the session's real
engine; same model and settings) get the same requests, one at a time, in the
same order. Then, over the ``vllm:*`` families of both ``/metrics`` bodies:

* the same families, each with the same type, HELP text, label names and
  histogram bucket bounds;
* counters: what the workload added is equal, exactly (both servers have
  served other tests before, so each side is compared with its own scrape
  from before the workload);
* histograms: what the workload added to each ``_count`` is equal (the
  values are clock readings of two different processes), or to ``_sum`` for
  ``COMPARED_BY_SUM``;
* gauges: equal once both are idle;
* ``vllm:cache_config_info``: ours states exactly the labels vLLM's API server
  takes from the engines' ready responses (``_apply_ready_response`` in vLLM's
  source), with vLLM's values. vLLM's other labels are its own command line's
  engine settings, some rewritten for the host (its CPU platform sets
  ``mamba_ssm_cache_dtype`` float32 where the CPU has AVX-512 BF16): nothing
  a frontend is told, so ours leaves them out. vLLM's values come from its
  running server, never from a constant. Given the same engine cache flags
  on the command line, both state them alike (a test of its own, on the
  mock engine: vLLM's API server takes these labels from its command line,
  not from the engine).

The workload covers finish by length, by EOS and by stop string, n > 1,
batch prompts, chat, streaming, /inference/v1/generate, an omitted max_tokens,
and a prompt long enough (two 128-token blocks on the CPU engine) that its
second sending hits the prefix cache.
"""

from __future__ import annotations

import ast
import importlib.util
import random
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from harness.engine_harness import spawn_mock
from harness.ports import HOST, free_port
from harness.vllm_server import VllmFrontend
from tests.support.exposition import Family, parse
from tests.support.http_client import get, post

pytestmark = [pytest.mark.real_engine, pytest.mark.vllm_frontend]

# One observation per engine message with outputs: how many messages depends
# on how the engine happened to batch the requests of an n > 1 or batch
# request (their ADDs may land in one step or two), on either side. Their sum
# (prompt tokens computed + tokens generated) does not.
COMPARED_BY_SUM = {"vllm:iteration_tokens_total"}
CACHE_CONFIG = "vllm:cache_config_info"


def labels_from_ready_responses() -> set[str]:
    """The CacheConfig fields that vLLM's API server sets from the engines'
    ready responses: ``cache_config.<field> = ...`` in ``_apply_ready_response``."""
    path = Path(importlib.util.find_spec("vllm").origin).parent / "v1/engine/core_client.py"
    function = next(node for node in ast.walk(ast.parse(path.read_text()))
                    if isinstance(node, ast.FunctionDef)
                    and node.name == "_apply_ready_response")
    fields = set()
    for node in ast.walk(function):
        for target in node.targets if isinstance(node, ast.Assign) else ():
            owner = getattr(target, "value", None)
            if isinstance(target, ast.Attribute) and "cache_config" in (
                    getattr(owner, "attr", None), getattr(owner, "id", None)):
                fields.add(target.attr)
    return fields


def cache_config_problems(ours: Family, theirs: Family) -> list[str]:
    """Ours states the labels that come from the engines, with vLLM's values."""
    known = labels_from_ready_responses() | {"engine"}
    assert "num_gpu_blocks" in known and len(known) >= 5, known  # (the source still says so)
    problems = []
    if ours.label_names != known:
        problems.append(f"{CACHE_CONFIG}: ours labels {sorted(ours.label_names)}, known from "
                        f"the engines: {sorted(known)}")
    theirs_ours_labels = {(name, frozenset((k, v) for k, v in labels if k in known)): value
                          for (name, labels), value in theirs.samples.items()}
    if ours.samples != theirs_ours_labels:
        problems.append(f"{CACHE_CONFIG}: ours {ours.samples}, vLLM's (the same labels) "
                        f"{theirs_ours_labels}")
    if (ours.type, ours.help) != (theirs.type, theirs.help):
        problems.append(f"{CACHE_CONFIG}: ours {(ours.type, ours.help)}, vLLM's "
                        f"{(theirs.type, theirs.help)}")
    return problems


def workload(url: str, long_prompt: list[int]) -> None:
    def ok(path: str, body: dict) -> None:
        reply = post(url, path, body)
        assert reply.status == 200, (path, reply.status, reply.body[:500])

    cmpl = "/v1/completions"
    ok(cmpl, {"model": "tiny", "prompt": "Hello", "max_tokens": 8, "temperature": 0})
    ok(cmpl, {"model": "tiny", "prompt": "1 2 3 4", "max_tokens": 20, "temperature": 0})
    ok(cmpl, {"model": "tiny", "prompt": "Hello", "max_tokens": 16, "temperature": 0,
              "stop": ["watches"]})
    ok(cmpl, {"model": "tiny", "prompt": "Seeded", "n": 2, "max_tokens": 5, "seed": 7,
              "temperature": 1.0, "ignore_eos": True})
    ok(cmpl, {"model": "tiny", "prompt": ["Hi", "The quick brown fox"], "max_tokens": 4,
              "temperature": 0, "ignore_eos": True})
    ok(cmpl, {"model": "tiny", "prompt": "Stream me", "max_tokens": 6, "temperature": 0,
              "ignore_eos": True, "stream": True})
    ok(cmpl, {"model": "tiny", "prompt": [9] * 1012, "temperature": 0})
    ok("/v1/chat/completions", {"model": "tiny", "max_tokens": 6, "temperature": 0,
                                "messages": [{"role": "user", "content": "Hi there"}]})
    ok("/inference/v1/generate", {"model": "tiny", "token_ids": [1, 468, 995],
                                  "sampling_params": {"temperature": 0, "max_tokens": 3}})
    for _ in range(2):
        ok(cmpl, {"model": "tiny", "prompt": long_prompt, "max_tokens": 3, "temperature": 0})


def scrape(url: str) -> dict[str, Family]:
    reply = get(url, "/metrics")
    assert reply.status == 200
    return parse(reply.body.decode())


def wait_idle(url: str, timeout: float = 60.0) -> dict[str, Family]:
    """Until the scheduler gauges say the engine has nothing left."""
    deadline = time.monotonic() + timeout
    while True:
        families = scrape(url)
        busy = families["vllm:num_requests_running"].total() + \
            families["vllm:num_requests_waiting"].total()
        if not busy:
            return families
        assert time.monotonic() < deadline, f"{url} not idle"
        time.sleep(0.2)


def added(before: Family | None, after: Family, suffix: str = "") -> dict:
    """Per child: what the workload added to ``name + suffix`` samples."""
    out = {}
    for (name, labels), value in after.samples.items():
        if name == after.name + suffix:
            prior = before.samples.get((name, labels), 0.0) if before else 0.0
            out[labels] = value - prior
    return out


def test_metrics_equal_vllm_after_the_same_workload(vllm_frontend, frontend):
    long_prompt = [random.Random(time.time_ns()).randrange(100, 900) for _ in range(300)]
    sides = {}
    for name, url in (("vllm", vllm_frontend.url), ("ours", frontend.url)):
        before = wait_idle(url)
        workload(url, long_prompt)
        sides[name] = (before, wait_idle(url))
    (v_before, theirs), (o_before, ours) = sides["vllm"], sides["ours"]

    problems = differences(o_before, ours, v_before, theirs)
    assert not problems, "\n".join(problems)

    # The workload reached the rules it is meant to cover.
    def ours_added(name: str, **labels: str) -> float:
        want = set(labels.items())
        return sum(v for lbl, v in added(o_before.get(name), ours[name], "_total").items()
                   if want <= lbl)

    assert ours_added("vllm:request_success") == 13  # engine requests
    assert ours_added("vllm:request_success", finished_reason="stop") == 2  # EOS, stop string
    assert ours_added("vllm:prefix_cache_hits") >= 256


def differences(o_before: dict[str, Family], ours: dict[str, Family],
                v_before: dict[str, Family], theirs: dict[str, Family]) -> list[str]:
    """Where our /metrics and vLLM's differ, after the same workload (the rules
    of the module docstring)."""
    assert sorted(ours) == sorted(theirs)
    problems = []
    for name, t in theirs.items():
        o = ours[name]
        if name == CACHE_CONFIG:
            problems += cache_config_problems(o, t)
            continue
        if (o.type, o.help, o.label_names, o.bounds) != (t.type, t.help, t.label_names,
                                                         t.bounds):
            problems.append(f"{name}: ours {(o.type, o.help, sorted(o.label_names), o.bounds)}"
                            f" vLLM's {(t.type, t.help, sorted(t.label_names), t.bounds)}")
            continue
        if t.type == "counter":
            o_added = added(o_before.get(name), o, "_total")
            t_added = added(v_before.get(name), t, "_total")
            if o_added != t_added:
                problems.append(f"{name}: ours added {o_added}, vLLM's {t_added}")
        elif t.type == "histogram":
            suffix = "_sum" if name in COMPARED_BY_SUM else "_count"
            o_added = added(o_before.get(name), o, suffix)
            t_added = added(v_before.get(name), t, suffix)
            if o_added != t_added:
                problems.append(f"{name}: ours observed {o_added}, vLLM's {t_added}")
        elif t.samples != o.samples:  # gauges, at idle
            problems.append(f"{name}: ours {o.samples}, vLLM's {t.samples}")
    return problems


# Engine cache flags, as in a copied `vllm serve` line; none is vLLM's default,
# and --block-size is one the engines' ready responses override.
CACHE_FLAGS = ("--gpu-memory-utilization", "0.5", "--no-enable-prefix-caching",
               "--prefix-caching-hash-algo", "sha256_cbor", "--block-size", "32")


@dataclass
class MockAsEngine:
    """What VllmFrontend needs of its engine, for a mock engine."""
    name = "the mock engine"
    handshake_addr: str
    log_path: Path
    proc: subprocess.Popen | None = None

    def log_tail(self) -> str:
        return self.log_path.read_text(errors="replace")[-3000:]


@pytest.fixture
def vllm_with_cache_flags(tiny_model_dir, tmp_path):
    """vLLM's API server given CACHE_FLAGS, on the mock engine."""
    engine = MockAsEngine(f"tcp://{HOST}:{free_port()}", tmp_path / "mock.log")
    server = VllmFrontend(engine, tiny_model_dir, tmp_path / "vllm-serve.log", *CACHE_FLAGS)
    engine.proc, _ = spawn_mock(engine.handshake_addr, engine.log_path,
                                "--model", str(tiny_model_dir))
    try:
        yield server
    finally:
        server.stop()
        engine.proc.terminate()
        engine.proc.wait(15)


def test_cache_config_info_states_the_cache_flags_as_vllm_does(vllm_with_cache_flags,
                                                              start_ops_stack):
    """The same cache flags to vLLM's API server and to ours, each on a mock
    engine (the same ready response): every label ours states, vLLM states
    with the same value: the flags' values, and the engine's block size."""
    ours = start_ops_stack(*CACHE_FLAGS)
    [(_, o_labels)] = scrape(ours.url)[CACHE_CONFIG].samples
    [(_, t_labels)] = scrape(vllm_with_cache_flags.url)[CACHE_CONFIG].samples
    ours_labels, theirs = dict(o_labels), dict(t_labels)
    assert set(ours_labels) == labels_from_ready_responses() | {
        "engine", "gpu_memory_utilization", "enable_prefix_caching",
        "prefix_caching_hash_algo"}, ours_labels
    assert (theirs["gpu_memory_utilization"], theirs["enable_prefix_caching"],
            theirs["prefix_caching_hash_algo"]) == ("0.5", "False", "sha256_cbor")  # not defaults
    assert theirs["block_size"] != "32"  # the engine's, as ours
    assert ours_labels == {k: theirs[k] for k in ours_labels}
