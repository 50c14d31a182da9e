"""Pooling routes on the mock engine (``engine-core --mock --runner pooling``).

The mock answers pooling requests as the real engine does (one output with
the tensor, STOP), deterministically per prompt, so these tests check what the
frontend does with them: routes from the engine's tasks, one engine request
per input through the fan-out table, a client that leaves aborting every one
of them, admission counting inputs, engine errors, metrics, usage, and the
``openai`` client. Parity with vLLM's server on real engines is in
tests/test_pooling_parity.py.
"""

from __future__ import annotations

import base64
import contextlib
import json
import socket
import struct
import urllib.error
import urllib.request
from types import SimpleNamespace
from typing import Any

import openai
import pytest

from harness.frontend import launch_mock_stack
from harness.waits import wait_for
from tests.support.exposition import parse

EMBED = ("--runner", "pooling", "--convert", "embed", "--max-num-seqs", "512")
CLASSIFY = ("--runner", "pooling", "--convert", "classify")


def post(url: str, path: str, body: Any) -> tuple[int, Any]:
    req = urllib.request.Request(url + path, data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"null")


def get(url: str, path: str) -> int:
    try:
        with urllib.request.urlopen(url + path, timeout=30) as r:
            return r.status
    except urllib.error.HTTPError as e:
        return e.code


@pytest.fixture(scope="module")
def embed_stack(tiny_embed_model_dir, tmp_path_factory):
    stack = launch_mock_stack(tiny_embed_model_dir, tmp_path_factory.mktemp("pool-mock"),
                              engine_args=EMBED)
    yield stack
    stack.stop()


@pytest.fixture(scope="module")
def cross_stack(tiny_cross_encoder_dir, tmp_path_factory):
    stack = launch_mock_stack(tiny_cross_encoder_dir, tmp_path_factory.mktemp("pool-mock-x"),
                              engine_args=CLASSIFY)
    yield stack
    stack.stop()


@pytest.fixture
def embed(embed_stack):
    yield embed_stack
    embed_stack.frontend.wait_idle()


def metrics(url: str) -> dict:
    with urllib.request.urlopen(url + "/metrics", timeout=10) as r:
        return parse(r.read().decode())


def total(families: dict, name: str, suffix: str = "", **labels: str) -> float:
    family = families.get(name)
    return family.total(suffix, **labels) if family is not None else 0.0


# ------------------------------------------------------------------ routes

ROUTES_EMBED = {"/v1/embeddings": {"input": "hi"}, "/v2/embed": {"texts": ["hi"]},
                "/pooling": {"input": "hi"},
                "/score": {"queries": "a", "documents": ["b"]},
                "/v1/score": {"queries": "a", "documents": ["b"]},
                "/rerank": {"query": "a", "documents": ["b"]},
                "/v1/rerank": {"query": "a", "documents": ["b"]},
                "/v2/rerank": {"query": "a", "documents": ["b"]}}
GENERATION = {"/v1/completions": {"prompt": "hi"},
              "/v1/chat/completions": {"messages": [{"role": "user", "content": "hi"}]},
              "/inference/v1/generate": {"token_ids": [1], "sampling_params": {}}}


def test_embedding_model_gets_vllms_routes_and_no_generation(embed):
    for path, body in ROUTES_EMBED.items():
        assert post(embed.url, path, body)[0] == 200, path
    for path, body in {**GENERATION, "/classify": {"input": "hi"}}.items():
        assert post(embed.url, path, body)[0] == 404, path
    for path in ("/v1/models", "/health", "/metrics", "/version"):
        assert get(embed.url, path) == 200, path
    assert post(embed.url, "/tokenize", {"prompt": "hi"})[0] == 200
    assert post(embed.url, "/detokenize", {"tokens": [1, 2]})[0] == 200
    with urllib.request.urlopen(embed.url + "/openapi.json", timeout=10) as r:
        paths = json.loads(r.read())["paths"]
    assert set(ROUTES_EMBED) <= set(paths) and not set(GENERATION) & set(paths)


