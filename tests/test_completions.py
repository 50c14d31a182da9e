"""POST /v1/completions through our frontend, as users call it.

Most tests run twice: against the session's real vLLM engine (``real``) and
against a mock engine (``mock``, fast, with counters). Tests whose outcome
depends on a real model (EOS, logit_bias, bad_words, min_tokens) run on the
real engine only. After every test nothing may be left in flight: the fan-out
table is empty and the engine has no work (the ``stack`` fixture of
tests/support/stacks.py checks it).

The tiny model is served as "tiny" with max_model_len 1024; its tokens often
split UTF-8 characters, so "" deltas and U+FFFD are normal.
"""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from typing import Any, NamedTuple

import openai
import pytest

from harness.waits import wait_for
from tests.support.http_client import (
    MODEL,
    RawRequest,
    client,
    completion,
    finals_by_index,
    post,
    stream_completion,
    texts_by_index,
)
from tests.support.requirements import first_input

MAX_MODEL_LEN = 1024
FULL_RESPONSE_KEYS = {"id", "object", "created", "model", "choices", "service_tier",
                      "system_fingerprint", "usage", "kv_transfer_params",
                      "ec_transfer_params", "metrics"}
CHOICE_KEYS = {"index", "text", "logprobs", "finish_reason", "stop_reason", "token_ids",
               "prompt_logprobs", "prompt_token_ids", "routed_experts"}
STREAM_CHOICE_KEYS = {"index", "text", "logprobs", "finish_reason", "stop_reason",
                      "prompt_token_ids", "token_ids"}
USAGE_KEYS = {"prompt_tokens", "total_tokens", "completion_tokens"}


def tokenize(url: str, text: str, add_special_tokens: bool = True) -> list[int]:
    reply = post(url, "/tokenize", {"model": MODEL, "prompt": text,
                                    "add_special_tokens": add_special_tokens})
    assert reply.status == 200, reply.body
    return reply.json["tokens"]


def greedy(url: str, prompt: Any, max_tokens: int = 16, **extra: Any) -> dict:
    return completion(url, {"prompt": prompt, "max_tokens": max_tokens, "temperature": 0,
                            **extra})


# ---------------------------------------------------------------- shapes, batches, n

def test_single_prompt_with_openai_client(stack):
    c = client(stack.url)
    r = c.completions.create(model=MODEL, prompt="Hello", max_tokens=5, temperature=0)
    assert r.object == "text_completion" and r.model == MODEL
    assert r.id.startswith("cmpl-")
    assert len(r.choices) == 1 and r.choices[0].index == 0
    assert r.choices[0].finish_reason == "length"
    assert r.usage.prompt_tokens == 2  # BOS + "Hello"
    assert r.usage.completion_tokens == 5 and r.usage.total_tokens == 7
    raw = greedy(stack.url, "Hello", 5)
    assert set(raw) == FULL_RESPONSE_KEYS
    assert set(raw["choices"][0]) == CHOICE_KEYS
    assert set(raw["usage"]) == USAGE_KEYS | {"prompt_tokens_details",
                                             "completion_tokens_details"}
    assert raw["choices"][0]["text"] == r.choices[0].text
    assert raw["choices"][0]["stop_reason"] is None


def test_request_id_header_and_body(stack):
    body = {"prompt": "Hello", "max_tokens": 1, "request_id": "from-body"}
    assert completion(stack.url, body)["id"] == "cmpl-from-body"
    reply = post(stack.url, "/v1/completions", {"model": MODEL, **body},
                 headers={"X-Request-Id": "from-header"})
    assert reply.json["id"] == "cmpl-from-header"
    # Clients reusing an id concurrently must not collide inside the engine
    # (a duplicate live engine id kills a real engine).
    c = client(stack.url)

    def same_id(_):
        return c.completions.create(model=MODEL, prompt=["a", "b"], max_tokens=20, n=2,
                                    temperature=1,
                                    extra_body={"request_id": "same", "ignore_eos": True})

    with ThreadPoolExecutor(4) as pool:
        outs = list(pool.map(same_id, range(4)))
    assert all(len(o.choices) == 4 and o.id == "cmpl-same" for o in outs)
    assert all(o.usage.completion_tokens == 80 for o in outs)


PROMPT_KINDS = {
    "text": ["Hello", "The quick brown fox", "Once upon a time there was"],
    "tokens": [[1, 468, 995], [1, 300], [1, 700, 701, 702, 703, 704]],
}


def prompt_lengths(url: str, prompts: list) -> list[int]:
    return [len(tokenize(url, p)) if isinstance(p, str) else len(p) for p in prompts]


