"""Parity of the pooling routes with vLLM's own Python server.

Every shape below goes to vLLM 0.32's unmodified ``vllm serve`` API server and
to our frontend, each on its own real engine running the same pooling model
with the same flags (``tests/support/pooling.py``): the tiny Llama as an
embedding model and the tiny BERT cross-encoder. The answers must be equal:

* status codes, headers that carry data (``metadata`` of ``bytes`` answers)
  and every JSON field exactly, except ids and times (``id`` is compared up to
  its random part: ``embd-``, ``score-``...; ``created`` not at all);
* vectors, probabilities and scores to 1e-5 relative (1e-6 absolute near
  zero), base64 and binary ones after decoding them in their ``embed_dtype``
  (both engines compute the same float32 values; the bi-encoder's cosine is
  computed here in double precision where vLLM uses float32 torch);
* errors: status, ``type``, ``param`` and ``code``; the message too, except
  for schema errors (``type`` "Bad Request"), whose text is pydantic's in vLLM
  and msgspec's here (a documented difference).

Requests go one at a time, in the same order, to both servers.
"""

from __future__ import annotations

import ast
import base64
import json
import math
import struct
import urllib.error
import urllib.request
from dataclasses import dataclass
from typing import Any

import pytest

pytestmark = [pytest.mark.real_engine, pytest.mark.vllm_frontend]

TIMEOUT_S = 120.0
REL, ABS = 1e-5, 1e-6
LONG_TEXT = " ".join(["the quick brown fox jumps over the lazy dog"] * 150)  # > 1024 tokens
# Fields holding base64 vectors, per route, and how to read a dtype.
DTYPE_FORMATS = {"float32": ("f", 4), "float16": ("e", 2)}


# Shapes whose error message differs on purpose (status, type, param still equal).
MESSAGE_DIFFERS = {
    # vLLM's message, then a hint how to give the model a template (README).
    "classify-chat-without-template",
}


@dataclass
class Shape:
    id: str
    path: str
    body: Any = None  # JSON, or bytes sent as they are
    method: str = "POST"


def call(base: str, shape: Shape) -> tuple[int, dict[str, str], bytes]:
    data = None
    if shape.method == "POST":
        data = shape.body if isinstance(shape.body, bytes) else json.dumps(shape.body).encode()
    req = urllib.request.Request(base + shape.path, data=data, method=shape.method,
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=TIMEOUT_S) as r:
            return r.status, dict(r.headers), r.read()
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), e.read()


# ------------------------------------------------------------------ comparing

def close(a: float, b: float) -> bool:
    return a == b or abs(a - b) <= max(REL * max(abs(a), abs(b)), ABS)


def decode_vector(text: str, embed_dtype: str, endianness: str) -> list[float]:
    raw = base64.b64decode(text)
    order = ">" if endianness == "big" else "<"
    if embed_dtype in DTYPE_FORMATS:
        fmt, size = DTYPE_FORMATS[embed_dtype]
        return list(struct.unpack(f"{order}{len(raw) // size}{fmt}", raw))
    if embed_dtype == "bfloat16":
        halves = struct.unpack(f"{order}{len(raw) // 2}H", raw)
        return [struct.unpack("<f", struct.pack("<I", h << 16))[0] for h in halves]
    return list(raw)  # fp8: compare the codes


def compare(ours: Any, theirs: Any, path: str = "$") -> list[str]:
    """Differences between two parsed answers (empty: equal)."""
    if isinstance(ours, bool) or isinstance(theirs, bool) or not (
            isinstance(ours, (int, float)) and isinstance(theirs, (int, float))):
        if type(ours) is not type(theirs):
            return [f"{path}: {ours!r} != {theirs!r}"]
    if isinstance(ours, dict):
        problems = []
        if list(ours) != list(theirs):
            problems.append(f"{path}: keys {list(ours)} != {list(theirs)}")
        for key in ours.keys() & theirs.keys():
            if key == "created":
                continue
            if key == "id":
                if str(ours[key]).split("-")[0] != str(theirs[key]).split("-")[0]:
                    problems.append(f"{path}.id: {ours[key]} != {theirs[key]}")
                continue
            problems += compare(ours[key], theirs[key], f"{path}.{key}")
        return problems
    if isinstance(ours, list):
        if len(ours) != len(theirs):
            return [f"{path}: {len(ours)} items != {len(theirs)}"]
        return [p for i, (a, b) in enumerate(zip(ours, theirs))
                for p in compare(a, b, f"{path}[{i}]")]
    if isinstance(ours, float) or isinstance(theirs, float):
        return [] if close(float(ours), float(theirs)) else [f"{path}: {ours} != {theirs}"]
    return [] if ours == theirs else [f"{path}: {ours!r} != {theirs!r}"]


