"""vLLM's counting rules, in process: the shipped fan-out table and metrics
observer fed engine messages built the way the engine builds them (encoded,
then decoded by the frontend's own decoder), and the /metrics families built
from the result. Times are engine clock readings chosen by the test, so the
histograms' sums are exact.
"""

from __future__ import annotations

import msgspec
import pytest
from prometheus_client import CollectorRegistry, generate_latest

from frontend.cli import build_parser, parse_args
from frontend.choices import Group
from frontend.model import load_model_info
from frontend.openai.completions import CompletionRequest
from frontend.openai.sampling import build_sampling_params
from frontend.ops import vllm_flags
from frontend.ops.buckets import check_bucket_overrides, request_token_buckets
from frontend.ops.rank_stats import RankStats
from frontend.ops.service_metrics import Snapshot
from frontend.ops.stats_recorder import StatsRecorder
from frontend.ops.vllm_metrics import ITL, Exposition, cache_config_labels
from harness.state import SCHEDULER_STATS, make_state
from protocol import wire
from protocol.handshake import ReadyResponse
from tests.support.exposition import parse

QUEUED, SCHEDULED, PREEMPTED = 1, 2, 3
LENGTH, STOP, ERROR = wire.FinishReason.LENGTH, wire.FinishReason.STOP, wire.FinishReason.ERROR
MAX_MODEL_LEN = 1024
# A step's SchedulerStats map that counted nothing, in vLLM's field order.
QUIET_STATS = {**SCHEDULER_STATS, "num_running_reqs": 0, "kv_cache_usage": 0.0,
               "num_kv_fetch_reqs_by_stage": {"waiting_to_start": 0, "in_progress": 0,
                                              "completed_waiting": 0}}


@pytest.fixture(scope="module")
def model(tiny_model_dir):
    return load_model_info(str(tiny_model_dir), served_names=["tiny"])


class Harness:
    """A table with the metrics observer; requests submitted, messages routed."""

    def __init__(self, model) -> None:
        self.model = model
        self.metrics = StatsRecorder(lambda: MAX_MODEL_LEN)
        self.state = make_state(model, MAX_MODEL_LEN, observer=self.metrics)
        self.table = self.state.table

    def submit(self, prompts: list[list[int]], n: int = 1, max_tokens: int = 16,
               **fields) -> Group:
        req = CompletionRequest(model="tiny", prompt="x", max_tokens=max_tokens, n=n,
                                **fields)
        params = build_sampling_params(self.model, req.to_sampling_fields(),
                                       max_tokens=max_tokens, stream=False)
        group = Group("cmpl-test", stream=False)
        for p, ids in enumerate(prompts):
            for j in range(n):
                self.table.add_choice(group, index=p * n + j, prompt_index=p,
                                      prompt_token_ids=ids, params=params)
        self.table.submit(group)
        return group

    def step(self, timestamp: float, *outputs: wire.EngineCoreOutput, engine: int = 0,
             stats: dict | None = None) -> None:
        frames = wire.encode_outputs(wire.EngineCoreOutputs(
            engine_index=engine, outputs=list(outputs), scheduler_stats=stats,
            timestamp=timestamp))
        self.table.on_outputs([wire.decode_step(frames)])

    def families(self) -> dict:
        return families({i: self.metrics.rank(i) for i in sorted({0, *self.metrics.ranks})})


def families(ranks: dict[int, RankStats]) -> dict:
    """/metrics' vLLM families of these ranks' stats, parsed."""
    registry = CollectorRegistry(auto_describe=False)

    class Collector:
        def collect(self):
            yield from Exposition([(str(i), stats) for i, stats in ranks.items()], "tiny",
                                  1.0).families(
                cache_config=cache_config_labels(
                    ReadyResponse(max_model_len=MAX_MODEL_LEN, num_gpu_blocks=1024,
                                  block_size=128), len(ranks), {}),
                count_nans=False, kv_cache_metrics=False)
    registry.register(Collector())
    return parse(generate_latest(registry).decode())


def out(choice, tokens, finish=None, *, first_prompt_len=None, events=None,
        cached=0) -> wire.EngineCoreOutput:
    o = wire.EngineCoreOutput(choice.engine_id, list(tokens), finish_reason=finish)
    if first_prompt_len is not None:
        o.prefill_stats = {"num_prompt_tokens": first_prompt_len,
                           "num_computed_tokens": first_prompt_len - cached,
                           "num_cached_tokens": cached, "num_local_cached_tokens": cached,
                           "num_external_cached_tokens": 0, "num_cache_creation_tokens": 0}
    if events is not None:
        o.events = [{"type": kind, "timestamp": ts} for kind, ts in events]
    return o


