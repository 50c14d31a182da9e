"""GET /metrics: vLLM's families and labels, and values that equal a known workload."""

from __future__ import annotations

import asyncio

import aiohttp
import pytest

from harness.frontend import SERVED_NAME
from harness.waits import wait_for, wait_for_async
from tests.support.http_client import metric, parse_metrics, scrape
from tests.support.ops import post_json, read_stream, run

VLLM = {"model_name": SERVED_NAME, "engine": "0"}


async def _scrape(session: aiohttp.ClientSession, url: str) -> tuple[dict, str, str]:
    async with session.get(url + "/metrics") as r:
        assert r.status == 200
        text = await r.text()
        return parse_metrics(text), text, r.headers["Content-Type"]


def test_metrics_after_known_workload(start_ops_stack):
    stack = start_ops_stack(engine_args=("--step-time", "0.002"))

    async def main():
        async with aiohttp.ClientSession() as s:
            results = await asyncio.gather(*[
                post_json(s, stack.url + "/v1/completions", {
                    "model": SERVED_NAME, "prompt": f"hello number {i}", "n": 2,
                    "max_tokens": 5 + i, "ignore_eos": True, "temperature": 1.0})
                for i in range(3)])
            # One streamed request too (n=1, stop at max_tokens).
            async with s.post(stack.url + "/v1/completions", json={
                    "model": SERVED_NAME, "prompt": [7, 8, 9, 10], "max_tokens": 4,
                    "stream": True, "stream_options": {"include_usage": True}}) as r:
                events = await read_stream(r)
            await s.get(stack.url + "/health")
            async with s.get(stack.url + "/nope") as r:
                assert r.status == 404
            samples, text, ctype = await _scrape(s, stack.url)
            return results, events, samples, text, ctype

    results, events, samples, text, ctype = run(main())
    assert ctype == "text/plain; version=1.0.0; charset=utf-8"
    assert all(status == 200 for status, _, _ in results)
    usage = [body["usage"] for _, body, _ in results]
    stream_usage = events[-2]["usage"]
    assert events[-1] == "[DONE]"

    completion_tokens = sum(u["completion_tokens"] for u in usage) + \
        stream_usage["completion_tokens"]
    assert completion_tokens == 2 * (5 + 6 + 7) + 4
    # vLLM counts per engine request: each of the n=2 children has the prompt.
    prompt_tokens = sum(2 * u["prompt_tokens"] for u in usage) + stream_usage["prompt_tokens"]

    assert metric(samples, "vllm:generation_tokens_total", **VLLM) == completion_tokens
    assert metric(samples, "vllm:prompt_tokens_total", **VLLM) == prompt_tokens
    # request_success counts engine requests (choices): 3 x n=2 + 1.
    assert metric(samples, "vllm:request_success_total", finished_reason="length",
                  **VLLM) == 7
    for reason in ("stop", "abort", "error", "repetition"):
        assert metric(samples, "vllm:request_success_total", finished_reason=reason,
                      **VLLM) == 0
    assert metric(samples, "vllm:time_to_first_token_seconds_count", **VLLM) == 7
    assert metric(samples, "vllm:e2e_request_latency_seconds_count", **VLLM) == 7
    # One inter-token gap per choice per step after its first (1 token a step).
    assert metric(samples, "vllm:inter_token_latency_seconds_count", **VLLM) == \
        completion_tokens - 7
    assert metric(samples, "vllm:inter_token_latency_seconds_sum", **VLLM) > 0
    # n is observed once per prompt: three n=2 and one n=1.
    assert metric(samples, "vllm:request_params_n_count", **VLLM) == 4
    assert metric(samples, "vllm:request_params_n_sum", **VLLM) == 7
    assert metric(samples, "vllm:request_params_n_bucket", le="1.0", **VLLM) == 1
    assert metric(samples, "vllm:request_params_n_bucket", le="2.0", **VLLM) == 4
    assert metric(samples, "vllm:request_params_n_bucket", le="+Inf", **VLLM) == 4
    assert metric(samples, "vllm:request_max_num_generation_tokens_sum", **VLLM) == \
        5 + 6 + 7 + 4
    # Per engine request: the mock sends vLLM's QUEUED/SCHEDULED events and
    # prefill stats, so every per-request family has all 7.
    for family in ("request_queue_time_seconds", "request_prefill_time_seconds",
                   "request_decode_time_seconds", "request_inference_time_seconds",
                   "request_time_per_output_token_seconds", "request_prompt_tokens",
                   "request_generation_tokens", "request_params_max_tokens",
                   "request_prefill_kv_computed_tokens", "request_num_preemptions"):
        assert metric(samples, f"vllm:{family}_count", **VLLM) == 7, family
    assert metric(samples, "vllm:request_generation_tokens_sum", **VLLM) == completion_tokens
    assert metric(samples, "vllm:request_params_max_tokens_sum", **VLLM) == \
        2 * (5 + 6 + 7) + 4
    assert metric(samples, "vllm:prompt_tokens_by_source_total", source="local_compute",
                  **VLLM) + metric(samples, "vllm:prompt_tokens_by_source_total",
                                   source="local_cache_hit", **VLLM) == prompt_tokens
    assert metric(samples, "vllm:engine_sleep_state", sleep_state="awake", **VLLM) == 1
    assert 'vllm:cache_config_info{' in text
    # vLLM's buckets.
    assert 'vllm:time_to_first_token_seconds_bucket{engine="0",le="0.001"' in text
    assert 'vllm:inter_token_latency_seconds_bucket{engine="0",le="0.01"' in text
    assert 'vllm:e2e_request_latency_seconds_bucket{engine="0",le="7680.0"' in text
    assert ("vllm:time_to_first_token_seconds_created", frozenset(VLLM.items())) in samples
    # Gauges from the engine's scheduler stats: nothing runs now.
    assert metric(samples, "vllm:num_requests_running", **VLLM) == 0
    assert metric(samples, "vllm:num_requests_waiting", **VLLM) == 0
    assert metric(samples, "vllm:kv_cache_usage_perc", **VLLM) == 0
    # HTTP families.
    assert metric(samples, "http_requests_total", handler="/v1/completions", method="POST",
                  status="200") == 4
    assert metric(samples, "http_requests_total", handler="/health", method="GET",
                  status="200") >= 1
    assert metric(samples, "http_requests_total", handler="none", method="GET",
                  status="404") == 1
    assert metric(samples, "vllm_frontend_open_streams") == 0
    assert metric(samples, "vllm_frontend_requests_in_flight") == 0
    assert metric(samples, "vllm_frontend_fanout_entries") == 0
    assert metric(samples, "vllm_frontend_engine_alive") == 1
    assert metric(samples, "vllm_frontend_client_disconnects_total") == 0
    assert metric(samples, "vllm_frontend_engine_aborts_total") == 0
    assert metric(samples, "vllm_frontend_rejected_requests_total", reason="unauthorized") == 0
    assert ("process_resident_memory_bytes", frozenset()) in samples
    stats = stack.wait_engine_idle()
    assert stats["finished"]["length"] == 7