def decoded(body: Any, request: Any) -> Any:
    """base64 vectors of a list answer replaced by their values."""
    if not isinstance(body, dict) or not isinstance(request, dict):
        return body
    dtype = request.get("embed_dtype", "float32")
    endianness = request.get("endianness", "native")
    for item in body.get("data") or []:
        for key in ("embedding", "data"):
            if isinstance(item.get(key), str):
                item[key] = decode_vector(item[key], dtype, endianness)
    b64 = (body.get("embeddings") or {}).get("base64")
    if b64 is not None:
        body["embeddings"]["base64"] = [decode_vector(v, "float32", "little") for v in b64]
    return body


def tasks_sorted(message: str) -> str:
    """The engine computes its task list from a set: its order varies by process."""
    head, _, rest = message.partition("Supported tasks: ")
    listed, _, tail = rest.partition("]")
    return head + "Supported tasks: " + str(sorted(ast.literal_eval(listed + "]"))) + tail


def assert_same(pair, shape: Shape) -> None:
    status, headers, raw = call(pair.ours.url, shape)
    v_status, v_headers, v_raw = call(pair.vllm.url, shape)
    assert status == v_status, f"{shape.id}: status {status} != vLLM's {v_status}: " \
                               f"{raw[:300]!r} / {v_raw[:300]!r}"
    if v_headers.get("content-type", "").startswith("application/octet-stream"):
        assert headers["Content-Type"] == "application/octet-stream"
        request = shape.body
        dtype, order = request.get("embed_dtype", "float32"), request.get("endianness", "native")
        ours_meta = json.loads(headers.get("metadata", "null"))
        vllm_meta = json.loads(v_headers.get("metadata", "null"))
        assert compare(ours_meta, vllm_meta) == [], shape.id
        as_text = base64.b64encode
        assert compare(decode_vector(as_text(raw).decode(), dtype, order),
                       decode_vector(as_text(v_raw).decode(), dtype, order)) == [], shape.id
        return
    ours, theirs = json.loads(raw), json.loads(v_raw)
    if status != 200 and isinstance(theirs, dict) and "error" in theirs:
        mine, vllms = ours["error"], theirs["error"]
        if shape.id in MESSAGE_DIFFERS or vllms["type"] == "Bad Request":
            # schema errors: pydantic's text vs msgspec's (and MESSAGE_DIFFERS)
            mine, vllms = dict(mine, message=None), dict(vllms, message=None)
        if "Supported tasks: " in (vllms["message"] or ""):  # the engine's list, in set order
            mine, vllms = dict(mine, message=tasks_sorted(mine["message"])), \
                dict(vllms, message=tasks_sorted(vllms["message"]))
        assert mine == vllms, f"{shape.id}: {mine} != vLLM's {vllms}"
        return
    if status == 404 and theirs == {"detail": "Not Found"}:
        return  # an unregistered route: the body is the frontend's (see test_routes)
    problems = compare(decoded(ours, shape.body), decoded(theirs, shape.body))
    assert not problems, f"{shape.id}: " + "; ".join(problems[:10])


# ------------------------------------------------------------------ shapes

def emb(id: str, **body: Any) -> Shape:
    return Shape(f"embeddings-{id}", "/v1/embeddings", body)


def chat(text: str = "Hello there") -> list[dict]:
    return [{"role": "system", "content": "You embed."}, {"role": "user", "content": text}]