@pytest.mark.parametrize("kind", PROMPT_KINDS)
def test_batch_times_n_non_streaming(stack, kind):
    prompts, n, max_tokens = PROMPT_KINDS[kind], 2, 6
    c = client(stack.url)
    r = c.completions.create(model=MODEL, prompt=prompts, n=n, max_tokens=max_tokens,
                             temperature=0.9, seed=1234, extra_body={"ignore_eos": True})
    # Ordered by prompt, then sample: index = prompt_index * n + j.
    assert [ch.index for ch in r.choices] == list(range(len(prompts) * n))
    assert all(ch.finish_reason == "length" for ch in r.choices)
    lengths = prompt_lengths(stack.url, prompts)
    assert r.usage.prompt_tokens == sum(lengths)  # once per prompt, not per choice
    assert r.usage.completion_tokens == len(prompts) * n * max_tokens
    assert r.usage.total_tokens == r.usage.prompt_tokens + r.usage.completion_tokens
    # Each choice is what a single request for that prompt with seed + j gives.
    for p_idx, prompt in enumerate(prompts):
        for j in range(n):
            single = completion(stack.url, {
                "prompt": prompt, "max_tokens": max_tokens, "temperature": 0.9,
                "seed": 1234 + j, "ignore_eos": True})
            assert single["choices"][0]["text"] == r.choices[p_idx * n + j].text, (p_idx, j)


@pytest.mark.parametrize("kind", PROMPT_KINDS)
def test_batch_times_n_streaming(stack, kind):
    prompts, n, max_tokens = PROMPT_KINDS[kind], 2, 6
    body = {"prompt": prompts, "n": n, "max_tokens": max_tokens, "temperature": 0.9,
            "seed": 99, "ignore_eos": True}
    s = stream_completion(stack.url, {**body, "stream_options": {"include_usage": True}})
    chunks = s.choice_chunks
    ids = {c["id"] for c in s.chunks}
    created = {c["created"] for c in s.chunks}
    assert len(ids) == 1 and len(created) == 1
    for c in chunks:
        assert len(c["choices"]) == 1
        assert set(c["choices"][0]) == STREAM_CHOICE_KEYS
        assert c["object"] == "text_completion" and c["model"] == MODEL
        assert "usage" not in c
    finals = finals_by_index(chunks)
    assert sorted(finals) == list(range(len(prompts) * n))
    # The finish reason rides on each choice's last chunk.
    last_chunk_of = {}
    for pos, c in enumerate(chunks):
        last_chunk_of[c["choices"][0]["index"]] = pos
    for i, ch in finals.items():
        assert chunks[last_chunk_of[i]]["choices"][0] is ch
        assert ch["finish_reason"] == "length"
    (usage_chunk,) = s.usage_chunks
    assert s.chunks[-1] == usage_chunk
    assert set(usage_chunk["usage"]) == USAGE_KEYS
    assert usage_chunk["usage"]["prompt_tokens"] == sum(prompt_lengths(stack.url, prompts))
    assert usage_chunk["usage"]["completion_tokens"] == len(prompts) * n * max_tokens
    # Streaming and non-streaming sample the same text with the same seeds.
    full = completion(stack.url, body)
    texts = texts_by_index(chunks)
    assert texts == {ch["index"]: ch["text"] for ch in full["choices"]}


def test_n_samples_differ_and_seed_reproduces(stack):
    body = {"prompt": "Hello", "max_tokens": 12, "temperature": 1.0, "seed": 7,
            "n": 3, "ignore_eos": True}
    a = completion(stack.url, body)
    b = completion(stack.url, body)
    assert [c["text"] for c in a["choices"]] == [c["text"] for c in b["choices"]]
    assert len({c["text"] for c in a["choices"]}) == 3  # seed + j: different samples
    other = completion(stack.url, {**body, "seed": 8, "n": 1})
    assert other["choices"][0]["text"] == a["choices"][1]["text"]


def test_token_prompt_with_return_token_ids(stack):
    r = greedy(stack.url, [1, 468, 995], 4, return_token_ids=True)
    ch = r["choices"][0]
    assert ch["prompt_token_ids"] == [1, 468, 995]  # used as given: no BOS added
    assert len(ch["token_ids"]) == 4
    assert r["usage"]["prompt_tokens"] == 3 and r["usage"]["completion_tokens"] == 4
    detok = post(stack.url, "/detokenize", {"model": MODEL, "tokens": ch["token_ids"]})
    assert detok.status == 200
    # Same text as the text prompt that tokenizes to the same ids.
    same = greedy(stack.url, "Hello world", 4)  # -> [1, 468, 995] in the tiny vocab?
    if tokenize(stack.url, "Hello world") == [1, 468, 995]:
        assert same["choices"][0]["text"] == ch["text"]


def test_return_token_ids_streaming(stack):
    body = {"prompt": ["Hello", "World"], "max_tokens": 5, "temperature": 0,
            "return_token_ids": True}
    s = stream_completion(stack.url, body)
    full = completion(stack.url, body)
    seen_first: set[int] = set()
    tokens: dict[int, list[int]] = {}
    for c in s.choice_chunks:
        ch = c["choices"][0]
        i = ch["index"]
        if i not in seen_first:
            seen_first.add(i)
            assert ch["prompt_token_ids"] == full["choices"][i]["prompt_token_ids"]
        else:
            assert ch["prompt_token_ids"] is None
        tokens.setdefault(i, []).extend(ch["token_ids"])
    assert tokens == {ch["index"]: ch["token_ids"] for ch in full["choices"]}