def test_cross_encoder_gets_classify_and_scores(cross_stack):
    url = cross_stack.url
    status, body = post(url, "/classify", {"input": ["hello world", "a cat"]})
    assert status == 200
    assert [d["label"] for d in body["data"]] == ["relevant", "relevant"]
    assert all(d["num_classes"] == 1 and 0 < d["probs"][0] < 1 for d in body["data"])
    status, body = post(url, "/rerank", {"query": "q", "documents": ["a", "b c", "d"],
                                         "top_n": 2})
    assert status == 200 and len(body["results"]) == 2
    scores = [r["relevance_score"] for r in body["results"]]
    assert scores == sorted(scores, reverse=True)
    assert post(url, "/v1/embeddings", {"input": "hi"})[0] == 404
    assert post(url, "/v2/embed", {"texts": ["hi"]})[0] == 404
    cross_stack.frontend.wait_idle()


# ------------------------------------------------------------------ fan-out

def test_a_batch_is_one_engine_request_per_input_in_order(embed):
    texts = [f"text number {i} about a cat" for i in range(32)]
    control = embed.control()
    adds = control.stats()["adds"]
    status, batch = post(embed.url, "/v1/embeddings", {"input": texts})
    assert status == 200
    assert control.stats()["adds"] - adds == 32
    assert [d["index"] for d in batch["data"]] == list(range(32))
    for i in (0, 17, 31):  # each input's vector is its own, in its place
        alone = post(embed.url, "/v1/embeddings", {"input": texts[i]})[1]
        assert batch["data"][i]["embedding"] == alone["data"][0]["embedding"]
    tokens = sum(post(embed.url, "/tokenize", {"prompt": t})[1]["count"] for t in texts)
    assert batch["usage"]["prompt_tokens"] == batch["usage"]["total_tokens"] == tokens


def test_bi_encoder_scores_send_queries_and_documents(embed):
    control = embed.control()
    adds = control.stats()["adds"]
    status, body = post(embed.url, "/score", {"queries": "a cat", "documents": ["b", "c d"]})
    assert status == 200 and control.stats()["adds"] - adds == 3
    assert all(-1.0 <= d["score"] <= 1.0 for d in body["data"])


def test_openai_client_embeddings(embed):
    client = openai.OpenAI(base_url=embed.url + "/v1", api_key="x")
    # The client asks for base64 and decodes it itself.
    result = client.embeddings.create(model="tiny", input=["Hello world", "Hi"])
    floats = post(embed.url, "/v1/embeddings", {"input": ["Hello world", "Hi"]})[1]
    assert [d.embedding for d in result.data] == \
        [pytest.approx(d["embedding"], rel=1e-6) for d in floats["data"]]
    assert result.usage.prompt_tokens == floats["usage"]["prompt_tokens"]
    short = client.embeddings.create(model="tiny", input="Hello world", dimensions=16)
    assert len(short.data[0].embedding) == 16
    with pytest.raises(openai.BadRequestError):
        client.embeddings.create(model="tiny", input="Hello world", dimensions=8)


def test_base64_is_the_float_vector(embed):
    floats = post(embed.url, "/v1/embeddings", {"input": "Hello"})[1]["data"][0]["embedding"]
    b64 = post(embed.url, "/v1/embeddings", {"input": "Hello", "encoding_format": "base64"})
    raw = base64.b64decode(b64[1]["data"][0]["embedding"])
    assert list(struct.unpack(f"<{len(raw) // 4}f", raw)) == floats


# ------------------------------------------------------------------ faults

def raw_post(url: str, path: str, body: bytes) -> socket.socket:
    """Send a request and leave the connection open without reading."""
    host, port = url.removeprefix("http://").split(":")
    sock = socket.create_connection((host, int(port)))
    sock.sendall(f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                 f"Content-Length: {len(body)}\r\n\r\n".encode() + body)
    return sock


def test_client_leaving_aborts_every_engine_request(embed):
    """256 inputs in the engine; the client hangs up: all 256 are aborted."""
    control = embed.control()
    before = control.stats()
    control.stall(None)  # the engine holds the ADDs unread: none can finish
    try:
        body = json.dumps({"input": [f"input {i} of the batch" for i in range(256)]})
        sock = raw_post(embed.url, "/v1/embeddings", body.encode())
        wait_for(lambda: embed.frontend.debug_state()["table"] == 256, 10,
                 message="the batch never reached the fan-out table")
        sock.close()
        wait_for(lambda: embed.frontend.debug_state()["table"] == 0, 10,
                 message="the table kept the requests of a client that left")
    finally:
        control.stall(0)
    wait_for(lambda: control.stats()["aborted"] - before["aborted"] == 256, 10,
             message=lambda: f"engine stats: {control.stats()}")
    after = control.stats()
    assert after["adds"] - before["adds"] == 256
    assert after["finished"]["stop"] == before["finished"]["stop"]
    assert after["running"] == after["waiting"] == 0


