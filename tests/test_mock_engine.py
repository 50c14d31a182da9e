"""The mock engine speaks vLLM 0.32's engine protocol and fails the way it does.

Each test starts ``python -m engine_core.mock`` against a frontend-side harness
(harness/engine_harness.py; for several ranks or clients
tests/support/mock_ranks.py). The last test attaches vLLM's own Python API
server to the mock: the proof that what the mock sends is what vLLM accepts.
"""

from __future__ import annotations

import ast
import importlib.util
import json
import math
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import msgspec
import pytest
from tokenizers import Tokenizer

from engine_core.mock.cli import parse_args
from engine_core.mock_control import MockControl, MockControlError
from harness.engine_harness import IDENTITY, make_request, spawn_mock
from harness.ports import free_port
from harness.waits import wait_for
from protocol import handshake
from protocol.sampling import RepetitionDetection
from protocol.wire import (
    ENGINE_CORE_DEAD,
    FinishReason,
    RequestType,
    decode_outputs,
    encode_utility,
)
from tests.support.mock_ranks import ClusterHarness
from tests.support.requirements import require_vllm

STOP, LENGTH, ABORT, ERROR, REPETITION = FinishReason
EOS = 2  # the mock's default --eos-token-id
PROMPT = [11, 12, 13, 14, 15]
# vLLM 0.32's SchedulerStats fields, in order (checked against the source below).
SCHEDULER_STATS_FIELDS = [
    "num_running_reqs", "num_waiting_reqs", "num_skipped_waiting_reqs",
    "num_kv_fetch_reqs_by_stage", "step_counter", "current_wave", "kv_cache_usage",
    "iteration_details", "prefix_cache_stats", "connector_prefix_cache_stats",
    "kv_cache_eviction_events", "spec_decoding_stats", "kv_connector_stats",
    "ec_connector_stats", "waiting_lora_adapters", "running_lora_adapters",
    "cudagraph_stats", "perf_stats",
]


def decode_ids(frames) -> set[str]:
    """The request ids a raw output message carries outputs for."""
    return {o.request_id for o in decode_outputs(frames).outputs}


def eos_params(**params):
    """What a frontend sends for a model whose EOS is 2 (not ignore_eos)."""
    return {"eos_token_id": EOS, "all_stop_token_ids": [EOS], **params}


# ------------------------------------------------------------------- handshake

def test_handshake_hello_ready_response_and_ready(start_mock):
    mock = start_mock(wait_ready=False)
    h = mock.harness
    (identity, hello_bytes), hello = h.wait_hello()
    assert identity == IDENTITY == b"\x00\x00"
    # The exact bytes vLLM's headless engine sends (engine-protocol.md §2.1).
    assert hello_bytes.hex() == \
        "83a6737461747573a548454c4c4fa56c6f63616cc2a8686561646c657373c3"
    h.shake.send_multipart([identity, handshake.encode_init(
        [h.address(h.input)], [h.address(h.output)])])
    assert h.input.poll(5000)
    identity, payload = h.input.recv_multipart()
    ready = handshake.decode_ready_response(payload)
    assert identity == IDENTITY
    assert list(msgspec.msgpack.decode(payload))[:6] == [
        "max_model_len", "num_gpu_blocks", "block_size", "dp_stats_address", "dtype",
        "vllm_version"]
    assert (ready.vllm_version, ready.max_model_len, ready.max_num_seqs, ready.dtype) == \
        ("0.32.0", 1024, 256, "float32")
    assert ready.block_size > 0 and ready.num_gpu_blocks > 0
    handshake.check_engine_version(ready)
    assert h.shake.poll(5000)
    _, ready_bytes = h.shake.recv_multipart()
    assert ready_bytes.hex() == \
        "83a6737461747573a55245414459a56c6f63616cc2a8686561646c657373c3"


def test_ready_response_reports_settings(start_mock):
    ready = start_mock("--max-model-len", "64", "--max-num-seqs", "3").ready
    assert (ready.max_model_len, ready.max_num_seqs) == (64, 3)


def test_handshake_timeout_exits_like_vllm(start_mock):
    mock = start_mock("--handshake-timeout", "0.3", wait_ready=False)
    mock.harness.wait_hello()
    assert mock.wait() == 1
    assert "Did not receive response from front-end process within" in mock.log()


def test_init_without_parallel_config_fails_startup(start_mock):
    mock = start_mock(wait_ready=False)
    (identity, _), _ = mock.harness.wait_hello()
    mock.harness.shake.send_multipart([identity, msgspec.msgpack.encode(
        {"addresses": {"inputs": ["tcp://127.0.0.1:1"], "outputs": ["tcp://127.0.0.1:2"]}})])
    assert mock.wait() == 1
    assert "EngineCore failed to start" in mock.log()


# ------------------------------------------------------------------ generation

def test_greedy_output_is_deterministic_and_valid(start_mock):
    a, b = start_mock(), start_mock()
    ra = a.harness.run([make_request("x", PROMPT, max_tokens=20),
                        make_request("y", PROMPT, max_tokens=20),
                        make_request("z", PROMPT[::-1], max_tokens=20)])
    rb = b.harness.run([make_request("other-id", PROMPT, max_tokens=20)])
    assert ra["x"].tokens == ra["y"].tokens == rb["other-id"].tokens
    assert ra["z"].tokens != ra["x"].tokens
    assert all(0 <= t < 1200 and t != EOS for t in ra["x"].tokens + ra["z"].tokens)
    assert len(set(ra["x"].tokens)) > 10  # it looks like text, not one repeated id


def test_sampling_seed_decides_the_output(mock_engine):
    res = mock_engine.harness.run([
        make_request("s1", PROMPT, temperature=1.0, seed=7),
        make_request("s2", PROMPT, temperature=1.0, seed=7),
        make_request("s3", PROMPT, temperature=1.0, seed=8),
        make_request("u1", PROMPT, temperature=1.0),
        make_request("u2", PROMPT, temperature=1.0),
        make_request("g", PROMPT, temperature=0.0)])
    tokens = {k: r.tokens for k, r in res.items()}
    assert tokens["s1"] == tokens["s2"]
    assert len({tuple(t) for t in tokens.values()}) == 5  # all but the seed-7 pair differ


def test_max_tokens_finishes_with_length(mock_engine):
    r = mock_engine.harness.run([make_request("a", PROMPT, **eos_params(max_tokens=5))])["a"]
    assert len(r.tokens) == 5
    assert (r.finish_reason, r.stop_reason) == (LENGTH, None)
    assert [len(o.new_token_ids) for o in r.outputs] == [1] * 5  # one token per step


def test_max_model_len_finishes_with_length(start_mock):
    mock = start_mock("--max-model-len", "32")
    r = mock.harness.run([make_request("a", list(range(10, 40)), max_tokens=100)])["a"]
    assert len(r.tokens) == 2 and r.finish_reason == LENGTH