# ---------------------------------------------------------------- stream_options

def test_stream_without_options_has_no_usage(stack):
    for options in (None, {}, {"include_usage": False, "continuous_usage_stats": True}):
        body = {"prompt": "Hello", "max_tokens": 4}
        if options is not None:
            body["stream_options"] = options
        s = stream_completion(stack.url, body)
        assert not s.usage_chunks and all("usage" not in c for c in s.chunks), options
        # No usage chunk follows: the terminal chunk carries the fingerprint.
        assert "system_fingerprint" in s.chunks[-1]


def http_chunks(received: bytes) -> list[bytes]:
    """A raw chunked HTTP/1.1 response's chunks, as framed on the wire."""
    head, _, body = received.partition(b"\r\n\r\n")
    assert b"transfer-encoding: chunked" in head.lower(), head
    chunks = []
    while True:
        size_line, _, body = body.partition(b"\r\n")
        size = int(size_line, 16)
        if size == 0:
            assert body == b"\r\n", body  # the terminator ends the response
            return chunks
        chunks.append(body[:size])
        assert body[size:size + 2] == b"\r\n"
        body = body[size + 2:]


def test_stream_ends_in_one_http_chunk(stack):
    """The last step's event, the usage event and [DONE] go out together, in
    the response's last HTTP chunk (one write), then the terminator."""
    req = RawRequest(stack.url, "/v1/completions", {
        "model": MODEL, "prompt": "Hello", "max_tokens": 6, "temperature": 0, "stream": True,
        "stream_options": {"include_usage": True}})
    try:
        chunks = http_chunks(req.read_all())
    finally:
        req.close()
    last = chunks[-1].split(b"\n\n")
    assert last[-2:] == [b"data: [DONE]", b""], chunks[-1]
    finish, usage = (json.loads(e[len(b"data: "):]) for e in last[-4:-2])
    assert finish["choices"][0]["finish_reason"] == "length", chunks[-1]
    assert usage["choices"] == [] and usage["usage"]["completion_tokens"] == 6
    assert all(b"[DONE]" not in c and b"finish_reason\":\"" not in c for c in chunks[:-1])


def test_stream_head_goes_out_with_the_first_event(module_mock_stack):
    """The status line and headers are not a write of their own: the first
    read of the response has them and the first event together. (The mock
    only: its first token comes well within HEAD_DELAY however busy the host.)"""
    req = RawRequest(module_mock_stack.url, "/v1/completions", {
        "model": MODEL, "prompt": "Hello", "max_tokens": 3, "temperature": 0, "stream": True})
    try:
        first = req.sock.recv(65536)
        head, _, body = first.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 200 ") and b"text/event-stream" in head, first
        assert b"data: {" in body, first
        req.received = first
        assert req.read_all().endswith(b"data: [DONE]\n\n\r\n0\r\n\r\n")
    finally:
        req.close()


def test_stream_head_goes_out_alone_while_the_engine_is_silent(module_mock_stack):
    """A stream with nothing to send yet (here: a stalled engine) still gets
    its 200 and headers after HEAD_DELAY (1 s), then its events as usual."""
    control = module_mock_stack.control()
    control.stall(None)
    try:
        req = RawRequest(module_mock_stack.url, "/v1/completions", {
            "model": MODEL, "prompt": "Hello", "max_tokens": 2, "temperature": 0,
            "stream": True})
        req.sock.settimeout(20)
        first = req.sock.recv(65536)
        assert first.startswith(b"HTTP/1.1 200 ") and first.endswith(b"\r\n\r\n"), first
    finally:
        control.stall(0)
    try:
        req.received = first
        events = req.read_all().partition(b"\r\n\r\n")[2]
        assert events.count(b'"finish_reason":"length"') == 1, events
        assert events.endswith(b"data: [DONE]\n\n\r\n0\r\n\r\n"), events
    finally:
        req.close()
    module_mock_stack.frontend.wait_idle()


def test_include_usage_exactly_one_final_chunk(stack):
    s = stream_completion(stack.url, {"prompt": ["Hello", "World"], "max_tokens": 5,
                                      "temperature": 0,
                                      "stream_options": {"include_usage": True}})
    (usage,) = s.usage_chunks
    assert s.events[-2] != "[DONE]" and s.chunks[-1] == usage
    prompt_tokens = sum(prompt_lengths(stack.url, ["Hello", "World"]))
    assert usage["usage"] == {"prompt_tokens": prompt_tokens, "completion_tokens": 10,
                              "total_tokens": prompt_tokens + 10}
    assert set(usage) == {"id", "object", "created", "model", "choices", "usage",
                          "system_fingerprint"}
    assert all("system_fingerprint" not in c for c in s.choice_chunks)


