"""The operational routes on our frontend alone (a mock engine): what the
comparison with vLLM's server (tests/test_operational_parity.py) cannot show.

* without their flags: /load says 0 whatever runs, /tokenizer_info and the
  dev-mode and profiling routes are not there, --disable-fastapi-docs removes
  the docs; --api-key guards none of /ping, /load, /invocations;
* /invocations goes through admission like the route it is sent to;
* a paused engine's silence is no stall (--engine-stall-timeout);
* RL /abort_requests by vLLM's external ids: one prompt of a batch, or every
  request in flight (and how many ids vLLM would count);
* a profiling session the engine refuses is over (no 409 after it).
"""

from __future__ import annotations

import json

import pytest

from harness.waits import wait_for
from tests.support.http_client import RawRequest
from tests.support.operational import DEV_MODE, call, ours_on_mock, sse_events

KEY = "sk-ops-routes-7c1d"
LONG = {"model": "tiny", "prompt": "Hello", "max_tokens": 1000, "ignore_eos": True,
        "temperature": 0}
STALL_S = 0.5
PROFILER = json.dumps({"profiler": "torch", "torch_profiler_dir": "/tmp/unused"})


@pytest.fixture(scope="module")
def dev(tiny_model_dir, tmp_path_factory):
    """Dev mode, load tracking, a short stall timeout, a choice limit, and a
    profiler the engine does not have (the mock runs without one)."""
    served = ours_on_mock(tiny_model_dir, tmp_path_factory.mktemp("ops-dev"),
                          "--enable-server-load-tracking", "--engine-stall-timeout",
                          str(STALL_S), "--max-concurrent-requests", "8",
                          "--profiler-config", PROFILER,
                          engine_args=("--step-time", "0.005"), env=DEV_MODE)
    yield served
    served.stop()


@pytest.fixture(scope="module")
def plain(tiny_model_dir, tmp_path_factory):
    """No operational flags, no dev mode; the docs off; an API key."""
    served = ours_on_mock(tiny_model_dir, tmp_path_factory.mktemp("ops-plain"),
                          "--disable-fastapi-docs", "--api-key", KEY,
                          engine_args=("--step-time", "0.005"))
    yield served
    served.stop()


def open_stream(url: str, path: str, body: dict) -> RawRequest:
    raw = RawRequest(url, path, {**body, "stream": True})
    raw.read_until(b"data: ", count=2)  # running: some tokens are out
    return raw


def finish(raw: RawRequest) -> list:
    raw.read_all()
    raw.close()
    return sse_events(raw.received)


def test_without_the_flags(plain):
    url = plain.url
    raw = open_stream(url, "/invocations", LONG)  # (not behind the API key)
    assert call(url, "GET", "/load").value == {"server_load": 0}  # not tracked
    assert call(url, "POST", "/abort_requests", {}).status == 404  # no dev mode
    raw.close()
    for method, path in [("GET", "/tokenizer_info"), ("POST", "/sleep"), ("POST", "/pause"),
                         ("POST", "/collective_rpc"), ("GET", "/server_info"),
                         ("POST", "/start_profile"), ("GET", "/openapi.json"),
                         ("GET", "/docs"), ("GET", "/redoc"), ("GET", "/docs/oauth2-redirect")]:
        answer = call(url, method, path)
        assert (answer.status, answer.value) == (404, {"detail": "Not Found"}), path
    assert call(url, "GET", "/ping").status == 200
    wait_for(lambda: plain.frontend.debug_state()["table"] == 0, 30)


def test_api_key_guards_only_vllms_prefixes(plain):
    url = plain.url
    assert call(url, "GET", "/v1/models").status == 401
    assert call(url, "GET", "/v1/models", headers={"Authorization": f"Bearer {KEY}"}).status == 200
    for method, path, body in [("GET", "/ping", None), ("POST", "/ping", None),
                               ("GET", "/load", None),
                               ("POST", "/invocations", {"prompt": "hi", "max_tokens": 2})]:
        assert call(url, method, path, body).status == 200, path