EMBED_SHAPES = [
    emb("single", input="Hello world", model="tiny"),
    emb("batch", input=["Hello world", "The cat sees a dog.", "Hi"]),
    emb("tokens", input=[1, 998, 1198, 1197]),
    emb("token-batch", input=[[1, 998], [1, 2, 3, 4, 5], [7]]),
    emb("empty-text", input=""),
    emb("base64", input=["Hello world", "Hi"], encoding_format="base64"),
    emb("base64-float16", input="Hello world", encoding_format="base64", embed_dtype="float16"),
    emb("base64-bfloat16", input="Hello world", encoding_format="base64",
        embed_dtype="bfloat16"),
    emb("base64-fp8-e4m3", input="Hello world", encoding_format="base64",
        embed_dtype="fp8_e4m3"),
    emb("base64-fp8-e5m2", input="Hello world", encoding_format="base64",
        embed_dtype="fp8_e5m2"),
    emb("base64-big-endian", input="Hello world", encoding_format="base64", endianness="big"),
    emb("base64-little-endian", input="Hello world", encoding_format="base64",
        endianness="little", embed_dtype="float16"),
    emb("bytes", input=["Hello world", "Hi"], encoding_format="bytes"),
    emb("bytes-only", input="Hello world", encoding_format="bytes_only", embed_dtype="float16"),
    emb("dimensions-16", input="Hello world", dimensions=16),
    emb("dimensions-32-batch", input=["Hello world", "Hi"], dimensions=32,
        encoding_format="base64"),
    emb("dimensions-not-listed", input="Hello world", dimensions=8),
    emb("dimensions-out-of-range", input="Hello world", dimensions=100),
    emb("no-activation", input=["Hello world", "Hi"], use_activation=False),
    emb("activation", input="Hello world", use_activation=True),
    emb("truncate-3", input="Hello world, the cat sees a dog", truncate_prompt_tokens=3),
    emb("truncate-all", input=LONG_TEXT, truncate_prompt_tokens=-1),
    emb("truncate-left", input="Hello world, the cat sees a dog", truncate_prompt_tokens=3,
        truncation_side="left"),
    emb("truncate-right", input="Hello world, the cat sees a dog", truncate_prompt_tokens=3,
        truncation_side="right"),
    emb("truncate-tokens", input=[[1, 2, 3, 4, 5, 6]], truncate_prompt_tokens=2),
    emb("truncate-over-context", input="Hello", truncate_prompt_tokens=2000),
    emb("truncate-below-minus-one", input="Hello", truncate_prompt_tokens=-2),
    emb("no-special-tokens", input="Hello world", add_special_tokens=False),
    emb("chat", messages=chat()),
    emb("chat-as-input", input=chat("Good morning")),
    emb("chat-batch", messages=[chat("One"), chat("Two")]),
    emb("chat-generation-prompt", messages=chat(), add_generation_prompt=True),
    emb("chat-special-tokens", messages=chat(), add_special_tokens=True),
    emb("chat-both-prompts", messages=chat(), add_generation_prompt=True,
        continue_final_message=True),
    emb("chat-template-in-request", messages=chat(), chat_template="{{ messages }}"),
    emb("request-id", input="Hello", request_id="abc", user="u1"),
    emb("too-long-text", input=LONG_TEXT),
    emb("too-long-tokens", input=[5] * 1025),
    emb("context-exactly", input=[5] * 1024),
    emb("empty-list", input=[]),
    emb("empty-token-prompt", input=[[1, 2, 3], []]),
    emb("out-of-vocab", input=[1, 2, 99999]),
    emb("unknown-model", input="Hello", model="nope"),
    emb("normalize-removed", input="Hello", normalize=True),
    emb("score-task-removed", input="Hello", task="score"),
    emb("bad-encoding-format", input="Hello", encoding_format="foo"),
    emb("bad-input-type", input=12),
    emb("no-input", user="x"),
    emb("empty-cache-salt", input="Hello", cache_salt=""),
    emb("cache-salt", input="Hello", cache_salt="salt-1"),
    emb("padding", input="Hello", padding="max_length"),
    emb("priority", input="Hello", priority=1),
    emb("mm-kwargs", input="Hello", mm_processor_kwargs={"a": 1}),
    Shape("embeddings-bad-json", "/v1/embeddings", b'{"input": "x",'),
    Shape("cohere-texts", "/v2/embed", {"texts": ["Hello world", "Hi"]}),
    Shape("cohere-types", "/v2/embed", {"texts": ["Hello world"],
                                        "embedding_types": ["float", "base64", "binary",
                                                            "ubinary"]}),
    Shape("cohere-input-type", "/v2/embed", {"texts": ["Hello world"], "input_type": "query"}),
    Shape("cohere-bad-input-type", "/v2/embed", {"texts": ["Hi"], "input_type": "nope"}),
    Shape("cohere-truncate-none", "/v2/embed", {"texts": ["Hello world"], "truncate": "NONE",
                                                "max_tokens": 2}),
    Shape("cohere-truncate-start", "/v2/embed", {"texts": ["Hello world there"],
                                                 "truncate": "START", "max_tokens": 2}),
    Shape("cohere-truncate-end", "/v2/embed", {"texts": ["Hello world there"],
                                               "max_tokens": 2}),
    Shape("cohere-dimension", "/v2/embed", {"texts": ["Hello world"], "output_dimension": 32}),
    Shape("cohere-inputs", "/v2/embed", {"inputs": [{"content": [
        {"type": "text", "text": "Hello"}, {"type": "text", "text": "world"}]}]}),
    Shape("cohere-no-texts", "/v2/embed", {"texts": []}),
    Shape("pooling", "/pooling", {"input": ["Hello world", "Hi"]}),
    Shape("pooling-base64", "/pooling", {"input": "Hello world", "encoding_format": "base64"}),
    Shape("pooling-chat", "/pooling", {"messages": chat()}),
    Shape("pooling-token-embed", "/pooling", {"input": "Hello", "task": "token_embed"}),
    Shape("pooling-classify", "/pooling", {"input": "Hello", "task": "classify"}),
    Shape("pooling-dimensions", "/pooling", {"input": "Hello", "dimensions": 16}),
    Shape("pooling-plugin", "/pooling", {"input": "Hello", "task": "plugin"}),
    Shape("pooling-data", "/pooling", {"data": {"a": 1}}),
    Shape("pooling-bogus-task", "/pooling", {"input": "Hello", "task": "bogus"}),
    Shape("bi-score", "/score", {"queries": "what is this", "documents": ["a cat", "the dog"]}),
    Shape("bi-score-n-n", "/score", {"queries": ["what is this", "who"],
                                     "documents": ["a cat", "the dog"]}),
    Shape("bi-score-text", "/score", {"text_1": "what is this", "text_2": "a cat"}),
    Shape("bi-score-data", "/v1/score", {"data_1": "x", "data_2": ["y", "z"]}),
    Shape("bi-score-items", "/score", {"queries": "a", "items": ["b", "c"]}),
    Shape("bi-score-lengths", "/score", {"queries": ["a", "b"], "documents": ["c", "d", "e"]}),
    Shape("bi-score-no-documents", "/score", {"queries": "a", "documents": []}),
    Shape("bi-score-no-activation", "/score", {"queries": "a b c", "documents": ["d e"],
                                               "use_activation": False}),
    Shape("bi-rerank-top-2", "/rerank", {"query": "what is this",
                                         "documents": ["a cat", "the dog", "Hello world"],
                                         "top_n": 2}),
    Shape("bi-rerank-all", "/v1/rerank", {"query": "what is this",
                                          "documents": ["a cat", "the dog", "Hello world"]}),
    Shape("bi-rerank-top-10", "/v2/rerank", {"query": "q", "documents": ["a", "b"],
                                             "top_n": 10}),
    Shape("bi-rerank-one-document", "/rerank", {"query": "q", "documents": "b"}),
    Shape("bi-rerank-no-documents-returned", "/rerank", {
        "query": "q", "documents": ["a", "b"], "return_documents": False}),
    Shape("bi-rerank-doc-limit", "/rerank", {"query": "q", "max_tokens_per_doc": 2,
                                             "documents": ["a cat sees the big dog"]}),
    Shape("bi-rerank-doc-limit-too-big", "/rerank", {"query": "q", "documents": ["a"],
                                                     "max_tokens_per_doc": 2000}),
    Shape("bi-rerank-multimodal", "/rerank", {"query": "q", "documents": [
        {"content": [{"type": "text", "text": "a"}]}]}),
    Shape("bi-rerank-negative-top-n", "/rerank", {"query": "q", "documents": ["a"],
                                                  "top_n": -1}),
    Shape("models", "/v1/models", method="GET"),
    Shape("tokenize", "/tokenize", {"prompt": "Hello world"}),
    Shape("detokenize", "/detokenize", {"tokens": [1, 998, 1198]}),
    Shape("no-completions", "/v1/completions", {"prompt": "Hello", "max_tokens": 2}),
    Shape("no-classify", "/classify", {"input": "Hello"}),
]