def test_continuous_usage_stats(stack):
    prompts = ["Hello", "The quick brown fox"]
    lengths = prompt_lengths(stack.url, prompts)
    s = stream_completion(stack.url, {
        "prompt": prompts, "max_tokens": 6, "temperature": 0, "ignore_eos": True,
        "stream_options": {"include_usage": True, "continuous_usage_stats": True}})
    done: dict[int, int] = {}
    for c in s.choice_chunks:
        ch = c["choices"][0]
        u = c["usage"]
        assert set(u) == USAGE_KEYS
        assert u["prompt_tokens"] == lengths[ch["index"]]
        assert u["completion_tokens"] >= done.get(ch["index"], 0)
        assert u["total_tokens"] == u["prompt_tokens"] + u["completion_tokens"]
        done[ch["index"]] = u["completion_tokens"]
    assert done == {0: 6, 1: 6}
    (final,) = s.usage_chunks
    assert final["usage"]["completion_tokens"] == 12
    assert final["usage"]["prompt_tokens"] == sum(lengths)


# ---------------------------------------------------------------- echo and logprobs

def test_echo(stack):
    plain = greedy(stack.url, "Hello world", 4)["choices"][0]["text"]
    echoed = greedy(stack.url, "Hello world", 4, echo=True)
    assert echoed["choices"][0]["text"] == "Hello world" + plain
    assert echoed["usage"]["completion_tokens"] == 4  # echo does not change usage
    s = stream_completion(stack.url, {"prompt": "Hello world", "max_tokens": 4,
                                      "temperature": 0, "echo": True})
    assert s.choice_chunks[0]["choices"][0]["text"].startswith("Hello world")
    assert texts_by_index(s.chunks)[0] == "Hello world" + plain


def detokenize(url: str, ids: list[int]) -> str:
    reply = post(url, "/detokenize", {"model": MODEL, "tokens": ids})
    assert reply.status == 200, reply.body
    return reply.json["prompt"]


def test_echo_token_prompt_echoes_its_decoding(stack):
    prompts = [[1, 468, 995], [468]]
    r = greedy(stack.url, prompts, 2, echo=True)
    plain = greedy(stack.url, prompts, 2)
    for i, ids in enumerate(prompts):
        prefix = detokenize(stack.url, ids)  # special tokens kept: "<s>..."
        assert r["choices"][i]["text"] == prefix + plain["choices"][i]["text"]
    assert r["choices"][0]["text"].startswith("<s>")
    # with return_token_ids vLLM echoes an empty prompt text
    r = greedy(stack.url, prompts, 2, echo=True, return_token_ids=True)
    assert [c["text"] for c in r["choices"]] == [c["text"] for c in plain["choices"]]


@pytest.mark.parametrize("streaming", [False, True], ids=["json", "sse"])
def test_echo_with_max_tokens_zero(stack, streaming):
    body = {"prompt": ["Hello world", "Hi"], "max_tokens": 0, "echo": True,
            "temperature": 0}
    if streaming:
        s = stream_completion(stack.url, body)
        assert texts_by_index(s.chunks) == {0: "Hello world", 1: "Hi"}
        assert [ch["finish_reason"] for ch in finals_by_index(s.chunks).values()] \
            == ["length", "length"]
        return
    r = completion(stack.url, body)
    assert [c["text"] for c in r["choices"]] == ["Hello world", "Hi"]
    assert all(c["finish_reason"] == "length" for c in r["choices"])
    # vLLM runs one token and reports it in usage.
    assert r["usage"]["completion_tokens"] == 2


def check_logprobs(lp: dict, k: int, first_offset: int = 0) -> None:
    n = len(lp["tokens"])
    assert len(lp["token_logprobs"]) == len(lp["top_logprobs"]) == len(lp["text_offset"]) == n
    offset = first_offset
    for i in range(n):
        assert lp["text_offset"][i] == offset
        offset += len(lp["tokens"][i])
        top = lp["top_logprobs"][i]
        if top is None:
            assert lp["token_logprobs"][i] is None
            continue
        assert 1 <= len(top) <= k + 1
        assert lp["tokens"][i] in top
        assert all(v <= 0.0 and v >= -9999.0 for v in top.values())


@pytest.mark.parametrize("k", [0, 3])
def test_logprobs_streaming_matches_non_streaming(stack, k):
    body = {"prompt": "Hello", "max_tokens": 8, "temperature": 0, "logprobs": k}
    r = completion(stack.url, body)
    lp = r["choices"][0]["logprobs"]
    check_logprobs(lp, k)
    assert len(lp["tokens"]) == 8
    if k == 0:
        assert all(len(t) == 1 for t in lp["top_logprobs"])
    s = stream_completion(stack.url, body)
    tokens, offsets, values = [], [], []
    for c in s.choice_chunks:
        clp = c["choices"][0]["logprobs"]
        check_logprobs(clp, k, clp["text_offset"][0] if clp["text_offset"] else 0)
        tokens += clp["tokens"]
        offsets += clp["text_offset"]
        values += clp["token_logprobs"]
    assert tokens == lp["tokens"] and offsets == lp["text_offset"]
    assert values == pytest.approx(lp["token_logprobs"], abs=1e-4)