def test_eos_stops_with_eos_included(start_mock):
    mock = start_mock("--eos-rate", "0.2")
    res = mock.harness.run([make_request(f"r{i}", [20 + i, 30], **eos_params(max_tokens=200))
                            for i in range(10)])
    for r in res.values():
        assert (r.finish_reason, r.stop_reason, r.tokens[-1]) == (STOP, None, EOS)
        assert EOS not in r.tokens[:-1]
    assert len({len(r.tokens) for r in res.values()}) > 1  # the rate, not a fixed length


def test_ignore_eos_generates_eos_without_stopping(start_mock):
    mock = start_mock("--eos-rate", "0.5")
    # ignore_eos: the frontend sends no _eos_token_id (EOS stays in _all_stop_token_ids).
    r = mock.harness.run([make_request("a", PROMPT, max_tokens=30, ignore_eos=True,
                                       all_stop_token_ids=[EOS])])["a"]
    assert r.finish_reason == LENGTH and len(r.tokens) == 30
    assert EOS in r.tokens


def test_eos_rate_can_be_changed_at_run_time(mock_engine):
    h = mock_engine.harness
    assert mock_engine.control.configure(eos_rate=1.0)["eos_rate"] == 1.0
    r = h.run([make_request("a", PROMPT, **eos_params(max_tokens=50))])["a"]
    assert r.tokens == [EOS] and r.finish_reason == STOP


def test_stop_token_ids_stop_with_stop_reason(mock_engine):
    res = mock_engine.harness.run([
        make_request("a", PROMPT, **eos_params(max_tokens=50, stop_token_ids=[100])),
        make_request("b", PROMPT, **eos_params(max_tokens=50, stop_token_ids=[100],
                                               min_tokens=9))])
    # The documented rule: the stop id is output token 4, or min_tokens + 1.
    assert res["a"].tokens[3:] == [100] and 100 not in res["a"].tokens[:3]
    assert len(res["b"].tokens) == 10 and res["b"].tokens[-1] == 100
    for r in res.values():
        assert (r.finish_reason, r.stop_reason) == (STOP, 100)


def test_min_tokens_masks_eos(start_mock):
    mock = start_mock("--eos-rate", "1.0")
    r = mock.harness.run([make_request("a", PROMPT, **eos_params(max_tokens=50,
                                                                 min_tokens=6))])["a"]
    assert len(r.tokens) == 7 and r.tokens[-1] == EOS and EOS not in r.tokens[:-1]


def test_generation_config_eos_in_stop_token_ids(start_mock, tiny_model_dir):
    """With --model: EOS-like ids are the tokenizer's EOS and gen-config's (<|im_end|>)."""
    mock = start_mock("--model", str(tiny_model_dir), "--eos-rate", "1.0")
    res = mock.harness.run([make_request(f"r{i}", [40 + i, 50], max_tokens=20,
                                         eos_token_id=2, stop_token_ids=[5],
                                         all_stop_token_ids=[2, 5]) for i in range(12)])
    endings = {(r.tokens[-1], r.stop_reason) for r in res.values()}
    assert endings == {(2, None), (5, 5)}


def test_model_dir_tokens_avoid_special_ids(start_mock, tiny_model_dir):
    mock = start_mock("--model", str(tiny_model_dir))
    res = mock.harness.run([make_request(f"r{i}", [40 + i, 50], max_tokens=100,
                                         temperature=1.0) for i in range(5)])
    tokens = [t for r in res.values() for t in r.tokens]
    assert all(6 <= t < 1200 for t in tokens)  # ids 0-5 are the special tokens


def test_allowed_token_ids_restrict_output(mock_engine):
    r = mock_engine.harness.run([make_request("a", PROMPT, max_tokens=30,
                                              allowed_token_ids=[7, 8, 9])])["a"]
    assert set(r.tokens) <= {7, 8, 9} and len(r.tokens) == 30


def test_repetition_detection_finishes_with_repetition(mock_engine):
    rule = RepetitionDetection(max_pattern_size=3, min_pattern_size=2, min_count=3)
    r = mock_engine.harness.run([make_request("a", PROMPT, max_tokens=50,
                                              repetition_detection=rule)])["a"]
    assert (r.finish_reason, r.stop_reason) == (REPETITION, "repetition_detected")
    assert len(r.tokens) == 6 and r.tokens == r.tokens[:2] * 3


def test_tokens_per_step(start_mock):
    mock = start_mock("--tokens-per-step", "3")
    r = mock.harness.run([make_request("a", PROMPT, max_tokens=7, logprobs=1)])["a"]
    assert [len(o.new_token_ids) for o in r.outputs] == [3, 3, 1]
    assert [o.new_logprobs.token_ids.shape for o in r.outputs] == [[3, 2], [3, 2], [1, 2]]


def test_step_time_paces_steps(start_mock):
    mock = start_mock("--step-time", "0.05")
    start = time.monotonic()
    mock.harness.run([make_request("a", PROMPT, max_tokens=6)])
    assert time.monotonic() - start >= 0.28


# -------------------------------------------------------------------- logprobs

def check_logprob_rows(ids, lps, ranks, tokens, k):
    assert [row[0] for row in ids] == tokens
    for row_ids, row_lps, rank in zip(ids, lps, ranks):
        assert len(row_ids) == len(row_lps) == k + 1
        top = row_lps[1:]
        assert top == sorted(top, reverse=True) and all(math.isfinite(v) and v < 0
                                                        for v in row_lps)
        assert len(set(row_ids[1:])) == k
        if rank <= k:  # the sampled token sits at its rank inside the top k
            assert row_ids[rank] == row_ids[0] and row_lps[rank] == row_lps[0]
        else:
            assert row_ids[0] not in row_ids[1:] and row_lps[0] < top[-1]


def test_logprobs_inline(mock_engine):
    h = mock_engine.harness
    r = h.run([make_request("a", PROMPT, max_tokens=4, logprobs=3)])["a"]
    lp = r.outputs[0].new_logprobs
    assert (lp.token_ids.dtype, lp.logprobs.dtype, lp.ranks.dtype) == ("<i4", "<f4", "<i8")
    assert lp.token_ids.shape == [1, 4] and lp.ranks.shape == [1]
    ids, lps, ranks = r.logprob_rows()
    assert ranks == [1, 1, 1, 1]  # greedy samples the most likely token
    check_logprob_rows(ids, lps, ranks, r.tokens, 3)


def test_sampled_rank_varies_with_temperature(mock_engine):
    r = mock_engine.harness.run([make_request("a", PROMPT, max_tokens=40, logprobs=2,
                                              temperature=1.0, seed=1)])["a"]
    ids, lps, ranks = r.logprob_rows()
    assert set(ranks) == {1, 2, 3}
    check_logprob_rows(ids, lps, ranks, r.tokens, 2)