def test_metrics_gauges_while_streaming_and_disconnects(start_ops_stack):
    """Open streams, running requests and the fan-out table while a stream runs;
    a client that goes away counts as a disconnect and its engine request is aborted."""
    stack = start_ops_stack(engine_args=("--step-time", "0.02"))

    async def main():
        async with aiohttp.ClientSession() as s:
            r = await s.post(stack.url + "/v1/completions", json={
                "model": SERVED_NAME, "prompt": "a long one", "max_tokens": 500,
                "ignore_eos": True, "stream": True, "n": 3})
            assert r.status == 200
            await r.content.readline()
            samples: dict = {}

            async def shows(name: str, value: float, **labels: str) -> bool:
                nonlocal samples
                samples, _, _ = await _scrape(s, stack.url)
                return metric(samples, name, **labels) == value

            await wait_for_async(lambda: shows("vllm:num_requests_running", 3, **VLLM), 30,
                                 message="scheduler stats never showed 3 running")
            assert metric(samples, "vllm_frontend_open_streams") == 1
            assert metric(samples, "vllm_frontend_requests_in_flight") == 1
            assert metric(samples, "vllm_frontend_fanout_entries") == 3
            assert metric(samples, "vllm:kv_cache_usage_perc", **VLLM) > 0
            r.close()  # the client goes away mid-stream
            await wait_for_async(lambda: shows("vllm_frontend_open_streams", 0), 30,
                                 message="the stream stayed open")
            return samples

    samples = run(main())
    assert metric(samples, "vllm_frontend_client_disconnects_total") == 1
    assert metric(samples, "http_requests_total", handler="/v1/completions", method="POST",
                  status="499") == 1
    stats = stack.wait_engine_idle()
    assert stats["aborted"] == 3
    wait_for(lambda: metric(scrape(stack.url), "vllm_frontend_engine_aborts_total") == 3, 30,
             message="the frontend did not count 3 aborts")
    samples = scrape(stack.url)
    # Client-aborted requests are not successes (as in vLLM).
    assert sum(metric(samples, "vllm:request_success_total", finished_reason=r, **VLLM)
               for r in ("stop", "length", "abort", "error", "repetition")) == 0


def test_disable_log_stats_keeps_http_metrics(start_ops_stack):
    stack = start_ops_stack("--disable-log-stats")

    async def main():
        async with aiohttp.ClientSession() as s:
            status, _, _ = await post_json(s, stack.url + "/v1/completions", {
                "model": SERVED_NAME, "prompt": "hi", "max_tokens": 3})
            assert status == 200
            return await _scrape(s, stack.url)

    samples, text, _ = run(main())
    assert "vllm:" not in text
    assert metric(samples, "http_requests_total", handler="/v1/completions", method="POST",
                  status="200") == 1