def test_invocations_is_admitted_as_the_route_it_goes_to(dev):
    """--max-concurrent-requests 8: 3 prompts x n=3 is 9 choices, refused by
    admission for /invocations as for /v1/completions (chat: n=9 as well)."""
    many = {"prompt": ["a", "b", "c"], "n": 3, "max_tokens": 2}
    for path, body in [("/invocations", many), ("/invocations", {
            "messages": [{"role": "user", "content": "x"}], "n": 9, "max_tokens": 2})]:
        answer = call(dev.url, "POST", path, body)
        assert answer.status == 400 and "admits at most 8" in answer.value["error"]["message"]
    assert call(dev.url, "POST", "/invocations", {**many, "n": 2}).status == 200


def test_a_paused_engine_is_no_stall(dev):
    """A stream frozen by /pause (keep) for many stall timeouts stays open and
    its engine rank serving; after /resume it runs again."""
    url = dev.url
    raw = open_stream(url, "/v1/completions", LONG)
    try:
        assert call(url, "POST", "/pause?mode=keep&clear_cache=false").value == {
            "status": "paused"}
        seen = raw.received.count(b"data: ")
        states = []

        def checked_for_a_while() -> bool:  # the stall watch runs every STALL_S / 4
            states.append(dev.frontend.debug_state()["ranks"][0]["state"])
            return len(states) >= 30

        wait_for(checked_for_a_while, 60, interval=STALL_S / 5)
        assert set(states) == {"serving"}, states
        assert b"[DONE]" not in raw.received
    finally:
        assert call(url, "POST", "/resume").value == {"status": "resumed"}
    raw.read_until(b"data: ", count=seen + 3)  # it runs again
    assert call(url, "POST", "/abort_requests", {}).value["aborted"] == 1
    assert finish(raw)[-2]["choices"][0]["finish_reason"] == "abort"


def test_abort_one_prompt_of_a_batch_by_its_external_id(dev):
    """cmpl-<id>-1 aborts the second prompt's choices only; the first runs on.
    With request ids given, "aborted" counts them (known or not)."""
    url = dev.url
    body = {**LONG, "prompt": ["Hello", "World"], "n": 2, "temperature": 1.0,
            "request_id": "batch-7"}
    raw = open_stream(url, "/v1/completions", body)
    answer = call(url, "POST", "/abort_requests", {"request_ids": ["cmpl-batch-7-1", "nope"]})
    assert answer.value == {"status": "aborted", "aborted": 2}
    raw.read_until(b'"finish_reason":"abort"', count=2)
    assert call(url, "GET", "/load").value == {"server_load": 1}  # the stream is still open
    answer = call(url, "POST", "/abort_requests", {"request_ids": []})  # empty: all
    assert answer.value == {"status": "aborted", "aborted": 3}  # 2 choices + their parent
    finals = {}
    for event in finish(raw)[:-1]:
        for choice in event["choices"]:
            if choice.get("finish_reason"):
                finals[choice["index"]] = choice["finish_reason"]
    assert finals == {0: "abort", 1: "abort", 2: "abort", 3: "abort"}
    wait_for(lambda: call(url, "GET", "/load").value == {"server_load": 0}, 30)
    wait_for(lambda: dev.frontend.debug_state()["table"] == 0, 30)


def test_abort_a_non_streaming_chat_by_its_id(dev):
    """A non-streaming chat request aborted by chatcmpl-<id>: its answer is a
    200 with finish_reason "abort" (what vLLM's clients get)."""
    import threading

    url = dev.url
    got = {}
    body = {"model": "tiny", "messages": [{"role": "user", "content": "x"}],
            "max_tokens": 1000, "ignore_eos": True, "request_id": "chat-9"}
    thread = threading.Thread(target=lambda: got.update(
        answer=call(url, "POST", "/v1/chat/completions", body)))
    thread.start()
    wait_for(lambda: dev.frontend.debug_state()["table"] == 1, 30)
    answer = call(url, "POST", "/abort_requests", {"request_ids": ["chatcmpl-chat-9"]})
    assert answer.value == {"status": "aborted", "aborted": 1}
    thread.join(30)
    reply = got["answer"]
    assert reply.status == 200, reply.body
    assert reply.value["choices"][0]["finish_reason"] == "abort"