def value(families, name, suffix="", **labels):
    return families[name].total(suffix, model_name="tiny", **labels)


def test_request_times_follow_the_engine_events(model):
    """queue = first SCHEDULED - QUEUED; prefill = first token - first
    SCHEDULED; decode = last token - first token; inference = last token -
    first SCHEDULED; a preemption counts once in the counter and the request
    histogram, and its re-SCHEDULED does not move the start."""
    h = Harness(model)
    [c] = h.submit([[5, 6, 7]]).choices
    h.step(100.0, out(c, [11], first_prompt_len=3,
                      events=[(QUEUED, 90.0), (SCHEDULED, 99.0)]))
    h.step(101.0, out(c, [12], events=[(PREEMPTED, 101.5), (SCHEDULED, 102.0)]))
    h.step(103.0, out(c, [13]))
    h.step(104.0, out(c, [14], LENGTH))
    f = h.families()
    e = {"engine": "0"}
    assert value(f, "vllm:request_queue_time_seconds", "_sum", **e) == 9.0
    assert value(f, "vllm:request_prefill_time_seconds", "_sum", **e) == 1.0
    assert value(f, "vllm:request_decode_time_seconds", "_sum", **e) == 4.0
    assert value(f, "vllm:request_inference_time_seconds", "_sum", **e) == 5.0
    assert value(f, "vllm:request_time_per_output_token_seconds", "_sum", **e) == 4.0 / 3
    # One gap per output after the first: 1 + 2 + 1 seconds.
    assert value(f, "vllm:inter_token_latency_seconds", "_count", **e) == 3
    assert value(f, "vllm:inter_token_latency_seconds", "_sum", **e) == 4.0
    assert value(f, "vllm:num_preemptions", "_total", **e) == 1
    assert value(f, "vllm:request_num_preemptions", "_sum", **e) == 1
    assert value(f, "vllm:request_num_preemptions", "_bucket", le="1.0", **e) == 1
    assert value(f, "vllm:request_generation_tokens", "_sum", **e) == 4
    assert value(f, "vllm:request_prompt_tokens", "_sum", **e) == 3
    assert value(f, "vllm:request_params_max_tokens", "_sum", **e) == 16
    assert value(f, "vllm:request_success", "_total", finished_reason="length", **e) == 1
    # Four messages with outputs: 3 computed prompt tokens + 1, then 1 each.
    assert value(f, "vllm:iteration_tokens_total", "_count", **e) == 4
    assert value(f, "vllm:iteration_tokens_total", "_sum", **e) == 7


def test_stop_string_counts_the_tokens_past_it_and_nothing_after(model):
    """A stop string found in a multi-token step: vLLM counts the step's tokens
    before trimming, and ignores later outputs of the request (it is gone)."""
    h = Harness(model)
    text = " the river and the ocean"
    toks = model.encode(text, add_special_tokens=False)
    [c] = h.submit([[5, 6]], stop=["river"]).choices
    h.step(1.0, out(c, toks[:1], first_prompt_len=2))
    h.step(2.0, out(c, toks[1:]))  # "river" is in here: finished by the frontend
    assert c.finish_reason == "stop" and c.num_dropped > 0
    h.step(3.0, out(c, [17]))  # a late output before the ABORT reached the engine
    f = h.families()
    assert value(f, "vllm:generation_tokens", "_total") == len(toks)
    assert value(f, "vllm:request_generation_tokens", "_sum") == len(toks)
    assert value(f, "vllm:request_success", "_total", finished_reason="stop") == 1
    assert value(f, "vllm:inter_token_latency_seconds", "_count") == 1


def test_n_and_max_generation_once_per_prompt_at_its_last_child(model):
    h = Harness(model)
    group = h.submit([[5, 6], [7, 8, 9]], n=2)
    a0, a1, b0, b1 = group.choices
    h.step(1.0, *(out(c, [11], first_prompt_len=len(c.prompt_token_ids))
                  for c in group.choices))
    h.step(2.0, out(a0, [12], LENGTH), out(b0, [12]))
    f = h.families()
    assert value(f, "vllm:request_params_n", "_count") == 0  # no prompt done yet
    h.step(3.0, out(a1, [13, 14], LENGTH), out(b0, [13], LENGTH), out(b1, [12], LENGTH))
    f = h.families()
    assert value(f, "vllm:request_params_n", "_count") == 2
    assert value(f, "vllm:request_params_n", "_sum") == 4
    # prompt a: max(2, 3) tokens; prompt b: max(3, 2).
    assert value(f, "vllm:request_max_num_generation_tokens", "_sum") == 6
    assert value(f, "vllm:request_success", "_total", finished_reason="length") == 4
    assert value(f, "vllm:prompt_tokens", "_total") == 2 + 2 + 3 + 3
    assert value(f, "vllm:time_to_first_token_seconds", "_count") == 4