def test_cache_config_info_states_the_cache_flags_given(start_ops_stack):
    """Engine cache flags on the frontend's command line (as in a copied `vllm
    serve` line) label vllm:cache_config_info next to what the engine's ready
    response says; a setting nobody gave is not a label. (The unit cases:
    tests/test_metrics_rules.py.)"""
    stack = start_ops_stack("--gpu-memory-utilization", "0.8", "--kv-cache-dtype", "fp8",
                            "--no-enable-prefix-caching")
    info = [dict(labels) for (name, labels), value in scrape(stack.url).items()
            if name == "vllm:cache_config_info" and value == 1]
    assert len(info) == 1, info
    labels = info[0]
    assert (labels["gpu_memory_utilization"], labels["cache_dtype"],
            labels["enable_prefix_caching"]) == ("0.8", "fp8", "False")
    assert labels["num_gpu_blocks"] == str(int(labels["num_gpu_blocks"]))  # the engine's
    assert "mamba_ssm_cache_dtype" not in labels and "kv_cache_memory_bytes" not in labels


@pytest.mark.parametrize("scrapes", [3])
def test_metrics_scrape_is_stable(start_ops_stack, scrapes):
    """Counters only grow and families keep their label sets across scrapes."""
    stack = start_ops_stack()

    async def main():
        async with aiohttp.ClientSession() as s:
            seen = []
            for _ in range(scrapes):
                await post_json(s, stack.url + "/v1/completions", {
                    "model": SERVED_NAME, "prompt": "x", "max_tokens": 2})
                samples, _, _ = await _scrape(s, stack.url)
                seen.append(samples)
            return seen

    seen = run(main())
    for before, after in zip(seen, seen[1:]):
        assert metric(after, "vllm:generation_tokens_total", **VLLM) == \
            metric(before, "vllm:generation_tokens_total", **VLLM) + 2
        vllm_keys = {k for k in before if k[0].startswith("vllm:")}
        assert vllm_keys <= set(after)


@pytest.mark.real_engine
def test_metrics_on_the_real_engine(frontend):
    """vLLM's real scheduler stats feed the gauges; counters move by what was sent."""
    async def main():
        async with aiohttp.ClientSession() as s:
            before, _, _ = await _scrape(s, frontend.url)
            status, body, _ = await post_json(s, frontend.url + "/v1/completions", {
                "model": SERVED_NAME, "prompt": "The metrics of a real engine", "n": 2,
                "max_tokens": 5, "ignore_eos": True, "temperature": 0.8, "seed": 3})
            after, text, _ = await _scrape(s, frontend.url)
            return before, status, body, after, text

    before, status, body, after, text = run(main())
    assert status == 200

    def delta(name: str, **labels: str) -> float:
        return metric(after, name, **VLLM, **labels) - metric(before, name, **VLLM, **labels)

    usage = body["usage"]
    assert delta("vllm:generation_tokens_total") == usage["completion_tokens"] == 10
    assert delta("vllm:prompt_tokens_total") == 2 * usage["prompt_tokens"]
    assert delta("vllm:request_success_total", finished_reason="length") == 2
    assert delta("vllm:time_to_first_token_seconds_count") == 2
    assert delta("vllm:inter_token_latency_seconds_count") == 8
    assert delta("vllm:request_params_n_sum") == 2
    for gauge in ("vllm:num_requests_running", "vllm:num_requests_waiting"):
        assert metric(after, gauge, **VLLM) >= 0
    assert 0 <= metric(after, "vllm:kv_cache_usage_perc", **VLLM) <= 1
    assert "vllm:prompt_tokens_cached_total" in text


def test_engine_error_finish_counts_as_error(start_ops_stack):
    stack = start_ops_stack()
    stack.control().error_next(1)

    async def main():
        async with aiohttp.ClientSession() as s:
            status, body, _ = await post_json(s, stack.url + "/v1/completions", {
                "model": SERVED_NAME, "prompt": "fail", "max_tokens": 4})
            ok, _, _ = await post_json(s, stack.url + "/v1/completions", {
                "model": SERVED_NAME, "prompt": "fine", "max_tokens": 4})
            samples, _, _ = await _scrape(s, stack.url)
            return status, ok, samples

    status, ok, samples = run(main())
    assert status == 500 and ok == 200
    assert metric(samples, "vllm:request_success_total", finished_reason="error", **VLLM) == 1
    assert metric(samples, "vllm:request_success_total", finished_reason="length", **VLLM) == 1
    assert metric(samples, "http_requests_total", handler="/v1/completions", method="POST",
                  status="500") == 1