def test_echo_logprobs_text_prompt(stack):
    ids = tokenize(stack.url, "Hello world")
    r = greedy(stack.url, "Hello world", 4, echo=True, logprobs=2)
    ch = r["choices"][0]
    lp = ch["logprobs"]
    check_logprobs(lp, 2)
    assert len(lp["tokens"]) == len(ids) + 4
    assert lp["tokens"][0] == "<s>"  # BOS shows in tokens, not in text
    assert lp["token_logprobs"][0] is None and lp["top_logprobs"][0] is None
    assert all(v is not None for v in lp["token_logprobs"][1:])
    assert ch["text"].startswith("Hello world")
    # vLLM asks the engine for prompt logprobs to echo them.
    assert len(ch["prompt_logprobs"]) == len(ids) and ch["prompt_logprobs"][0] is None


@pytest.mark.parametrize("streaming", [False, True], ids=["json", "sse"])
def test_echo_logprobs_single_token_prompts(stack, streaming):
    """vLLM's Rust frontend bug #62460: the first prompt token has no logprob."""
    body = {"prompt": [[1], [468]], "max_tokens": 3, "temperature": 0, "echo": True,
            "logprobs": 1}
    if streaming:
        s = stream_completion(stack.url, body)
        firsts: dict[int, dict] = {}
        tokens: dict[int, list[str]] = {}
        for c in s.choice_chunks:
            ch = c["choices"][0]
            firsts.setdefault(ch["index"], ch)
            tokens.setdefault(ch["index"], []).extend(ch["logprobs"]["tokens"])
        assert sorted(firsts) == [0, 1]
        for i, ch in firsts.items():
            assert ch["logprobs"]["token_logprobs"][0] is None
            assert ch["logprobs"]["top_logprobs"][0] is None
        assert tokens[0][0] == "<s>" and tokens[1][0] == detokenize(stack.url, [468])
        assert len(tokens[0]) == len(tokens[1]) == 4
        return
    r = completion(stack.url, body)
    for ch, first in zip(r["choices"], ("<s>", detokenize(stack.url, [468]))):
        lp = ch["logprobs"]
        check_logprobs(lp, 1)
        assert lp["tokens"][0] == first and len(lp["tokens"]) == 4
        assert lp["token_logprobs"][0] is None and lp["top_logprobs"][0] is None
        assert ch["text"].startswith(first)
        assert ch["prompt_logprobs"] == [None]


def test_prompt_logprobs(stack):
    ids = tokenize(stack.url, "Hello world, the quick brown fox")
    r = greedy(stack.url, "Hello world, the quick brown fox", 2, prompt_logprobs=2)
    ch = r["choices"][0]
    assert ch["logprobs"] is None
    pl = ch["prompt_logprobs"]
    assert len(pl) == len(ids) and pl[0] is None
    for pos, token in zip(pl[1:], ids[1:]):
        assert str(token) in pos and 1 <= len(pos) <= 3
        for entry in pos.values():
            assert set(entry) == {"logprob", "rank", "decoded_token"}
            assert entry["rank"] >= 1 and entry["logprob"] <= 0
    # prompt_logprobs 0: just the actual prompt token per position.
    r0 = greedy(stack.url, "Hello world", 1, prompt_logprobs=0)
    assert all(len(p) == 1 for p in r0["choices"][0]["prompt_logprobs"][1:])


# ---------------------------------------------------------------- stop conditions

# Prompts to choose from when a test needs something of the greedy output.
CANDIDATE_PROMPTS = ["Hello", "The quick brown fox", "Once upon a time there was", "world !",
                     "1 2 3 4", "Stream me"]


class SpanningStop(NamedTuple):
    prompt: str
    text: str  # the full greedy text
    stop: str  # a stop string spanning two tokens
    start: int  # where it starts in text
    num_tokens: int  # tokens up to the one that completes it


def spanning_stop(url: str) -> SpanningStop:
    """The first candidate prompt whose greedy text has a stop string made of
    the last two characters of one token's text and the first two of the
    next one's, that first occurs exactly there."""
    return first_input(CANDIDATE_PROMPTS, lambda prompt: find_spanning_stop(url, prompt))


def find_spanning_stop(url: str, prompt: str, max_tokens: int = 24) -> SpanningStop | None:
    r = greedy(url, prompt, max_tokens, return_token_ids=True, ignore_eos=True)
    text, ids = r["choices"][0]["text"], r["choices"][0]["token_ids"]
    ends = []  # text length after m tokens, while decoding stays a prefix of text
    for m in range(1, len(ids) + 1):
        prefix = detokenize(url, ids[:m])
        if not text.startswith(prefix):
            break
        ends.append(len(prefix))
    for m in range(1, len(ends)):  # the boundary between token m and token m + 1
        before, boundary = (ends[m - 2] if m >= 2 else 0), ends[m - 1]
        if boundary - before < 2 or ends[m] - boundary < 2:
            continue
        stop = text[boundary - 2:boundary + 2]
        if "\ufffd" not in stop and text.find(stop) == boundary - 2 and stop.strip():
            return SpanningStop(prompt, text, stop, boundary - 2, m + 1)
    return None