def test_an_engine_error_is_a_finished_request(model):
    h = Harness(model)
    [c] = h.submit([[5, 6]]).choices
    h.step(1.0, out(c, [], ERROR, events=[(QUEUED, 0.5)]))
    f = h.families()
    assert value(f, "vllm:request_success", "_total", finished_reason="error") == 1
    assert value(f, "vllm:e2e_request_latency_seconds", "_count") == 1
    assert value(f, "vllm:time_to_first_token_seconds", "_count") == 1
    # Never scheduled: no queue/prefill/inference time (vLLM would observe
    # differences to 0.0 here, i.e. raw engine clock values).
    assert value(f, "vllm:request_queue_time_seconds", "_count") == 0
    assert not h.table.entries


def test_client_aborts_are_not_counted(model):
    h = Harness(model)
    group = h.submit([[5, 6]])
    [c] = group.choices
    h.step(1.0, out(c, [11], first_prompt_len=2))
    h.table.release(group)  # the client went away
    h.step(2.0, out(c, [12]))
    f = h.families()
    assert value(f, "vllm:request_success", "_total") == 0
    assert value(f, "vllm:generation_tokens", "_total") == 1
    assert value(f, "vllm:e2e_request_latency_seconds", "_count") == 0
    assert not h.metrics._requests


def test_scheduler_stats_gauges_and_counters(model):
    h = Harness(model)
    base = {"num_running_reqs": 3, "num_waiting_reqs": 2, "num_skipped_waiting_reqs": 1,
            "kv_cache_usage": 0.25, "step_counter": 0,
            "prefix_cache_stats": {"reset": False, "requests": 1, "queries": 300,
                                   "hits": 256, "hits_by_source": {}},
            "connector_prefix_cache_stats": {"queries": 40, "hits": 16,
                                             "hits_by_source": {"host": 16}},
            "spec_decoding_stats": {"num_spec_tokens": 3, "num_drafts": 2,
                                    "num_draft_tokens": 6, "num_accepted_tokens": 4,
                                    "num_accepted_tokens_per_pos": [2, 1, 1],
                                    "num_draft_tokens_per_pos": [2, 2, 2]},
            "perf_stats": {"num_flops_per_gpu": 1000, "num_read_bytes_per_gpu": 10,
                           "num_write_bytes_per_gpu": 5, "debug_stats": None}}
    h.step(1.0, stats=base)
    h.step(2.0, stats={**base, "num_running_reqs": 1, "num_waiting_reqs": 0,
                       "num_skipped_waiting_reqs": 0, "kv_cache_usage": 0.5})
    f = h.families()
    e = {"engine": "0"}
    assert value(f, "vllm:num_requests_running", **e) == 1
    assert value(f, "vllm:kv_cache_usage_perc", **e) == 0.5
    assert value(f, "vllm:prefix_cache_queries", "_total", **e) == 600
    assert value(f, "vllm:prefix_cache_hits", "_total", **e) == 512
    assert value(f, "vllm:external_prefix_cache_queries", "_total", **e) == 80
    assert value(f, "vllm:external_prefix_cache_hits", "_total", **e) == 32
    assert value(f, "vllm:prompt_tokens_cached_by_source", "_total", source="device") == 512
    assert value(f, "vllm:prompt_tokens_cached_by_source", "_total", source="host") == 32
    assert value(f, "vllm:spec_decode_num_drafts", "_total", **e) == 4
    assert value(f, "vllm:spec_decode_num_accepted_tokens_per_pos", "_total",
                 position="0") == 4
    assert value(f, "vllm:estimated_flops_per_gpu", "_total", **e) == 2000
    # Messages with stats only are no engine step for iteration_tokens.
    assert value(f, "vllm:iteration_tokens_total", "_count", **e) == 0
    # A step that counted nothing (vLLM's full map, as the mock sends it)
    # moves the gauges only.
    h.step(3.0, stats={**QUIET_STATS, "num_running_reqs": 0, "num_waiting_reqs": 4,
                       "num_skipped_waiting_reqs": 3})
    f = h.families()
    assert value(f, "vllm:num_requests_waiting", **e) == 7
    assert value(f, "vllm:num_requests_waiting_by_reason", reason="capacity", **e) == 4
    assert value(f, "vllm:num_requests_waiting_by_reason", reason="deferred", **e) == 3
    assert value(f, "vllm:prefix_cache_queries", "_total", **e) == 600
    assert value(f, "vllm:spec_decode_num_drafts", "_total", **e) == 4


