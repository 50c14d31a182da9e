"""Body limit (413), admission control (429, counting choices), slow consumers."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import socket

import aiohttp
import pytest

from frontend.openai import chat, completions, generate
from harness.frontend import SERVED_NAME
from harness.waits import wait_for, wait_for_async
from tests.support.http_client import metric, parse_metrics, scrape
from tests.support.ops import post_json, read_stream, run, stream_tokens


async def _metrics(session: aiohttp.ClientSession, url: str) -> dict:
    async with session.get(url + "/metrics") as r:
        return parse_metrics(await r.text())


def _assert_openai_error(body, code: int) -> None:
    assert set(body) == {"error"}
    assert set(body["error"]) == {"message", "type", "param", "code"}
    assert body["error"]["code"] == code


# ------------------------------------------------------------------------ body limit
def test_body_limit_default_32mib(start_ops_stack):
    stack = start_ops_stack()
    filler = 32 * 1024 * 1024  # with the JSON around it, one byte over is enough

    async def main():
        async with aiohttp.ClientSession() as s:
            big = json.dumps({"model": SERVED_NAME, "prompt": "x" * filler}).encode()
            async with s.post(stack.url + "/v1/completions", data=big,
                              headers={"Content-Type": "application/json"}) as r:
                status, body = r.status, await r.json()
            ok = await post_json(s, stack.url + "/v1/completions",
                                 {"model": SERVED_NAME, "prompt": "x" * 1000, "max_tokens": 1})
            return status, body, ok[0]

    status, body, ok = run(main())
    assert status == 413
    _assert_openai_error(body, 413)
    assert ok == 200


def test_body_limit_flag_content_length_and_chunked(start_ops_stack):
    stack = start_ops_stack("--max-request-body-size", "2KiB")

    async def chunks(data: bytes):
        for i in range(0, len(data), 512):
            yield data[i:i + 512]

    async def main():
        async with aiohttp.ClientSession() as s:
            body = json.dumps({"model": SERVED_NAME, "prompt": "y" * 3000}).encode()
            async with s.post(stack.url + "/v1/completions", data=body,
                              headers={"Content-Type": "application/json"}) as r:
                sized = r.status, await r.json()
            async with s.post(stack.url + "/tokenize", data=chunks(body),
                              headers={"Content-Type": "application/json"}) as r:
                chunked = r.status, await r.json()
            small = await post_json(s, stack.url + "/v1/completions",
                                    {"model": SERVED_NAME, "prompt": "y" * 100,
                                     "max_tokens": 1})
            return sized, chunked, small[0], await _metrics(s, stack.url)

    sized, chunked, small, samples = run(main())
    assert sized[0] == 413 and chunked[0] == 413
    _assert_openai_error(sized[1], 413)
    _assert_openai_error(chunked[1], 413)
    assert "2048" in sized[1]["error"]["message"]
    assert small == 200
    assert metric(samples, "vllm_frontend_rejected_requests_total",
                  reason="body_too_large") == 2
    assert metric(samples, "http_requests_total", handler="/v1/completions", method="POST",
                  status="413") == 1


# ------------------------------------------------------------------------ admission
def test_count_choices_without_decoding_prompts():
    count = completions.count_choices
    assert count(b'{"prompt": "a"}') == 1
    assert count(b'{"prompt": "a", "n": 4}') == 4
    assert count(b'{"prompt": ["a", "b", "c"], "n": 2}') == 6
    assert count(b'{"prompt": [1, 2, 3], "n": 3}') == 3
    assert count(b'{"prompt": [[1, 2], [3], [4]], "n": "2"}') == 6
    assert count(json.dumps({"prompt": ["p"] * 8, "n": 4}).encode()) == 32
    assert count(b'{"prompt": [], "n": 0}') == 1
    assert count(b"not json") == 1
    assert chat.count_choices(b'{"messages": [], "n": 5}') == 5
    assert generate.count_choices(b'{"token_ids": [1], "sampling_params": {"n": 3}}') == 3
    assert generate.count_choices(b'{"token_ids": [1]}') == 1


def test_every_generation_route_is_admission_controlled(tiny_model_dir):
    """The route table is the one list: each POST route that starts engine work
    has a choice counter, so admission and the drain gate cover it."""
    from frontend.model import load_model_info
    from frontend.openai.routes import openai_routes
    from harness.state import make_state

    state = make_state(load_model_info(str(tiny_model_dir), served_names=["tiny"]))
    # Every optional route on: the LoRA admin routes too.
    state.config = dataclasses.replace(state.config, runtime_lora_updating=True,
                                       enable_debug_endpoints=True)
    routes = openai_routes(state)
    # (render answers with the engine request it would send; abort ends engine work)
    not_generation = {"/tokenize", "/detokenize", "/v1/load_lora_adapter",
                      "/v1/unload_lora_adapter", "/v1/chat/completions/render",
                      "/v1/completions/render", "/inference/v1/abort_requests"}
    for route in routes:
        if route.method == "POST" and route.path not in not_generation:
            assert route.count_choices is not None, route.path
    assert {r.path for r in routes if r.count_choices} >= {
        "/v1/completions", "/v1/chat/completions", "/inference/v1/generate"}


LIMIT = 6
TOKENS = 100  # 2 s at 0.02 s a step: the whole burst arrives meanwhile


def test_over_limit_burst_rejects_exactly_the_excess(start_ops_stack):
    """10 concurrent requests against a limit of 6 choices: exactly 4 get 429, and
    every admitted one completes with all its tokens."""
    stack = start_ops_stack("--max-concurrent-requests", str(LIMIT),
                            engine_args=("--step-time", "0.02"))
    burst = 10

    async def one(s: aiohttp.ClientSession, i: int, stream: bool):
        body = {"model": SERVED_NAME, "prompt": f"burst {i}", "max_tokens": TOKENS,
                "ignore_eos": True, "return_token_ids": True, "stream": stream}
        async with s.post(stack.url + "/v1/completions", json=body) as r:
            if r.status != 200:
                return r.status, await r.json(), r.headers
            if stream:
                return 200, stream_tokens(await read_stream(r)), r.headers
            data = await r.json()
            return 200, len(data["choices"][0]["token_ids"]), r.headers

    async def main():
        async with aiohttp.ClientSession() as s:
            results = await asyncio.gather(*[one(s, i, stream=i % 2 == 0)
                                             for i in range(burst)])
            return results, await _metrics(s, stack.url)

    results, samples = run(main())
    admitted = [r for r in results if r[0] == 200]
    rejected = [r for r in results if r[0] != 200]
    assert len(admitted) == LIMIT and len(rejected) == burst - LIMIT
    assert all(tokens == TOKENS for _, tokens, _ in admitted)
    for status, body, headers in rejected:
        assert status == 429
        _assert_openai_error(body, 429)
        assert body["error"]["type"] == "TooManyRequestsError"
        assert headers["Retry-After"] == "1"
    assert metric(samples, "vllm_frontend_rejected_requests_total",
                  reason="too_many_requests") == burst - LIMIT
    assert metric(samples, "vllm_frontend_choices_in_flight") == 0
    stats = stack.wait_engine_idle()
    assert stats["adds"] == LIMIT and stats["finished"]["length"] == LIMIT


def test_admission_counts_choices_and_frees_them(start_ops_stack):
    """A batch of 2 prompts x n=3 takes 6 of 6 slots: a 1-choice request is refused
    while it runs, admitted after; a request of 7 choices can never fit (400); the
    check runs before tokenization (an over-long prompt gets 429, not 400)."""
    stack = start_ops_stack("--max-concurrent-requests", str(LIMIT),
                            engine_args=("--step-time", "0.02"))

    async def main():
        async with aiohttp.ClientSession() as s:
            big = asyncio.create_task(post_json(s, stack.url + "/v1/completions", {
                "model": SERVED_NAME, "prompt": ["one", "two"], "n": 3,
                "max_tokens": TOKENS, "ignore_eos": True}))
            async def big_admitted() -> bool:
                samples = await _metrics(s, stack.url)
                return metric(samples, "vllm_frontend_choices_in_flight") >= 6

            await wait_for_async(big_admitted, 30, interval=0.02,
                                 message="the 6-choice request never held its slots")
            refused = await post_json(s, stack.url + "/v1/completions",
                                      {"model": SERVED_NAME, "prompt": "x", "max_tokens": 1})
            too_long = await post_json(s, stack.url + "/v1/completions",
                                       {"model": SERVED_NAME, "prompt": "word " * 5000,
                                        "max_tokens": 1})
            gen = await post_json(s, stack.url + "/inference/v1/generate",
                                  {"token_ids": [5, 6], "sampling_params": {"max_tokens": 1}})
            big_status, big_body, _ = await big
            after = await post_json(s, stack.url + "/v1/completions",
                                    {"model": SERVED_NAME, "prompt": "x", "max_tokens": 1})
            never = await post_json(s, stack.url + "/v1/completions",
                                    {"model": SERVED_NAME, "prompt": "x", "n": 7,
                                     "max_tokens": 1})
            return refused, too_long, gen, (big_status, big_body), after, never

    refused, too_long, gen, big, after, never = run(main())
    assert refused[0] == 429
    assert too_long[0] == 429  # not 400: nothing was tokenized
    assert gen[0] == 429
    assert big[0] == 200 and len(big[1]["choices"]) == 6
    assert after[0] == 200
    assert never[0] == 400
    _assert_openai_error(never[1], 400)
    assert "--max-concurrent-requests" in never[1]["error"]["message"]


# ------------------------------------------------------------------------ slow consumers
def test_slow_consumer_is_aborted_and_engine_freed(start_ops_stack):
    """A client that never reads its stream: once the frontend's bounded buffer
    (--max-stream-buffer bytes) is full the request is aborted in the engine."""
    stack = start_ops_stack("--max-stream-buffer", "32",
                            engine_args=("--max-model-len", str(1 << 20)))
    host, port = "127.0.0.1", stack.frontend.port
    body = json.dumps({"model": SERVED_NAME, "prompt": "flood", "stream": True,
                       "max_tokens": (1 << 20) - 64, "ignore_eos": True}).encode()
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.connect((host, port))
    try:
        sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n"
                     b"Content-Type: application/json\r\nContent-Length: "
                     + str(len(body)).encode() + b"\r\n\r\n" + body)
        control = stack.control()

        def aborted() -> bool:  # never read: the socket buffers fill, then the frontend's
            stats = control.stats()
            return stats["aborted"] >= 1 and stats["running"] == 0

        wait_for(aborted, 60, interval=0.1,
                 message=lambda: f"stream was never aborted: {control.stats()}")
        assert control.stats()["waiting"] == 0
        state = stack.frontend.debug_state()
        assert state["table"] == 0
    finally:
        sock.close()
    stack.frontend.wait_idle()
    wait_for(lambda: metric(scrape(stack.url), "vllm_frontend_open_streams") == 0, 10,
             message="the aborted stream is still open")
    samples = scrape(stack.url)
    assert metric(samples, "vllm_frontend_slow_consumer_aborts_total") == 1
    assert metric(samples, "vllm_frontend_engine_aborts_total") >= 1


@pytest.mark.parametrize("flag,value", [
    ("--max-concurrent-requests", "lots"), ("--max-request-body-size", "12XB"),
    ("--allowed-origins", "[1]"), ("--allowed-methods", "[broken"),
    ("--ssl-cert-reqs", "5"), ("--log-format", "xml")])
def test_ops_flags_reject_garbage(flag, value):
    from frontend.cli import build_parser
    with pytest.raises(SystemExit):
        build_parser().parse_args(["--engine-addr", "tcp://127.0.0.1:1", "--model", "m",
                                   flag, value])


def test_ops_flag_values():
    from frontend.cli import build_parser
    from frontend.ops import flags
    args = build_parser().parse_args([
        "--engine-addr", "tcp://127.0.0.1:1", "--model", "m", "--max-request-body-size",
        "512k", "--allowed-origins", "https://a.example, https://b.example",
        "--api-key", "k1", "k2", "--api-key", "k3"])
    assert args.max_request_body_size == 512 * 1024
    assert args.allowed_origins == ["https://a.example", "https://b.example"]
    config = flags.config_from_args(args, environ={"VLLM_API_KEY": "env"})
    assert config.api_keys == ["k1", "k2", "k3"]
    assert "k1" not in repr(config)
    defaults = flags.config_from_args(build_parser().parse_args(
        ["--engine-addr", "tcp://127.0.0.1:1", "--model", "m"]), environ={})
    assert (defaults.api_keys, defaults.allowed_origins, defaults.allowed_methods,
            defaults.allowed_headers, defaults.allow_credentials) == ([], [], ["*"], ["*"], False)
    assert build_parser().parse_args(["--engine-addr", "x", "--model", "m"]) \
        .max_request_body_size == 32 * 1024 * 1024