@pytest.mark.parametrize("include", [False, True], ids=["cut", "included"])
def test_stop_string_spanning_tokens(stack, include):
    prompt, text, stop, start, num_tokens = spanning_stop(stack.url)
    expected = text[:start + len(stop)] if include else text[:start]
    body = {"prompt": prompt, "max_tokens": 24, "temperature": 0, "ignore_eos": True,
            "stop": ["@@never@@", stop], "include_stop_str_in_output": include}
    r = completion(stack.url, body)
    ch = r["choices"][0]
    assert ch["text"] == expected
    assert ch["finish_reason"] == "stop" and ch["stop_reason"] == stop
    # The token that completed the match counts; nothing after it does.
    assert r["usage"]["completion_tokens"] == num_tokens
    # Streaming never shows a partial stop string: text is only ever appended,
    # so the concatenation must be exactly the cut text.
    s = stream_completion(stack.url, body)
    assert texts_by_index(s.chunks) == {0: expected}
    final = finals_by_index(s.chunks)[0]
    assert final["finish_reason"] == "stop" and final["stop_reason"] == stop


def test_stop_string_ignored_within_min_tokens(stack):
    prompt, text, stop, start, num_tokens = spanning_stop(stack.url)
    r = greedy(stack.url, prompt, 24, ignore_eos=True, stop=[stop],
               min_tokens=num_tokens)
    # The match completed by token num_tokens is inside min_tokens: no stop there.
    assert r["choices"][0]["text"].startswith(text[:start + len(stop)])
    r = greedy(stack.url, prompt, 24, ignore_eos=True, stop=[stop],
               min_tokens=num_tokens - 1)
    assert r["choices"][0]["text"] == text[:start]


def test_stop_string_earliest_end_wins_and_string_form(stack):
    prompt, text, stop, start, _ = spanning_stop(stack.url)
    longer = text[max(0, start - 3):start + len(stop) + 3]  # contains stop, ends later
    r = greedy(stack.url, prompt, 24, ignore_eos=True, stop=[longer, stop])
    assert r["choices"][0]["stop_reason"] == stop
    r = greedy(stack.url, prompt, 24, ignore_eos=True, stop=stop)  # a plain string
    assert r["choices"][0]["text"] == text[:start]


def fourth_token_as_stop(url: str, prompt: str) -> tuple[str, int] | None:
    """(prompt, its greedy 4th token) if the output has no EOS and that token
    is new and has text of its own: a stop on it then ends the output right
    there, after the same 3 tokens, and shows when included. (The mock emits
    a stop token 4th: its documented rule.)"""
    choice = greedy(url, prompt, 16, return_token_ids=True)["choices"][0]
    ids = choice["token_ids"]
    if choice["finish_reason"] != "length" or ids[3] in ids[:3]:
        return None
    text = post(url, "/detokenize", {"tokens": [ids[3]]}).json["prompt"]
    return (prompt, ids[3]) if text and "\ufffd" not in text else None


def test_stop_token_ids(stack):
    prompt, stop_id = first_input(CANDIDATE_PROMPTS,
                                  lambda p: fourth_token_as_stop(stack.url, p))
    r = greedy(stack.url, prompt, 16, return_token_ids=True, stop_token_ids=[stop_id])
    ch = r["choices"][0]
    assert ch["finish_reason"] == "stop" and ch["stop_reason"] == stop_id
    assert ch["token_ids"][-1] == stop_id and len(ch["token_ids"]) == 4
    assert r["usage"]["completion_tokens"] == 4
    # The stop token is not detokenized, unless asked for.
    first3 = greedy(stack.url, prompt, 3)["choices"][0]["text"]
    assert ch["text"] == first3
    inc = greedy(stack.url, prompt, 16, stop_token_ids=[stop_id],
                 include_stop_str_in_output=True)["choices"][0]
    assert inc["text"].startswith(first3) and len(inc["text"]) > len(first3)
    s = stream_completion(stack.url, {"prompt": prompt, "max_tokens": 16,
                                      "temperature": 0, "stop_token_ids": [stop_id]})
    assert texts_by_index(s.chunks) == {0: first3}
    final = finals_by_index(s.chunks)[0]
    assert final["finish_reason"] == "stop" and final["stop_reason"] == stop_id


def test_max_tokens_default_null_and_clamp(stack):
    assert greedy(stack.url, "Hello", None, ignore_eos=True)["usage"][
        "completion_tokens"] == 16
    r = completion(stack.url, {"prompt": "Hello", "temperature": 0, "ignore_eos": True})
    assert r["usage"]["completion_tokens"] == 16
    # Clamped to the context left (not rejected): 1024 - 1000 tokens.
    long_prompt = [1] + [100 + i % 900 for i in range(999)]
    r = greedy(stack.url, long_prompt, 100, ignore_eos=True)
    assert r["usage"]["completion_tokens"] == MAX_MODEL_LEN - 1000
    assert r["choices"][0]["finish_reason"] == "length"
    r = greedy(stack.url, long_prompt + [7] * 23, 1024, ignore_eos=True)
    assert r["usage"]["prompt_tokens"] == MAX_MODEL_LEN - 1
    assert r["usage"]["completion_tokens"] == 1