def test_logprobs_out_of_band(mock_engine):
    h = mock_engine.harness
    h.add(make_request("a", PROMPT, max_tokens=1, logprobs=70))
    frames = h.recv_frames(5.0)
    # 71 int32 ids and 71 float32 logprobs are >= 256 bytes: two aux frames.
    assert len(frames) == 3 and [len(f) for f in frames[1:]] == [284, 284]
    out = decode_outputs(frames).outputs[0]
    lp = out.new_logprobs
    assert lp.token_ids.shape == [1, 71]
    check_logprob_rows(lp.token_ids.rows(), lp.logprobs.rows(), lp.ranks.flat(),
                       out.new_token_ids, 70)


def test_full_vocab_logprobs(mock_engine):
    r = mock_engine.harness.run([make_request("a", PROMPT, max_tokens=2, logprobs=-1)])["a"]
    ids, lps, ranks = r.logprob_rows()
    assert all(sorted(row[1:]) == list(range(1200)) for row in ids)


def test_prompt_logprobs_come_once_with_the_first_token(mock_engine):
    h = mock_engine.harness
    prompt = list(range(100, 140))
    res = h.run([make_request("short", PROMPT, max_tokens=3, prompt_logprobs=2),
                 make_request("long", prompt, max_tokens=3, prompt_logprobs=1)])
    first = res["short"].outputs[0].new_prompt_logprobs_tensors
    assert (first.token_ids.dtype, first.logprobs.dtype, first.ranks.dtype) == \
        ("int32", "float32", "int32")
    assert first.token_ids.shape == [4, 3] and first.ranks.shape == [4]
    assert [row[0] for row in first.token_ids.rows()] == PROMPT[1:]
    check_logprob_rows(first.token_ids.rows(), first.logprobs.rows(), first.ranks.flat(),
                       PROMPT[1:], 2)
    long = res["long"].outputs[0].new_prompt_logprobs_tensors  # 39 x 2 x 4 B: aux frames
    assert [row[0] for row in long.token_ids.rows()] == prompt[1:]
    assert all(o.new_prompt_logprobs_tensors is None
               for r in res.values() for o in r.outputs[1:])


# ---------------------------------------------------------- stats and batching

def test_first_output_carries_prefill_stats_and_events(mock_engine):
    h = mock_engine.harness
    r = h.run([make_request("a", PROMPT, max_tokens=3)])["a"]
    first, *rest = r.outputs
    assert first.prefill_stats == {
        "num_prompt_tokens": 5, "num_computed_tokens": 5, "num_cached_tokens": 0,
        "num_local_cached_tokens": 0, "num_external_cached_tokens": 0,
        "num_cache_creation_tokens": 0}
    assert [e["type"] for e in first.events] == [1, 2]  # QUEUED, SCHEDULED
    assert first.events[0]["timestamp"] <= first.events[1]["timestamp"] <= time.monotonic()
    assert all(o.prefill_stats is None and o.events is None for o in rest)
    for msg in h.messages:
        assert list(msg.scheduler_stats) == SCHEDULER_STATS_FIELDS
        assert msg.weight_version == "default" and msg.finished_requests is None
    assert h.messages[0].scheduler_stats["num_running_reqs"] == 1
    assert h.messages[-1].scheduler_stats["num_running_reqs"] == 0


def test_scheduler_stats_fields_match_vllm_source(mock_engine):
    require_vllm()
    path = Path(importlib.util.find_spec("vllm").origin).parent / "v1/metrics/stats.py"
    classes = {n.name: n for n in ast.parse(path.read_text()).body
               if isinstance(n, ast.ClassDef)}

    def fields(name: str) -> list[str]:
        return [n.target.id for n in classes[name].body if isinstance(n, ast.AnnAssign)]

    assert fields("SchedulerStats") == SCHEDULER_STATS_FIELDS
    h = mock_engine.harness
    h.run([make_request("a", PROMPT, max_tokens=1)])
    cache_stats = h.messages[0].scheduler_stats["prefix_cache_stats"]
    assert list(cache_stats) == fields("BaseCacheStats") + fields("PrefixCacheStats")


def test_prefix_cache_hits_are_reported(mock_engine):
    h = mock_engine.harness
    prompt = list(range(200, 240))  # 2 full blocks of 16 plus 8
    h.run([make_request("a", prompt, max_tokens=2)])
    res = h.run([make_request("b", prompt, max_tokens=2),
                 make_request("c", prompt, max_tokens=2, prompt_logprobs=0)])
    assert res["b"].outputs[0].prefill_stats["num_cached_tokens"] == 32
    assert res["b"].outputs[0].prefill_stats["num_computed_tokens"] == 8
    assert res["c"].outputs[0].prefill_stats["num_cached_tokens"] == 0  # skips the cache
    assert sum(m.scheduler_stats["prefix_cache_stats"]["hits"] for m in h.messages) == 32


def test_finished_requests_cost_one_more_empty_step(mock_engine):
    """vLLM steps once more after requests finish (finished_req_ids): stats only."""
    h = mock_engine.harness
    h.run([make_request("a", PROMPT, max_tokens=2)])
    h.pump_until(lambda: len(h.messages) == 3)
    last = h.messages[-1]
    assert last.outputs == [] and last.scheduler_stats["num_running_reqs"] == 0
    assert h.quiet(0.2) == []
    assert mock_engine.control.stats()["steps"] == 3


def test_disable_log_stats(start_mock):
    mock = start_mock("--disable-log-stats")
    h = mock.harness
    r = h.run([make_request("a", PROMPT, max_tokens=3)])["a"]
    assert h.quiet(0.2) == []  # the empty step after it sends nothing
    assert len(h.messages) == 3
    assert all(m.scheduler_stats is None for m in h.messages)
    assert all(o.events is None for o in r.outputs)
    assert r.outputs[0].prefill_stats["num_prompt_tokens"] == 5  # sent regardless


def test_continuous_batching_one_message_per_step(start_mock):
    mock = start_mock("--max-num-seqs", "4")
    h = mock.harness
    # Frozen while the ten arrive: on a loaded host the engine could otherwise
    # finish each request before the next ADD lands, and never batch.
    assert h.utility("pause_scheduler", "keep", False).result == [None, None]
    for i in range(10):
        h.add(make_request(f"r{i}", [30 + i], max_tokens=3 + i % 2))
    h.utility("resume_scheduler")
    h.pump_until(lambda: all(h.results[f"r{i}"].finished for i in range(10))
                 and not h.messages[-1].outputs)  # the trailing empty step
    step_messages = [m for m in h.messages if m.utility_output is None]
    assert len(step_messages) == mock.control.stats()["steps"]
    assert max(len(m.outputs) for m in step_messages) == 4
    for m in step_messages:
        ids = [o.request_id for o in m.outputs]
        assert len(ids) == len(set(ids))
        s = m.scheduler_stats
        assert s["num_running_reqs"] <= 4 and s["num_running_reqs"] + s["num_waiting_reqs"] <= 10
    assert any(m.scheduler_stats["num_waiting_reqs"] > 0 for m in step_messages)
    # FIFO admission: requests start in the order they arrived.
    first_step = {o.request_id: i for i, m in enumerate(step_messages) for o in m.outputs
                  if o.prefill_stats is not None}
    assert [first_step[f"r{i}"] for i in range(10)] == sorted(first_step.values())