def cls(id: str, **body: Any) -> Shape:
    return Shape(f"classify-{id}", "/classify", body)


QUERY = "what is this"
DOCS = ["a cat sees the dog", "the dog", "Hello world, how are you?"]

CROSS_ENCODER_SHAPES = [
    cls("single", input="Hello world"),
    cls("batch", input=["Hello world", "Hi there", "The cat."]),
    cls("tokens", input=[2, 100, 3]),
    cls("no-activation", input=["Hello world", "Hi"], use_activation=False),
    cls("truncate", input="Hello world, the cat", truncate_prompt_tokens=2),
    cls("chat-without-template", messages=chat()),
    cls("empty", input=[]),
    cls("too-long", input=LONG_TEXT),
    cls("padding", input="Hello", padding="max_length"),
    cls("dimensions-ignored", input="Hello", dimensions=2),
    cls("unknown-model", input="Hello", model="nope"),
    cls("bad-priority", input="Hello", priority="x"),
    Shape("cross-pooling", "/pooling", {"input": "Hello world"}),
    Shape("cross-pooling-classify", "/pooling", {"input": "Hello", "task": "classify",
                                                 "use_activation": False}),
    Shape("cross-pooling-token-classify", "/pooling", {"input": "Hi", "task": "token_classify"}),
    Shape("cross-pooling-embed", "/pooling", {"input": "Hi", "task": "embed"}),
    Shape("cross-score", "/score", {"queries": QUERY, "documents": DOCS}),
    Shape("cross-score-n-n", "/score", {"queries": [QUERY, "b"], "documents": DOCS[:2],
                                        "use_activation": False}),
    Shape("cross-score-doc-limit", "/score", {"queries": QUERY, "documents": DOCS,
                                              "max_tokens_per_doc": 3}),
    Shape("cross-score-query-limit", "/score", {"queries": "what is this thing here",
                                                "documents": ["a cat"],
                                                "max_tokens_per_query": 2}),
    Shape("cross-score-truncate", "/score", {"queries": QUERY, "documents": DOCS,
                                             "truncate_prompt_tokens": 5}),
    Shape("cross-score-truncate-left", "/score", {"queries": QUERY, "documents": DOCS,
                                                  "truncate_prompt_tokens": 5,
                                                  "truncation_side": "left"}),
    Shape("cross-score-truncate-all", "/score", {"queries": QUERY, "documents": DOCS,
                                                 "truncate_prompt_tokens": -1}),
    Shape("cross-score-longest-first-query", "/score", {
        "queries": "a b c d e f g h i j k", "documents": ["x y z"], "truncate_prompt_tokens": 6}),
    Shape("cross-score-longest-first-doc", "/score", {
        "queries": "x y", "documents": ["a b c d e f g h i j k"], "truncate_prompt_tokens": 6}),
    Shape("cross-score-padding", "/score", {"queries": QUERY, "documents": DOCS[:1],
                                            "padding": "max_length"}),
    Shape("cross-score-too-long", "/score", {"queries": QUERY, "documents": [LONG_TEXT]}),
    Shape("cross-score-negative-limit", "/score", {"queries": "a", "documents": ["b"],
                                                   "max_tokens_per_doc": -1}),
    Shape("cross-score-limit-at-context", "/score", {"queries": "a", "documents": ["b"],
                                                     "max_tokens_per_query": 1024}),
    Shape("cross-score-multimodal", "/score", {
        "queries": {"content": [{"type": "text", "text": "a"}]}, "documents": ["b"]}),
    Shape("cross-score-empty-body", "/score", {}),
    Shape("cross-score-no-documents-field", "/score", {"queries": "a"}),
    Shape("cross-rerank", "/rerank", {"query": QUERY, "documents": DOCS, "top_n": 2}),
    Shape("cross-rerank-all", "/v2/rerank", {"query": QUERY, "documents": DOCS}),
    Shape("cross-rerank-one", "/v1/rerank", {"query": QUERY, "documents": "the cat"}),
    Shape("cross-rerank-instruction", "/rerank", {"query": QUERY, "documents": DOCS[:1],
                                                  "instruction": "Find cats"}),
    Shape("cross-rerank-no-query", "/rerank", {"documents": ["a"]}),
    Shape("cross-rerank-query-list", "/rerank", {"query": ["a"], "documents": ["b"]}),
    Shape("cross-rerank-bad-top-n", "/rerank", {"query": "a", "documents": ["b"],
                                                "top_n": "x"}),
    Shape("cross-no-embeddings", "/v1/embeddings", {"input": "Hello"}),
    Shape("cross-tokenize", "/tokenize", {"prompt": "Hello world"}),
]