def test_allowed_token_ids(stack):
    allowed = [300, 301, 302, 500]
    r = completion(stack.url, {"prompt": ["Hello", "World"], "max_tokens": 12,
                               "temperature": 1.0, "seed": 3, "n": 2,
                               "allowed_token_ids": allowed, "return_token_ids": True})
    for ch in r["choices"]:
        assert ch["token_ids"] and set(ch["token_ids"]) <= set(allowed)


def test_skip_special_tokens(stack):
    body = {"prompt": "Hi", "max_tokens": 3, "temperature": 0, "ignore_eos": True,
            "allowed_token_ids": [4]}  # <|im_start|>, an added special token
    kept = completion(stack.url, {**body, "skip_special_tokens": False})
    assert kept["choices"][0]["text"] == "<|im_start|>" * 3
    skipped = completion(stack.url, body)
    assert skipped["choices"][0]["text"] == ""
    s = stream_completion(stack.url, {**body, "skip_special_tokens": False})
    assert texts_by_index(s.chunks) == {0: "<|im_start|>" * 3}


# ---------------------------------------------------------------- real model only

@pytest.mark.real_engine
def test_eos_stop_token_and_ignore_eos(real):
    # generation_config.json: eos [2, 5]; "world !" greedily ends with id 5.
    r = greedy(real.url, "world !", 32, return_token_ids=True)
    ch = r["choices"][0]
    assert ch["finish_reason"] == "stop" and ch["stop_reason"] == 5
    assert ch["token_ids"][-1] == 5 and len(ch["token_ids"]) == 12
    assert "<|im_end|>" not in ch["text"]
    r = greedy(real.url, "world !", 20, ignore_eos=True)
    assert r["choices"][0]["finish_reason"] == "length"
    assert r["usage"]["completion_tokens"] == 20
    # user stop_token_ids still apply with ignore_eos
    r = greedy(real.url, "world !", 32, ignore_eos=True, stop_token_ids=[5])
    assert r["choices"][0]["stop_reason"] == 5


@pytest.mark.real_engine
def test_min_tokens_defers_eos(real):
    r = greedy(real.url, "world !", 30, min_tokens=20, return_token_ids=True)
    ch = r["choices"][0]
    assert len(ch["token_ids"]) >= 20
    assert 5 not in ch["token_ids"][:20] and 2 not in ch["token_ids"][:20]


@pytest.mark.real_engine
def test_logit_bias(real):
    r = greedy(real.url, "Hello", 6, logit_bias={"300": 100}, return_token_ids=True,
               ignore_eos=True)
    assert r["choices"][0]["token_ids"] == [300] * 6
    r = greedy(real.url, "Hello", 6, return_token_ids=True, ignore_eos=True)
    first = r["choices"][0]["token_ids"][0]
    banned = greedy(real.url, "Hello", 1, logit_bias={str(first): -100},
                    return_token_ids=True)
    assert banned["choices"][0]["token_ids"][0] != first


def contains(ids: list[int], seq: list[int]) -> bool:
    return any(ids[i:i + len(seq)] == seq for i in range(len(ids) - len(seq) + 1))


def word_to_ban(url: str, prompt: str) -> tuple[str, dict, str, list] | None:
    """(prompt, its greedy choice, a word of it, the token sequences vLLM bans
    for the word) when a word's tokens occur in the greedy output."""
    r = greedy(url, prompt, 16, return_token_ids=True, ignore_eos=True, logprobs=0)
    ch = r["choices"][0]
    for token in ch["logprobs"]["tokens"]:
        word = token.strip()
        if not word.isalpha() or len(word) < 3:
            continue
        # vLLM bans the word's tokens, and those of " word" when that is a
        # different token sequence of the same length.
        plain = tokenize(url, word, add_special_tokens=False)
        spaced = tokenize(url, " " + word, add_special_tokens=False)
        banned = [plain] + ([spaced] if len(plain) == len(spaced)
                            and plain[0] != spaced[0] else [])
        if any(contains(ch["token_ids"], seq) for seq in banned):
            return prompt, ch, word, banned
    return None


@pytest.mark.real_engine
def test_bad_words(real):
    prompt, ch, word, banned = first_input(
        ["The quick brown fox", *CANDIDATE_PROMPTS], lambda p: word_to_ban(real.url, p))
    out = greedy(real.url, prompt, 16, return_token_ids=True, ignore_eos=True,
                 bad_words=[word])["choices"][0]
    assert not any(contains(out["token_ids"], seq) for seq in banned), (word, banned)
    assert out["token_ids"] != ch["token_ids"]


@pytest.mark.real_engine
def test_seed_reproducible_with_temperature(real):
    body = {"prompt": ["Hello", "Café crème"], "max_tokens": 16, "temperature": 1.5,
            "top_p": 0.9, "top_k": 50, "seed": 42}
    a = completion(real.url, body)
    b = completion(real.url, body)
    assert [c["text"] for c in a["choices"]] == [c["text"] for c in b["choices"]]
    c = completion(real.url, {**body, "seed": 43})
    assert [x["text"] for x in c["choices"]] != [x["text"] for x in a["choices"]]