# ------------------------------------------------------------------- aborts

def test_client_abort_sends_nothing_and_is_counted(start_mock):
    mock = start_mock("--step-time", "0.02", "--max-num-seqs", "1")
    h = mock.harness
    h.run([make_request("done", PROMPT, max_tokens=1)])
    h.add(make_request("running", PROMPT, max_tokens=1000))
    h.add(make_request("queued", PROMPT, max_tokens=1000))
    h.pump_until(lambda: h.results["running"].outputs)
    h.abort("running", "queued", "never-seen", "done")
    h.abort("running")  # idempotent
    h.utility("is_sleeping")  # once answered, the aborts were applied in order
    assert all(not decode_ids(f) & {"running", "queued"} for f in h.quiet(0.2))
    stats = mock.control.stats()
    assert (stats["aborted"], stats["aborts_unknown"], stats["aborts_after_finish"]) == \
        (2, 1, 2)
    assert stats["running"] == stats["waiting"] == 0
    assert not h.results["running"].finished  # no ABORT output for client aborts


def test_abort_all_sends_engine_abort_outputs(start_mock):
    mock = start_mock("--step-time", "0.02")
    h = mock.harness
    h.add(make_request("a", PROMPT, max_tokens=1000))
    h.add(make_request("b", PROMPT, max_tokens=1000))
    h.pump_until(lambda: h.results["a"].outputs)
    assert mock.control.abort_all() == 2
    h.pump_until(lambda: h.results["a"].finished and h.results["b"].finished)
    msg = next(m for m in h.messages if m.finished_requests)
    assert sorted(msg.finished_requests) == ["a", "b"]
    assert [(o.finish_reason, o.new_token_ids) for o in msg.outputs] == [(ABORT, [])] * 2
    assert mock.control.stats()["finished"]["abort"] == 2


def test_error_next_finishes_with_scheduler_error(mock_engine):
    h = mock_engine.harness
    mock_engine.control.error_next(1)
    res = h.run([make_request("bad", PROMPT), make_request("good", PROMPT, max_tokens=2)])
    assert [(o.finish_reason, o.new_token_ids) for o in res["bad"].outputs] == [(ERROR, [])]
    assert res["good"].finish_reason == LENGTH
    msg = next(m for m in h.messages if any(o.request_id == "bad" for o in m.outputs))
    assert msg.finished_requests is None  # built by the scheduler, in a step


def test_missing_max_tokens_is_a_preprocessing_error(mock_engine):
    h = mock_engine.harness
    h.add_unchecked(make_request("a", PROMPT, max_tokens=None))
    h.pump_until(lambda: h.results["a"].finished)
    msg = h.messages[-1]
    assert msg.finished_requests == ["a"] and msg.outputs[0].finish_reason == ERROR
    assert mock_engine.control.stats()["finished"]["error"] == 1


# ------------------------------------------------------------------ utilities

def test_utility_calls(mock_engine):
    h = mock_engine.harness
    value = lambda method, *args: h.utility(method, *args).result  # noqa: E731
    assert value("get_supported_tasks") == [None, ["generate"]]
    assert value("is_sleeping") == [None, False]
    assert value("has_work") == [None, False]
    assert value("reset_prefix_cache") == [None, True]
    assert value("get_weight_version") == [None, "default"]
    assert value("list_loras") == [None, []]
    assert value("is_scheduler_paused") == [None, False]
    failed = h.utility("no_such_method")
    assert (failed.failure_message, failed.result) == (
        "Call to no_such_method method failed: "
        "'EngineCoreProc' object has no attribute 'no_such_method'", None)
    assert h.utility("is_sleeping", 1, 2).failure_message == \
        "Call to is_sleeping method failed: "
    assert h.utility("pause_scheduler", "bogus").failure_message == \
        "Call to pause_scheduler method failed: Invalid pause mode: bogus"
    assert mock_engine.control.stats()["utility_calls"] == 10


def test_utility_reply_goes_with_the_call_id(mock_engine):
    h = mock_engine.harness
    h.send(*encode_utility(2**64 - 1, "is_sleeping"))
    assert h.wait_utility(2**64 - 1).result == [None, False]


def test_pause_abort_mode_aborts_and_queues(start_mock):
    mock = start_mock("--step-time", "0.01")
    h = mock.harness
    h.add(make_request("a", PROMPT, max_tokens=1000))
    h.pump_until(lambda: h.results["a"].outputs)
    assert h.utility("pause_scheduler", "abort").result == [None, None]
    assert h.results["a"].finish_reason == ABORT  # the ABORT output came first
    assert [m.finished_requests for m in h.messages if m.finished_requests] == [["a"]]
    assert h.utility("is_scheduler_paused").result == [None, True]
    h.add(make_request("b", PROMPT, max_tokens=2))
    assert not [f for f in h.quiet(0.2) if decode_ids(f)]  # queued while paused
    assert h.utility("resume_scheduler").result == [None, None]
    h.pump_until(lambda: h.results["b"].finished)


def test_pause_wait_mode_replies_after_draining(start_mock):
    mock = start_mock("--step-time", "0.01")
    h = mock.harness
    h.add(make_request("a", PROMPT, max_tokens=20))
    h.pump_until(lambda: h.results["a"].outputs)
    call_id = h.call("pause_scheduler", "wait")
    reply = h.wait_utility(call_id)
    assert reply.result == [None, None] and h.results["a"].finish_reason == LENGTH
    assert len(h.results["a"].tokens) == 20


def test_pause_keep_mode_freezes_and_resumes(start_mock):
    mock = start_mock("--step-time", "0.01")
    h = mock.harness
    h.add(make_request("a", PROMPT, max_tokens=30))
    h.pump_until(lambda: h.results["a"].outputs)
    assert h.utility("pause_scheduler", "keep", False).result == [None, None]
    assert h.utility("has_work").result == [None, False]
    frozen = len(h.results["a"].tokens)
    assert not [f for f in h.quiet(0.2) if decode_ids(f)]
    assert len(h.results["a"].tokens) == frozen < 30
    h.utility("resume_scheduler")
    h.pump_until(lambda: h.results["a"].finished)
    assert len(h.results["a"].tokens) == 30