def test_enough_shapes():
    assert len(EMBED_SHAPES) + len(CROSS_ENCODER_SHAPES) >= 60


@pytest.mark.parametrize("shape", EMBED_SHAPES, ids=lambda s: s.id)
def test_embedding_model_matches_vllm(embed_servers, shape):
    assert_same(embed_servers, shape)


@pytest.mark.parametrize("shape", CROSS_ENCODER_SHAPES, ids=lambda s: s.id)
def test_cross_encoder_matches_vllm(cross_encoder_servers, shape):
    assert_same(cross_encoder_servers, shape)


# ------------------------------------------------------------------ metrics

def pooling_workload(url: str, cross_encoder: bool) -> None:
    bodies = ([("/classify", {"input": ["Hello world", "Hi"]}),
               ("/score", {"queries": QUERY, "documents": DOCS}),
               ("/rerank", {"query": QUERY, "documents": DOCS[:2]})] if cross_encoder else
              [("/v1/embeddings", {"input": "Hello world"}),
               ("/v1/embeddings", {"input": ["a b", "c d e", "f"], "dimensions": 32}),
               ("/v2/embed", {"texts": ["Hello world"]}),
               ("/pooling", {"input": [[1, 2, 3]]}),
               ("/score", {"queries": QUERY, "documents": DOCS[:2]})])
    for path, body in bodies:
        status, _, raw = call(url, Shape(path, path, body))
        assert status == 200, (path, raw[:300])