def test_every_engine_has_its_own_children(model):
    """Under data parallel each message counts for the engine that sent it."""
    h = Harness(model)
    group = h.submit([[5, 6], [7, 8, 9]])
    a, b = group.choices
    h.step(1.0, out(a, [11], LENGTH, first_prompt_len=2), engine=0)
    h.step(1.0, out(b, [12], first_prompt_len=3), engine=1)
    h.step(2.0, out(b, [13], LENGTH), engine=1)
    f = h.families()
    assert value(f, "vllm:prompt_tokens", "_total", engine="0") == 2
    assert value(f, "vllm:prompt_tokens", "_total", engine="1") == 3
    assert value(f, "vllm:generation_tokens", "_total", engine="1") == 2
    assert value(f, "vllm:inter_token_latency_seconds", "_count", engine="1") == 1
    assert value(f, "vllm:request_success", "_total", engine="1") == 1
    info = f["vllm:cache_config_info"]
    assert {dict(labels)["engine"] for _, labels in info.samples} == {"0", "1"}
    assert {dict(labels)["num_gpu_blocks"] for _, labels in info.samples} == {"2048"}


def test_two_processes_stats_merge_to_their_sum(model):
    """--api-server-count: a rank's stats from two processes, each through a
    snapshot's bytes, merge to the sum of every counter and histogram, with the
    gauges of the later scheduler stats."""
    def workload(h: Harness, t0: float, running: int) -> None:
        x, y = h.submit([[5, 6, 7]], n=2, max_tokens=4).choices
        stats = {**QUIET_STATS, "num_running_reqs": running,
                 "prefix_cache_stats": {"queries": 10 * running, "hits": 4}}
        h.step(t0, out(x, [11], first_prompt_len=3, events=[(QUEUED, t0 - 1),
                                                           (SCHEDULED, t0 - 0.5)]),
               out(y, [12], first_prompt_len=3, events=[(PREEMPTED, t0 - 0.2)]), stats=stats)
        h.step(t0 + 0.25 * running, out(x, [13], LENGTH), out(y, [14], STOP))

    a, b = Harness(model), Harness(model)
    workload(a, 1.0, 3)
    a.step(1.5, stats={**QUIET_STATS, "num_running_reqs": 7, "spec_decoding_stats": {
        "num_spec_tokens": 2, "num_drafts": 1, "num_draft_tokens": 2,
        "num_accepted_tokens": 1, "num_accepted_tokens_per_pos": [1, 0]}})
    workload(b, 5.0, 1)

    def through_bytes(h: Harness) -> Snapshot:
        snapshot = Snapshot({0: h.metrics.rank(0)})
        return msgspec.msgpack.decode(msgspec.msgpack.encode(snapshot), type=Snapshot)

    fa, fb = a.families(), b.families()
    merged = families(through_bytes(a).merge(through_bytes(b)).ranks)
    assert merged.keys() == fa.keys()  # spec decode: in a only
    for name, family in merged.items():
        for key, got in family.samples.items():
            in_a, in_b = (f[name].samples.get(key, 0) if name in f else 0 for f in (fa, fb))
            want = in_b if family.type == "gauge" else in_a + in_b
            assert got == pytest.approx(want), (name, key)
    assert value(merged, "vllm:request_success", "_total") == 4
    assert value(merged, "vllm:num_preemptions", "_total") == 2
    assert value(merged, "vllm:request_queue_time_seconds", "_count") == 2
    assert value(merged, "vllm:num_requests_running") == 1  # b's stats are the later
    assert value(merged, "vllm:spec_decode_num_drafts", "_total") == 1


@pytest.mark.parametrize("max_model_len, last", [
    (1024, 1000), (2048, 2000), (4096, 2000), (8192, 5000), (131072, 100000), (1, 1)])
def test_request_token_buckets_are_vllms(max_model_len, last):
    bounds = request_token_buckets(max_model_len)
    assert bounds[:3] == [1, 2, 5][:len(bounds)] and bounds[-1] == last