# ---------------------------------------------------------------- streaming == JSON

STREAM_PROMPTS = ["Hello", "Café crème, 東京 and 🙂 emoji", "world !",
                  "The quick brown fox jumps over the lazy dog."]


@pytest.mark.parametrize("extra", [{}, {"logprobs": 2}, {"stop": [" ", "e"]},
                                   {"skip_special_tokens": False, "n": 1}],
                         ids=["plain", "logprobs", "stops", "specials"])
def test_streamed_text_equals_non_streamed(stack, extra):
    """Byte for byte, partial UTF-8 (U+FFFD) included."""
    body = {"prompt": STREAM_PROMPTS, "max_tokens": 40, "temperature": 0, **extra}
    full = completion(stack.url, body)
    s = stream_completion(stack.url, body)
    texts = texts_by_index(s.chunks)
    for ch in full["choices"]:
        assert texts[ch["index"]].encode() == ch["text"].encode(), ch["index"]
    finals = finals_by_index(s.chunks)
    for ch in full["choices"]:
        assert finals[ch["index"]]["finish_reason"] == ch["finish_reason"]
        assert finals[ch["index"]]["stop_reason"] == ch["stop_reason"]


# ---------------------------------------------------------------- cancellation

def test_streaming_disconnect_64_prompts_aborts_everything(stack):
    prompts = [f"prompt number {i}" for i in range(64)]
    with stack.mock_step_time(0.01):
        aborted, finished = stack.engine_requests()
        before = stack.stats() if stack.mock else None
        req = RawRequest(stack.url, "/v1/completions", {
            "model": MODEL, "prompt": prompts, "max_tokens": 1000, "ignore_eos": True,
            "temperature": 0, "stream": True})
        try:
            req.read_until(b"data: ", count=80)
            assert req.status == 200
        finally:
            req.hang_up()
        wait_for(lambda: stack.frontend.debug_state()["table"] == 0, timeout=30,
                 message="table not empty after disconnect")
        stack.frontend.wait_idle(timeout=30)
        # All 64 aborted, none finished by the engine itself.
        assert stack.engine_requests() == (aborted + 64, finished)
        if stack.mock:
            after = stack.stats()
            assert after["aborted"] - before["aborted"] == 64
            assert after["aborts_after_finish"] == 0
            assert after["finished"]["length"] == before["finished"]["length"]


def test_non_streaming_disconnect_aborts(stack):
    with stack.mock_step_time(0.01):
        aborted, finished = stack.engine_requests()
        mock_aborted = stack.stats()["aborted"] if stack.mock else None
        req = RawRequest(stack.url, "/v1/completions", {
            "model": MODEL, "prompt": ["Hello", "World"], "n": 2, "temperature": 1,
            "max_tokens": 1000, "ignore_eos": True})
        try:
            # The engine's own scheduler stats: it runs all four.
            wait_for(lambda: stack.engine_running() == 4, timeout=10,
                     message=lambda: f"engine runs {stack.engine_running()} of 4")
            assert stack.frontend.debug_state()["table"] == 4
        finally:
            req.hang_up()
        stack.frontend.wait_idle(timeout=30)
        # The frontend aborted all four, and the engine finished none by itself.
        assert stack.engine_requests() == (aborted + 4, finished)
        if stack.mock:
            assert stack.stats()["aborted"] == mock_aborted + 4


@pytest.mark.parametrize("bad", [
    ["Hello", "x" * 20000],                      # a later prompt too long (chars)
    [[1, 2, 3], [1] * 1025],                     # a later token prompt too long
    [[1, 2, 3], [1, 99999]],                     # a later token out of vocabulary
    [[1, 2, 3], []],                             # a later empty prompt
], ids=["long-text", "long-tokens", "oov", "empty"])
def test_batch_with_a_later_invalid_prompt_sends_nothing(stack, bad):
    before = stack.stats()["adds"] if stack.mock else None
    for streaming in (False, True):
        reply = post(stack.url, "/v1/completions", {
            "model": MODEL, "prompt": bad, "max_tokens": 4, "stream": streaming})
        assert reply.status == 400, reply.body
        reply.error  # OpenAI's error shape
    if stack.mock:
        assert stack.stats()["adds"] == before
    # and the engine is fine
    assert greedy(stack.url, "Hello", 2)["usage"]["completion_tokens"] == 2


def test_openai_client_streaming(stack):
    c = client(stack.url)
    events = list(c.completions.create(model=MODEL, prompt=["Hello", "World"], n=2,
                                       max_tokens=5, temperature=0.5, stream=True,
                                       stream_options={"include_usage": True},
                                       # unseeded sampling may draw EOS early
                                       extra_body={"ignore_eos": True}))
    assert events[-1].usage.completion_tokens == 20 and events[-1].choices == []
    indices = {ch.index for e in events for ch in e.choices}
    assert indices == {0, 1, 2, 3}
    with pytest.raises(openai.BadRequestError):
        c.completions.create(model=MODEL, prompt="Hello", max_tokens=4, stream=True,
                             temperature=-1)