def test_scale_out_abort_by_external_id(dev):
    """/inference/v1/abort_requests (vLLM's scale-out route, not dev mode):
    generate-tokens-<id> ends both samples with finish_reason "abort", and the
    answer is vLLM's empty 200 at once."""
    url = dev.url
    body = {"token_ids": [1, 2, 3], "request_id": "g-5", "stream": True,
            "sampling_params": {"max_tokens": 1000, "ignore_eos": True, "n": 2,
                                "temperature": 1.0}}
    raw = open_stream(url, "/inference/v1/generate", body)
    answer = call(url, "POST", "/inference/v1/abort_requests",
                  {"request_ids": ["generate-tokens-g-5"]})
    assert (answer.status, answer.value) == (200, None)
    finals = {}
    for event in finish(raw)[:-1]:
        for choice in event["choices"]:
            if choice.get("finish_reason"):
                finals[choice["index"]] = choice["finish_reason"]
    assert finals == {0: "abort", 1: "abort"}
    wait_for(lambda: dev.frontend.debug_state()["table"] == 0, 30)


def test_a_refused_profile_start_ends_the_session(dev):
    """The mock engine has no profiler: each start fails with the worker's
    message (500) and leaves no session behind (never 409)."""
    for _ in range(2):
        answer = call(dev.url, "POST", "/start_profile", {})
        assert answer.status == 500
        assert "Profiling is not enabled" in answer.value["error"]["message"]
    assert call(dev.url, "POST", "/stop_profile").status == 500  # (the engine refuses it too)


@pytest.fixture(scope="module")
def embedder(tiny_embed_model_dir, tmp_path_factory):
    """An embedding model (vLLM's pooling invocation types: embed, rerank, score, pooling)."""
    served = ours_on_mock(tiny_embed_model_dir, tmp_path_factory.mktemp("ops-embed"),
                          engine_args=("--runner", "pooling", "--convert", "embed"))
    yield served
    served.stop()


def test_invocations_of_a_pooling_model(embedder):
    """A pooling model's /invocations hands each body to its route, in vLLM's
    order: input (embeddings), query + documents (rerank), a score pair."""
    url = embedder.url
    embedded = call(url, "POST", "/invocations", {"input": ["a b", "c"]})
    assert embedded.status == 200, embedded.body
    assert [d["object"] for d in embedded.value["data"]] == ["embedding", "embedding"]
    same = call(url, "POST", "/v1/embeddings", {"input": ["a b", "c"]}).value
    assert embedded.value["data"] == same["data"]
    reranked = call(url, "POST", "/invocations", {"query": "a", "documents": ["b", "c"]})
    assert reranked.status == 200 and len(reranked.value["results"]) == 2, reranked.body
    scored = call(url, "POST", "/invocations", {"queries": "a", "documents": ["b"]})
    assert scored.status == 200 and scored.value["object"] == "list", scored.body
    refused = call(url, "POST", "/invocations", {"prompt": "hi"})
    assert refused.status == 400
    message = refused.value["error"]["message"]
    assert message.startswith("Cannot find suitable handler for request. Expected one of: ")
    assert "CompletionRequest" not in message and "EmbeddingRequest" in message


def test_openapi_lists_the_dev_routes_and_their_bodies(dev):
    doc = call(dev.url, "GET", "/openapi.json").value
    assert {"/pause", "/sleep", "/collective_rpc", "/weight_checker", "/start_profile",
            "/invocations", "/ping", "/load"} <= set(doc["paths"])
    body = doc["paths"]["/collective_rpc"]["post"]["requestBody"]["content"]["application/json"]
    assert body["schema"] == {"$ref": "#/components/schemas/CollectiveRpcRequest"}
    assert doc["components"]["schemas"]["WeightCheckerRequest"]["properties"]["action"] == {
        "enum": ["checksum", "compare", "reset"]}
    assert not {"/docs", "/redoc", "/docs/oauth2-redirect"} & set(doc["paths"])  # (FastAPI's too)