def test_inter_token_gaps_of_a_shared_step_equal_one_by_one(model):
    """Gaps of choices whose previous output came in the engine's previous
    message are bucketed together; the result is the same as one by one."""
    h = Harness(model)
    group = h.submit([[5, 6]], n=3, max_tokens=8)
    a, b, c = group.choices
    h.step(1.0, *(out(x, [11], first_prompt_len=2) for x in (a, b, c)))
    h.step(1.5, out(a, [12]), out(b, [12]))  # c skips this message
    h.step(2.25, out(a, [13]), out(b, [13]), out(c, [13]))
    h.step(2.5, out(a, [14], LENGTH), out(b, [14], LENGTH), out(c, [14], LENGTH))
    itl = h.metrics.rank(0).histograms[ITL]
    assert itl.count == 2 + 3 + 3
    assert itl.sum == pytest.approx(2 * 0.5 + 2 * 0.75 + 1.25 + 3 * 0.25)
    assert [n for n in itl.counts if n] == [3, 2, 2, 1]  # 0.25 x3, 0.5 x2, 0.75 x2, 1.25



def test_custom_histogram_buckets_replace_a_familys_bounds(model):
    h = Harness(model)
    h.metrics = StatsRecorder(lambda: MAX_MODEL_LEN, bucket_overrides=check_bucket_overrides(
        {"request_latency": [0.01, 0.5, 2], "request_tokens": [4, 8]}))
    f = h.families()
    assert f["vllm:e2e_request_latency_seconds"].bounds == ("0.01", "0.5", "2.0", "+Inf")
    assert f["vllm:request_queue_time_seconds"].bounds == ("0.01", "0.5", "2.0", "+Inf")
    assert f["vllm:request_prompt_tokens"].bounds == ("4.0", "8.0", "+Inf")
    assert f["vllm:time_to_first_token_seconds"].bounds[0] == "0.001"  # not overridden


@pytest.mark.parametrize("value, message", [
    ({"request_lat": [1]}, "unknown bucket family 'request_lat'"),
    ({"request_latency": []}, "must not be empty"),
    ({"request_latency": [0, 1]}, "bound 0 must be finite and greater than 0"),
    ({"request_latency": [1, float("inf")]}, "bound inf must be finite"),
    ({"request_latency": [True]}, "must be a number, not a boolean"),
    ({"request_latency": [2, 1]}, "must be strictly increasing"),
    ([1, 2], "expected a JSON object"),
])
def test_custom_histogram_buckets_are_checked_as_vllm_does(value, message):
    with pytest.raises(ValueError, match=message):
        check_bucket_overrides(value)


READY_LABELS = {"block_size": "16", "mamba_block_size": "None", "num_gpu_blocks": "2048",
                "effective_attention_block_size": "None", "kv_cache_size_tokens": "None",
                "kv_cache_max_concurrency": "None"}


@pytest.mark.parametrize("argv, from_flags", [
    ([], {}),
    # A deployment's `vllm serve` line, copied: its cache flags are stated as
    # vLLM writes them; the engines' block size wins over the flag's.
    (["--gpu-memory-utilization", "0.8", "--kv-cache-dtype", "fp8", "--block-size", "32",
      "--enable-prefix-caching", "--max-model-len", "8192", "--enforce-eager"],
     {"gpu_memory_utilization": "0.8", "cache_dtype": "fp8", "enable_prefix_caching": "True"}),
    (["--no-enable-prefix-caching", "--kv-cache-memory-bytes", "1G",
      "--num-gpu-blocks-override", "64"],
     {"enable_prefix_caching": "False", "kv_cache_memory_bytes": "1073741824",
      "num_gpu_blocks_override": "64"}),
    # "auto" is vLLM's to resolve (from the model, for the host): not stated.
    (["--kv-cache-dtype", "auto", "--mamba-ssm-cache-dtype", "auto"], {}),
], ids=["no-flags", "deployment-line", "other-flags", "auto"])
def test_cache_config_info_states_what_the_engines_and_the_operator_said(argv, from_flags):
    """vllm:cache_config_info: the engines' ready-response labels, plus the
    CacheConfig fields of the engine flags given; nothing else (no default the
    frontend never saw)."""
    flags = vllm_flags.recorded(parse_args(build_parser(), ["serve", "m", *argv]))
    ready = ReadyResponse(max_model_len=MAX_MODEL_LEN, num_gpu_blocks=1024, block_size=16)
    assert cache_config_labels(ready, 2, flags.cache_config()) == READY_LABELS | from_flags