def test_an_engine_error_fails_the_request_and_aborts_the_rest(embed):
    control = embed.control()
    before = control.stats()
    control.error_next(1)
    status, body = post(embed.url, "/v1/embeddings", {"input": [f"x {i}" for i in range(8)]})
    assert status == 500 and body["error"]["type"] == "InternalServerError"
    wait_for(lambda: control.stats()["running"] == 0, 10)
    after = control.stats()
    assert after["adds"] - before["adds"] == 8
    done = after["finished"]["total"] - before["finished"]["total"]
    assert done + after["aborted"] - before["aborted"] == 8


def test_admission_counts_inputs(tiny_embed_model_dir, tmp_path):
    stack = launch_mock_stack(tiny_embed_model_dir, tmp_path, "--max-concurrent-requests", "4",
                              engine_args=EMBED)
    try:
        status, body = post(stack.url, "/v1/embeddings", {"input": ["a", "b", "c", "d", "e"]})
        assert status == 400 and "5 choices" in body["error"]["message"]
        status, body = post(stack.url, "/rerank", {"query": "q", "documents": list("abcd")})
        assert status == 400 and "5 choices" in body["error"]["message"]  # + the query
        assert post(stack.url, "/v1/embeddings", {"input": ["a", "b", "c", "d"]})[0] == 200
        assert post(stack.url, "/v1/embeddings", {"input": [1, 2, 3, 4, 5]})[0] == 200
    finally:
        stack.stop()


# ------------------------------------------------------------------ metrics

def test_pooling_requests_are_counted_like_vllms(embed):
    """vLLM records a pooling request as a request that generates nothing:
    success (stop), e2e, TTFT, prompt tokens, n=1; no generation tokens and no
    max_tokens observation."""
    histograms = ("vllm:e2e_request_latency_seconds", "vllm:time_to_first_token_seconds",
                  "vllm:request_prompt_tokens", "vllm:request_params_n",
                  "vllm:request_generation_tokens", "vllm:request_params_max_tokens")
    before = metrics(embed.url)
    status, body = post(embed.url, "/v1/embeddings", {"input": ["a b c", "d e", "f"]})
    assert status == 200
    after = metrics(embed.url)

    def delta(name: str, suffix: str = "", **labels: str) -> float:
        return total(after, name, suffix, **labels) - total(before, name, suffix, **labels)

    assert delta("vllm:request_success", "_total", finished_reason="stop") == 3
    for name in histograms[:5]:
        assert delta(name, "_count") == 3, name
    assert delta("vllm:request_params_max_tokens", "_count") == 0
    assert delta("vllm:request_generation_tokens", "_sum") == 0
    assert delta("vllm:request_prompt_tokens", "_sum") == body["usage"]["prompt_tokens"]
    assert delta("vllm:prompt_tokens", "_total") == body["usage"]["prompt_tokens"]
    assert delta("vllm:generation_tokens", "_total") == 0


# ------------------------------------------------------------------ vLLM on the mock

class _MockAsEngine:
    """What harness.vllm_server.VllmFrontend reads of its engine."""

    name = "the mock engine"

    def __init__(self, addr: str, proc, log_path) -> None:
        self.handshake_addr, self.proc, self.log_path = addr, proc, log_path

    def log_tail(self, lines: int = 40) -> str:
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])


@contextlib.contextmanager
def vllm_on_mock(model_dir, workdir, mock_args: tuple[str, ...], *serve_args: str):
    """vLLM's own API server in front of a mock engine serving ``model_dir``."""
    from harness.engine_harness import spawn_mock
    from harness.ports import free_port
    from harness.vllm_server import VllmFrontend

    addr = f"tcp://127.0.0.1:{free_port()}"
    mock, _ = spawn_mock(addr, workdir / "mock.log", "--model", str(model_dir), *mock_args)
    vllm = VllmFrontend(_MockAsEngine(addr, mock, workdir / "mock.log"), model_dir,
                        workdir / "vllm.log", *serve_args)
    try:
        yield vllm
    finally:
        vllm.stop()
        mock.kill()
        mock.wait()