def drop_label(family, label: str) -> None:
    family.samples = {(name, frozenset((k, v) for k, v in labels if k != label)): value
                      for (name, labels), value in family.samples.items()}
    family.label_names = family.label_names - {label}


@pytest.mark.parametrize("kind", ["embed", "cross-encoder"])
def test_metrics_equal_vllm_after_the_same_workload(request, kind):
    """The families vLLM reports for pooling requests, with what the same
    workload adds to them (tests/test_parity_metrics.py's rules)."""
    from tests.test_parity_metrics import added, differences, wait_idle

    pair = request.getfixturevalue("embed_servers" if kind == "embed"
                                   else "cross_encoder_servers")
    sides = {}
    for name, url in (("vllm", pair.vllm.url), ("ours", pair.ours.url)):
        before = wait_idle(url)
        pooling_workload(url, kind == "cross-encoder")
        sides[name] = (before, wait_idle(url))
    (v_before, theirs), (o_before, ours) = sides["vllm"], sides["ours"]
    for families in (ours, theirs):  # a label vLLM derives from the model (README)
        drop_label(families["vllm:cache_config_info"], "enable_prefix_caching")
    problems = differences(o_before, ours, v_before, theirs)
    assert not problems, "\n".join(problems)
    successes = added(o_before.get("vllm:request_success"), ours["vllm:request_success"],
                      "_total")
    assert sum(successes.values()) == (2 + 3 + 2 if kind == "cross-encoder" else
                                       1 + 3 + 1 + 1 + 3)