def test_sleep_and_wake_up(mock_engine):
    h = mock_engine.harness
    assert h.utility("sleep", 1).result == [None, None]
    assert h.utility("is_sleeping").result == [None, True]
    assert h.utility("wake_up", ["scheduling"]).result == [None, False]  # weights asleep
    assert h.utility("wake_up").result == [None, True]
    assert h.utility("is_sleeping").result == [None, False]


# ----------------------------------------------------------- failure modes

def test_crash_sends_engine_core_dead(mock_engine):
    h = mock_engine.harness
    mock_engine.control.crash()
    assert h.recv_frames(5.0) == [ENGINE_CORE_DEAD]
    assert mock_engine.wait() == 1


def test_exit_sends_nothing(start_mock):
    mock = start_mock("--step-time", "0.01")
    h = mock.harness
    h.add(make_request("a", PROMPT, max_tokens=1000))
    h.pump_until(lambda: h.results["a"].outputs)
    mock.control.exit()
    assert mock.wait() == -signal.SIGKILL
    assert all(frames != [ENGINE_CORE_DEAD] for frames in h.quiet(0.3))


def test_stall_stops_steps_and_input_but_not_control(start_mock):
    mock = start_mock("--step-time", "0.01")
    h = mock.harness
    h.add(make_request("a", PROMPT, max_tokens=1000))
    h.pump_until(lambda: h.results["a"].outputs)
    mock.control.stall(None)
    h.quiet(0.1)  # a step in flight may still land
    call_id = h.call("is_sleeping")
    assert h.quiet(0.3) == []
    steps = mock.control.stats()["steps"]  # served while stalled
    time.sleep(0.1)
    assert mock.control.stats()["steps"] == steps
    mock.control.stall(0)
    assert h.wait_utility(call_id).result == [None, False]
    n = len(h.results["a"].tokens)
    h.pump_until(lambda: len(h.results["a"].tokens) > n)


def test_timed_stall_ends_by_itself(mock_engine):
    h = mock_engine.harness
    mock_engine.control.stall(0.4)
    start = time.monotonic()
    assert h.utility("is_sleeping").result == [None, False]
    assert time.monotonic() - start >= 0.3


POISON = {
    "undecodable ADD": [RequestType.ADD.value, b"\xc1garbage"],
    "invalid SamplingParams": [RequestType.ADD.value, msgspec.msgpack.encode(
        make_request("p", PROMPT, top_p=0.0))],
    "wrong field type": [RequestType.ADD.value, msgspec.msgpack.encode(
        ["p", PROMPT, None, {"max_tokens": "many"}, None, 0.0, None, None, None])],
    "unknown type byte": [b"\x09", msgspec.msgpack.encode([])],
    "READY on the input socket": [b"READY"],
    "malformed UTILITY": [RequestType.UTILITY.value, msgspec.msgpack.encode([0, 1, "x"])],
    "handle_fault_tolerance": [RequestType.UTILITY.value, msgspec.msgpack.encode(
        [0, 1, "handle_fault_tolerance", ["status"]])],
}


@pytest.mark.parametrize("frames", POISON.values(), ids=POISON.keys())
def test_poisoned_input_thread_stops_reading(mock_engine, frames):
    h = mock_engine.harness
    h.send(*frames)
    h.send(*encode_utility(7, "is_sleeping"))
    h.add(make_request("after", PROMPT, max_tokens=2))
    assert h.quiet(0.4) == []  # no reply, no output: the input thread is gone
    stats = mock_engine.control.stats()
    assert stats["input_alive"] is False and stats["adds"] == 0
    assert mock_engine.proc.poll() is None  # but the process stays up
    assert "input thread died" in mock_engine.log()


FATAL = {
    "duplicate live id": [make_request("dup", PROMPT, max_tokens=1000),
                          make_request("dup", PROMPT)],
    "prompt longer than max_model_len": [make_request("long", list(range(1100)))],
    "prompt of exactly max_model_len": [make_request("eq", [7] * 1024)],
    "out-of-vocabulary prompt id": [make_request("oov", [1, 99999])],
    "empty prompt": [make_request("empty", [])],
    "out-of-vocabulary allowed id": [make_request("allowed", PROMPT,
                                                  allowed_token_ids=[5000])],
}


@pytest.mark.parametrize("requests", FATAL.values(), ids=FATAL.keys())
def test_engine_killing_requests(start_mock, requests):
    # Paced steps: the first "dup" request stays live (1000 tokens, 50 s) however
    # late the second ADD arrives on a loaded host.
    mock_engine = start_mock("--step-time", "0.05")
    h = mock_engine.harness
    for request in requests:
        h.add_unchecked(request)
    deadline = time.monotonic() + 30
    while not h.dead and time.monotonic() < deadline:
        h.recv(0.5)
    assert h.dead
    assert mock_engine.wait() == 1
    assert "fatal error" in mock_engine.log()


def test_executor_failed_sentinel_kills_the_engine(mock_engine):
    mock_engine.harness.send(b"\x04", msgspec.msgpack.encode(None))
    assert mock_engine.harness.recv_frames(5.0) == [ENGINE_CORE_DEAD]
    assert mock_engine.wait() == 1


def test_client_index_out_of_range_kills_the_output_thread(mock_engine):
    h = mock_engine.harness
    req = make_request("a", PROMPT, max_tokens=2)
    req.client_index = 1
    h.add_unchecked(req)
    assert h.quiet(0.3) == []
    assert mock_engine.control.stats()["finished"]["length"] == 1  # it still ran
    h.send(*encode_utility(3, "is_sleeping"))
    assert h.quiet(0.3) == []  # nothing is sent any more


def test_sigterm_aborts_in_flight_requests_and_exits(start_mock):
    mock = start_mock("--step-time", "0.01", "--max-num-seqs", "1")
    h = mock.harness
    h.add(make_request("a", PROMPT, max_tokens=1000))
    h.add(make_request("b", PROMPT, max_tokens=1000))
    h.pump_until(lambda: h.results["a"].outputs)
    mock.proc.send_signal(signal.SIGTERM)
    h.pump_until(lambda: h.results["a"].finished and h.results["b"].finished)
    assert h.results["a"].finish_reason == h.results["b"].finish_reason == ABORT
    assert sorted(h.messages[-1].finished_requests) == ["a", "b"]
    assert mock.wait() == 0
    assert [len(f) for f in h.quiet(0.2)] == [1]  # then one empty stats-only step


# ------------------------------------------------------------ scripted output

SCRIPT = [100, 101, 102, 103, 104, 105]