@pytest.mark.vllm_frontend
def test_vllms_server_pools_on_the_mock_as_ours_does(embed, tiny_embed_model_dir, tmp_path):
    """vLLM's own API server takes the mock's pooling outputs (its tasks, its
    tensors inline and out of band) and answers what ours answers."""
    from tests.test_pooling_parity import compare

    with vllm_on_mock(tiny_embed_model_dir, tmp_path, EMBED,
                      "--runner", "pooling", "--convert", "embed") as vllm:
        for path, body in (("/v1/embeddings", {"input": ["Hello world", "Hi"]}),
                           ("/v1/embeddings", {"input": "Hello", "dimensions": 16}),
                           ("/v1/embeddings", {"input": "Hello", "use_activation": False}),
                           ("/pooling", {"input": [[1, 2, 3]]}),
                           ("/score", {"queries": "a", "documents": ["b", "c"]}),
                           ("/rerank", {"query": "a", "documents": ["b", "c", "d"]})):
            status, theirs = post(vllm.url, path, body)
            assert status == 200, theirs
            assert compare(post(embed.url, path, body)[1], theirs) == [], (path, body)


SCORE_DOCS = ["a cat sees the dog", "the dog", "Hello world, how are you?"]
SCORE_TEMPLATE_SHAPES = [
    ("score", "/score", {"queries": "what is this", "documents": SCORE_DOCS}),
    ("score-n-n", "/score", {"queries": ["what is this", "b"], "documents": SCORE_DOCS[:2],
                             "use_activation": False}),
    ("score-instruction", "/score", {"queries": "q", "documents": SCORE_DOCS,
                                     "instruction": "Find cats"}),
    ("score-kwargs-win", "/score", {"queries": "q", "documents": ["a"], "instruction": "x",
                                    "chat_template_kwargs": {"instruction": "Find dogs"}}),
    ("score-reserved-kwargs", "/score", {"queries": "q", "documents": ["a"],
                                         "chat_template_kwargs": {"tools": []}}),
    ("score-truncate", "/score", {"queries": "what is this", "documents": SCORE_DOCS,
                                  "truncate_prompt_tokens": 5}),
    ("score-doc-limit", "/score", {"queries": "what is this", "documents": SCORE_DOCS,
                                   "max_tokens_per_doc": 2}),
    ("score-query-limit", "/score", {"queries": "what is this thing", "documents": ["a cat"],
                                     "max_tokens_per_query": 1}),
    ("score-too-long", "/score", {"queries": "q", "documents": [" ".join(["dog"] * 1100)]}),
    ("rerank", "/rerank", {"query": "what is this", "documents": SCORE_DOCS, "top_n": 2,
                           "instruction": "Find cats"}),
    ("rerank-v2", "/v2/rerank", {"query": "q", "documents": SCORE_DOCS,
                                 "return_documents": False}),
    ("classify", "/classify", {"input": ["Hello world", "Hi"]}),
    ("classify-chat", "/classify", {"messages": [{"role": "user", "content": "Hello"},
                                                 {"role": "assistant", "content": "Hi"}]}),
]


@pytest.mark.vllm_frontend
def test_score_template_as_vllms_server(cross_stack, tiny_cross_encoder_dir, tmp_path):
    """``--chat-template`` on a cross-encoder is a score template: vLLM's server
    and ours, each on a mock whose answer is a function of the token ids and
    token types, answer alike (the real BERT without a template is in
    tests/test_pooling_parity.py)."""
    from tests.test_pooling_parity import Shape, assert_same
    from tests.test_pooling_tokenize import SCORE_TEMPLATE

    template = tmp_path / "score.jinja"
    template.write_text(SCORE_TEMPLATE)
    ours = launch_mock_stack(tiny_cross_encoder_dir, tmp_path, "--chat-template",
                             str(template), engine_args=CLASSIFY)
    try:
        with vllm_on_mock(tiny_cross_encoder_dir, tmp_path, CLASSIFY, "--runner", "pooling",
                          "--chat-template", str(template)) as vllm:
            pair = SimpleNamespace(ours=ours, vllm=vllm)
            for name, path, body in SCORE_TEMPLATE_SHAPES:
                assert_same(pair, Shape(name, path, body))
            # The template made the prompts: without one the same pairs score otherwise.
            body = SCORE_TEMPLATE_SHAPES[0][2]
            templated, plain = post(ours.url, "/score", body), post(cross_stack.url, "/score", body)
            assert templated[0] == plain[0] == 200
            assert [d["score"] for d in templated[1]["data"]] != \
                [d["score"] for d in plain[1]["data"]]
    finally:
        ours.stop()