def test_script_keyed_by_prompt_and_a_default(mock_engine):
    h, control = mock_engine.harness, mock_engine.control
    natural = h.run([make_request("before", PROMPT, **eos_params(max_tokens=5))])
    assert control.script({"prompt_token_ids": PROMPT, "output_token_ids": SCRIPT},
                          {"output_token_ids": [200, 201]}) == 2
    res = h.run([make_request("keyed", PROMPT, **eos_params(max_tokens=20)),
                 make_request("sampled", PROMPT, **eos_params(max_tokens=20, temperature=1.0,
                                                              seed=3)),
                 make_request("other", [7, 8, 9], **eos_params(max_tokens=20))])
    # Scripted ids, then (finish "stop") the request's EOS: one id per step.
    assert res["keyed"].tokens == res["sampled"].tokens == SCRIPT + [EOS]
    assert [len(o.new_token_ids) for o in res["keyed"].outputs] == [1] * 7
    assert (res["keyed"].finish_reason, res["keyed"].stop_reason) == (STOP, None)
    assert res["other"].tokens == [200, 201, EOS]
    assert control.stats()["scripted"] == 3
    control.clear_scripts()
    after = h.run([make_request("after", PROMPT, **eos_params(max_tokens=5))])
    assert after["after"].tokens == natural["before"].tokens
    assert control.stats()["scripted"] == 3


def test_script_obeys_the_stop_rules(mock_engine):
    h = mock_engine.harness
    mock_engine.control.script({"prompt_token_ids": PROMPT,
                                "output_token_ids": [100, EOS, 101, 102, 103, 104]})
    res = h.run([
        make_request("length", PROMPT, **eos_params(max_tokens=1)),
        make_request("eos", PROMPT, **eos_params(max_tokens=20)),
        make_request("stop_id", PROMPT, **eos_params(max_tokens=20, stop_token_ids=[102])),
        make_request("min_tokens", PROMPT, **eos_params(max_tokens=20, stop_token_ids=[102],
                                                        min_tokens=6)),
        make_request("ignore_eos", PROMPT, max_tokens=4, ignore_eos=True,
                     all_stop_token_ids=[EOS])])
    ends = {k: (r.tokens, r.finish_reason, r.stop_reason) for k, r in res.items()}
    assert ends["length"] == ([100], LENGTH, None)
    assert ends["eos"] == ([100, EOS], STOP, None)
    # Before min_tokens the mask hides stop ids (EOS, 102): the script skips them,
    # ordinary ids fill up to min_tokens, then the request's EOS.
    tokens, finish, _ = ends["min_tokens"]
    assert tokens[:4] == [100, 101, 103, 104] and tokens[6:] == [EOS] and finish == STOP
    assert not {EOS, 102} & set(tokens[4:6])
    assert ends["stop_id"] == ([100, EOS], STOP, None)  # EOS came first
    tokens, finish, _ = ends["ignore_eos"]  # EOS does not stop it
    assert tokens == [100, EOS, 101, 102] and finish == LENGTH


def test_script_stop_reason_and_length_finish(mock_engine):
    h = mock_engine.harness
    mock_engine.control.script(
        {"prompt_token_ids": PROMPT, "output_token_ids": [100, 101, 102, 103]},
        {"prompt_token_ids": [7, 8], "output_token_ids": [100, 101], "finish": "length"})
    res = h.run([make_request("stop", PROMPT, **eos_params(max_tokens=20,
                                                          stop_token_ids=[102])),
                 make_request("long", [7, 8], **eos_params(max_tokens=9))])
    assert (res["stop"].tokens, res["stop"].finish_reason, res["stop"].stop_reason) == \
        ([100, 101, 102], STOP, 102)
    long = res["long"]  # ordinary ids after the script, up to the length limit
    assert long.tokens[:2] == [100, 101] and len(long.tokens) == 9
    assert long.finish_reason == LENGTH and EOS not in long.tokens


def test_script_alternatives_taken_in_turn(mock_engine):
    mock_engine.control.script({"prompt_token_ids": PROMPT,
                                "alternatives": [[100, 101], [110, 111]]})
    res = mock_engine.harness.run([make_request(f"r{i}", PROMPT, **eos_params(max_tokens=9))
                                   for i in range(3)])
    assert [res[f"r{i}"].tokens for i in range(3)] == \
        [[100, 101, EOS], [110, 111, EOS], [100, 101, EOS]]


def test_script_with_logprobs_steps_and_output_kind(start_mock):
    mock = start_mock("--tokens-per-step", "2")
    mock.control.script({"output_token_ids": SCRIPT})
    h = mock.harness
    res = h.run([make_request("delta", PROMPT, **eos_params(max_tokens=5, logprobs=2,
                                                           output_kind=1)),
                 make_request("final", PROMPT, **eos_params(max_tokens=5, logprobs=2,
                                                           output_kind=2))])
    delta, final = res["delta"], res["final"]
    # The engine streams per step whatever the output kind: that is the frontend's job.
    assert [o.new_token_ids for o in delta.outputs] == \
        [o.new_token_ids for o in final.outputs] == [SCRIPT[:2], SCRIPT[2:4], SCRIPT[4:5]]
    ids, lps, ranks = delta.logprob_rows()
    check_logprob_rows(ids, lps, ranks, SCRIPT[:5], 2)
    assert delta.finish_reason == LENGTH


def test_bad_script_is_refused_whole(mock_engine):
    control = mock_engine.control
    for entries in ([{"prompt_token_ids": PROMPT}],
                    [{"output_token_ids": [1], "alternatives": [[2]]}],
                    [{"output_token_ids": [1200]}],
                    [{"output_token_ids": [1], "finish": "abort"}],
                    [{"output_token_ids": [1], "prompt": PROMPT}],
                    [{"output_token_ids": [1]}, {"output_token_ids": [True]}]):
        with pytest.raises(MockControlError):
            control.script(*entries)
    assert control.script() == 0  # nothing was added


def test_script_file_at_start_up(start_mock, tmp_path):
    path = tmp_path / "script.json"
    path.write_text(json.dumps([{"prompt_token_ids": PROMPT, "output_token_ids": [5, 6]}]))
    mock = start_mock("--script", str(path))
    r = mock.harness.run([make_request("a", PROMPT, **eos_params(max_tokens=9))])["a"]
    assert r.tokens == [5, 6, EOS]
    path.write_text(json.dumps([{"output_token_ids": [-1]}]))
    bad = start_mock("--script", str(path), wait_ready=False)
    assert bad.wait() == 2 and "--script" in bad.log()


# ------------------------------------------------------------- several clients

def test_several_clients_each_get_their_own_outputs(start_mock_ranks):
    ranks = start_mock_ranks(1, "--step-time", "0.01", clients=2)
    h = ranks.harness
    # Every step of b's is one of a's too: a, started first, runs for 10 s.
    h.add(make_request("a", PROMPT, max_tokens=1000), client=0)
    h.pump_until(lambda: h.results["a"].outputs)
    h.add(make_request("b", PROMPT, max_tokens=3), client=1)
    h.pump_until(lambda: h.results["b"].finished)
    assert not h.results["a"].finished
    h.abort(0, "a", client=0)
    wait_for(lambda: ranks.controls[0].stats()["running"] == 0, 10)
    came_to = {o.request_id: client for client, m in h.messages for o in m.outputs}
    assert came_to == {"a": 0, "b": 1}
    steps = {c: [m for cc, m in h.messages if cc == c and m.outputs] for c in (0, 1)}
    assert all(len(m.outputs) == 1 for m in steps[0] + steps[1])
    assert len(steps[1]) == 3
    # A step's messages share its timestamp; its stats go with one message:
    # the first client's with outputs.
    a_steps = {m.timestamp: m for m in steps[0]}
    assert all(m.timestamp in a_steps for m in steps[1])
    assert all(m.scheduler_stats is not None for m in steps[0])
    assert all(m.scheduler_stats is None for m in steps[1])
    call_id = h.call("is_sleeping", client=1)
    assert h.wait_utility(call_id)[:2] == (1, 0)
    h.add(make_request("c", PROMPT, max_tokens=1000), client=0)
    h.add(make_request("d", PROMPT, max_tokens=1000), client=1)
    h.pump_until(lambda: h.results["c"].outputs and h.results["d"].outputs)
    assert ranks.controls[0].abort_all() == 2  # engine-built ABORTs go per client
    h.pump_until(lambda: h.results["c"].finished and h.results["d"].finished)
    assert sorted((c, m.finished_requests) for c, m in h.messages if m.finished_requests) \
        == [(0, ["c"]), (1, ["d"])]
    ranks.controls[0].crash()
    h.pump_until(lambda: len(h.dead) == 2)
    assert sorted(h.dead) == [0, 1]  # ENGINE_CORE_DEAD on every output socket


# --------------------------------------------------------------- data parallel

def test_dp_ranks_handshake_as_independent_engines(start_mock_ranks):
    ranks = start_mock_ranks(2, clients=2)
    for rank, ready in ranks.harness.ready.items():
        assert (ready.data_parallel_rank, ready.data_parallel_size) == (rank, 1)
    assert [ranks.controls[r].stats()["rank"] for r in (0, 1)] == [0, 1]


def test_dp_ranks_serve_and_stamp_engine_index(start_mock_ranks):
    ranks = start_mock_ranks(3)
    h = ranks.harness
    for rank in range(3):
        h.add(make_request(f"r{rank}", PROMPT, max_tokens=4), rank=rank)
    h.pump_until(lambda: all(h.results[f"r{r}"].finished for r in range(3)))
    assert h.engine_of == {"r0": 0, "r1": 1, "r2": 2}
    assert len({tuple(h.results[f"r{r}"].tokens) for r in range(3)}) == 1  # same model
    call_id = h.call("get_weight_version", rank=2)
    assert h.wait_utility(call_id)[1] == 2
    h.abort(1, "r1")  # an abort of a finished request: counted by its rank only
    h.wait_utility(h.call("is_sleeping", rank=1))
    assert [ranks.controls[r].stats()["aborts_after_finish"] for r in range(3)] == [0, 1, 0]


def test_dp_ranks_have_their_own_prefix_cache_and_stats(start_mock_ranks):
    ranks = start_mock_ranks(2, "--block-size", "8")
    h = ranks.harness
    assert ranks.harness.ready[1].block_size == 8
    prompt = list(range(300, 330))  # 3 full blocks of 8 can hit (the last token never)
    for rid, rank in (("a", 0), ("b", 0), ("c", 1)):
        h.add(make_request(rid, prompt, max_tokens=2), rank=rank)
        h.pump_until(lambda: h.results[rid].finished)
    cached = {k: h.results[k].outputs[0].prefill_stats["num_cached_tokens"] for k in "abc"}
    assert cached == {"a": 0, "b": 24, "c": 0}
    h.quiet(0.1)  # the trailing stats-only steps
    totals = {0: [0, 0, 0], 1: [0, 0, 0]}
    for _, m in h.messages:
        cache = m.scheduler_stats["prefix_cache_stats"]
        for i, key in enumerate(("requests", "queries", "hits")):
            totals[m.engine_index][i] += cache[key]
    assert totals == {0: [2, 60, 24], 1: [1, 30, 0]}


def test_dp_killed_rank_drops_and_a_restarted_one_says_hello(start_mock_ranks):
    ranks = start_mock_ranks(2, "--step-time", "0.01")
    h = ranks.harness
    h.add(make_request("doomed", PROMPT, max_tokens=1000), rank=1)
    h.pump_until(lambda: h.results["doomed"].outputs)
    assert ranks.kill(1) == -signal.SIGKILL
    h.quiet(0.2)
    assert h.dead == [] and not h.results["doomed"].finished  # it just went silent
    h.add(make_request("alive", PROMPT, max_tokens=3), rank=0)
    h.pump_until(lambda: h.results["alive"].finished)
    ready = ranks.start(1)  # the same identity: HELLO, INIT, ready response, READY
    assert ready.data_parallel_rank == 1
    h.add(make_request("again", PROMPT, max_tokens=3), rank=1)
    h.pump_until(lambda: h.results["again"].finished)
    assert h.engine_of["again"] == 1


def test_dp_crashed_rank_sends_engine_core_dead_on_its_outputs(start_mock_ranks):
    ranks = start_mock_ranks(2, clients=2)
    h = ranks.harness
    ranks.controls[0].crash()
    h.pump_until(lambda: len(h.dead) == 2)
    assert sorted(h.dead) == [0, 1] and ranks.procs[0].wait(10) == 1
    h.add(make_request("a", PROMPT, max_tokens=2), rank=1, client=1)
    h.pump_until(lambda: h.results["a"].finished)


def test_dp_stopped_rank_continues(start_mock_ranks):
    ranks = start_mock_ranks(2)
    h = ranks.harness
    ranks.stop(0)
    h.add(make_request("frozen", PROMPT, max_tokens=2), rank=0)
    h.add(make_request("free", PROMPT, max_tokens=2), rank=1)
    h.pump_until(lambda: h.results["free"].finished)
    h.quiet(0.2)
    assert not h.results["frozen"].outputs
    ranks.cont(0)
    h.pump_until(lambda: h.results["frozen"].finished)


def test_dp_launcher_runs_local_ranks_and_stops_them_together(tmp_path):
    """One launcher, two rank processes; when one dies the other is stopped (vLLM)."""
    h = ClusterHarness()
    proc, control0 = spawn_mock(h.handshake_addr, tmp_path / "launcher.log",
                                "--data-parallel-size", "2", "--step-time", "0.01")
    try:
        h.accept([0, 1])
        port = int(control0.addr.rsplit(":", 1)[1])
        control1 = MockControl(f"tcp://127.0.0.1:{port + 1}")
        stats = [control0.stats(), control1.stats()]
        assert [s["rank"] for s in stats] == [0, 1]
        assert len({proc.pid, *(s["pid"] for s in stats)}) == 3
        h.add(make_request("a", PROMPT, max_tokens=1000), rank=0)
        h.pump_until(lambda: h.results["a"].outputs)
        os.kill(stats[1]["pid"], signal.SIGKILL)
        h.pump_until(lambda: h.results["a"].finished)  # rank 0 got SIGTERM: it aborts
        assert h.results["a"].finish_reason == ABORT
        assert proc.wait(10) == 1
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        h.close()


@pytest.mark.parametrize("flags", [["-dp", "2", "-dpr", "2"], ["-dp", "2", "-dpl", "3"],
                                   ["-dp", "3", "-dpr", "1", "-dpl", "3"],
                                   ["-dp", "2", "--control-addr", "ipc:///tmp/x"]])
def test_dp_flags_are_checked(flags, capsys):
    with pytest.raises(SystemExit):
        parse_args(["--frontend-addr", "tcp://127.0.0.1:1", *flags])
    assert "error:" in capsys.readouterr().err


def test_dp_local_size_defaults_to_the_ranks_left():
    args = parse_args(["--frontend-addr", "tcp://127.0.0.1:1", "-dp", "4", "-dpr", "1"])
    assert (args.data_parallel_size_local, args.block_size) == (3, 16)


# ---------------------------------------------------- vLLM's own frontend

def http_json(url: str, body: dict | None = None, timeout: float = 30.0):
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data, {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as resp:
        assert resp.status == 200
        text = resp.read().decode()
    return text if body is not None and body.get("stream") else json.loads(text)


@pytest.fixture
def vllm_frontend_on_mock(tiny_model_dir, tmp_path):
    """vLLM's Python API server (its own handshake) with the mock as its engine."""
    rpc_port, http_port = free_port(), free_port()
    env = {**os.environ, "OMP_NUM_THREADS": "1", "VLLM_ENABLE_V1_MULTIPROCESSING": "0",
           "TORCH_COMPILE_DISABLE": "1", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
           "VLLM_NO_USAGE_STATS": "1",
           # Its periodic stats logger reads scheduler_stats: make it run during the test.
           "VLLM_LOG_STATS_INTERVAL": "0.2"}
    require_vllm()
    vllm = Path(sys.executable).with_name("vllm")
    cmd = [str(vllm), "serve", str(tiny_model_dir), "--data-parallel-size", "1",
           "--data-parallel-size-local", "0", "--data-parallel-address", "127.0.0.1",
           "--data-parallel-rpc-port", str(rpc_port), "--host", "127.0.0.1",
           "--port", str(http_port), "--max-model-len", "1024", "--served-model-name", "tiny"]
    log_path = tmp_path / "vllm-frontend.log"
    log = open(log_path, "wb")
    server = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT,
                              start_new_session=True)
    mock, control = spawn_mock(f"tcp://127.0.0.1:{rpc_port}", tmp_path / "mock.log",
                               "--model", str(tiny_model_dir), "--eos-rate", "0.0")
    base = f"http://127.0.0.1:{http_port}"
    try:
        deadline = time.monotonic() + 240
        while True:
            assert server.poll() is None and mock.poll() is None, \
                log_path.read_text()[-3000:]
            try:
                urllib.request.urlopen(base + "/health", timeout=2)
                break
            except OSError:
                assert time.monotonic() < deadline, "vLLM's frontend did not come up"
                time.sleep(0.5)
        yield base, log_path, control
    finally:
        for proc in (server, mock):
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
        for proc in (server, mock):
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(10)
        log.close()


@pytest.mark.vllm_frontend
@pytest.mark.timeout(600)
def test_vllm_frontend_serves_from_the_mock(vllm_frontend_on_mock, tiny_model_dir):
    base, log_path, control = vllm_frontend_on_mock
    url = base + "/v1/completions"
    plain = http_json(url, {"model": "tiny", "prompt": "hello world", "max_tokens": 8,
                            "temperature": 0, "logprobs": 3})
    choice = plain["choices"][0]
    assert plain["usage"]["completion_tokens"] == 8 and choice["finish_reason"] == "length"
    assert len(choice["logprobs"]["tokens"]) == 8

    again = http_json(url, {"model": "tiny", "prompt": "hello world", "max_tokens": 8,
                            "temperature": 0, "logprobs": 3})
    assert again["choices"][0]["text"] == choice["text"]  # greedy is deterministic

    stream = http_json(url, {"model": "tiny", "prompt": "hello", "max_tokens": 6,
                             "stream": True, "stream_options": {"include_usage": True}})
    events = [json.loads(line[6:]) for line in stream.splitlines()
              if line.startswith("data: {")]
    assert stream.rstrip().endswith("data: [DONE]")
    assert events[-1]["usage"]["completion_tokens"] == 6

    fanout = http_json(url, {"model": "tiny", "prompt": "hi", "max_tokens": 5, "n": 2,
                             "temperature": 1.0})
    assert sorted(c["index"] for c in fanout["choices"]) == [0, 1]
    assert fanout["usage"]["completion_tokens"] == 10

    stopped = http_json(url, {"model": "tiny", "prompt": "hi", "max_tokens": 20,
                              "stop_token_ids": [100], "prompt_logprobs": 1})
    assert (stopped["choices"][0]["finish_reason"], stopped["choices"][0]["stop_reason"],
            stopped["usage"]["completion_tokens"]) == ("stop", 100, 4)
    assert stopped["choices"][0]["prompt_logprobs"][0] is None

    chat = http_json(base + "/v1/chat/completions", {
        "model": "tiny", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4})
    assert chat["usage"]["completion_tokens"] == 4

    # Scripted output reaches vLLM's frontend as stated: its text, then EOS.
    ids = Tokenizer.from_file(str(tiny_model_dir / "tokenizer.json")).encode(
        "The answer is 42.", add_special_tokens=False).ids
    control.script({"output_token_ids": ids})
    scripted = http_json(url, {"model": "tiny", "prompt": "hi", "max_tokens": 20})
    assert (scripted["choices"][0]["text"], scripted["choices"][0]["finish_reason"],
            scripted["usage"]["completion_tokens"]) == ("The answer is 42.", "stop",
                                                        len(ids) + 1)
    control.clear_scripts()

    def stats_lines() -> list[str]:  # the periodic stats line
        return [line for line in log_path.read_text(errors="replace").splitlines()
                if "Engine 000:" in line]

    logged = len(stats_lines())
    metrics = urllib.request.urlopen(base + "/metrics", timeout=10).read().decode()
    assert 'vllm:prompt_tokens_total{engine="0",model_name="tiny"}' in metrics
    # The stats logger took the last scheduler_stats: after a busy interval it
    # logs one more line (at info level), with nothing running.
    wait_for(lambda: any("Running: 0 reqs" in line for line in stats_lines()[logged:]), 30,
             message=lambda: f"no stats line at idle after the last request: {stats_lines()}")
    log = log_path.read_text(errors="replace")
    assert "Traceback" not in log and " ERROR " not in log, log[-3000:]
