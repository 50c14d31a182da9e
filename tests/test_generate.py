"""POST /inference/v1/generate: token ids in, token ids (or text) out.

vLLM bug #52398 lost choices of non-streaming n > 1 requests, and its Rust
frontend ignored n (#52843): here every one of the n choices must come back,
in both modes. Runs on the real engine and on the mock (with counters).
"""

from __future__ import annotations

from typing import Any

import pytest

from harness.waits import wait_for
from tests.support.http_client import RawRequest, finals_by_index, post, stream
from tests.support.requirements import first_input

PATH = "/inference/v1/generate"
PROMPT = [1, 468, 995]
MAX_MODEL_LEN = 1024
RESPONSE_KEYS = {"request_id", "model", "created", "usage", "prompt_logprobs",
                 "prompt_token_id_logprobs", "prompt_token_ids", "mm_placeholders",
                 "metrics", "kv_transfer_params", "ec_transfer_params", "output_mode",
                 "choices"}
CHOICE_KEYS = {"index", "finish_reason", "stop_reason", "token_ids", "routed_experts",
               "sampling_mask", "weight_versions", "logprobs"}


def generate(url: str, body: dict) -> dict:
    reply = post(url, PATH, body)
    assert reply.status == 200, (reply.status, reply.body[:2000])
    return reply.json


def sampled(n: int = 4, max_tokens: int = 6, **extra: Any) -> dict:
    return {"max_tokens": max_tokens, "temperature": 0.8, "seed": 5, "n": n,
            "ignore_eos": True, **extra}


# ---------------------------------------------------------------- n > 1

def test_n4_non_streaming_returns_every_choice(stack):
    for _ in range(5):  # vLLM's bug dropped choices at random
        r = generate(stack.url, {"token_ids": PROMPT, "sampling_params": sampled()})
        assert set(r) == RESPONSE_KEYS
        assert r["request_id"].startswith("generate-tokens-")
        assert r["output_mode"] == "tokens" and r["model"] == "tiny"
        assert [c["index"] for c in r["choices"]] == [0, 1, 2, 3]
        for c in r["choices"]:
            assert set(c) == CHOICE_KEYS
            assert len(c["token_ids"]) == 6 and c["finish_reason"] == "length"
            assert c["weight_versions"] == [{"version": "default", "start": 0, "end": 6}]
        assert len({tuple(c["token_ids"]) for c in r["choices"]}) == 4
        assert r["usage"]["prompt_tokens"] == 3  # once, not per choice
        assert r["usage"]["completion_tokens"] == 24
        assert r["usage"]["total_tokens"] == 27


def test_n4_streaming_returns_every_choice(stack):
    body = {"token_ids": PROMPT, "sampling_params": sampled(),
            "stream_options": {"include_usage": True}}
    s = stream(stack.url, PATH, {**body, "stream": True})
    s.check_framing()
    tokens: dict[int, list[int]] = {}
    for c in s.choice_chunks:
        assert set(c) == {"request_id", "usage", "output_mode", "choices"}
        assert c["usage"] is None and len(c["choices"]) == 1
        ch = c["choices"][0]
        tokens.setdefault(ch["index"], []).extend(ch["token_ids"])
        if ch["finish_reason"] is None:
            assert ch["weight_versions"] is None
    finals = finals_by_index(s.choice_chunks)
    assert sorted(finals) == [0, 1, 2, 3]
    assert all(f["weight_versions"] == [{"version": "default", "start": 0, "end": 6}]
               for f in finals.values())
    (usage,) = s.usage_chunks
    assert s.chunks[-1] == usage
    assert usage["usage"] == {"prompt_tokens": 3, "total_tokens": 27,
                              "completion_tokens": 24}
    assert "model" not in usage and "created" not in usage
    # Same seeds, same samples as the non-streaming request.
    full = generate(stack.url, {"token_ids": PROMPT, "sampling_params": sampled()})
    assert tokens == {c["index"]: c["token_ids"] for c in full["choices"]}


def test_greedy_n1_default_params(stack):
    r = generate(stack.url, {"token_ids": PROMPT,
                             "sampling_params": {"max_tokens": 5, "temperature": 0}})
    assert len(r["choices"]) == 1 and len(r["choices"][0]["token_ids"]) == 5
    # The tokens of /v1/completions for the same token prompt.
    cmpl = post(stack.url, "/v1/completions", {
        "model": "tiny", "prompt": PROMPT, "max_tokens": 5, "temperature": 0,
        "return_token_ids": True}).json
    assert cmpl["choices"][0]["token_ids"] == r["choices"][0]["token_ids"]


def test_max_tokens_defaults_to_the_rest_of_the_context(stack):
    prompt = [1] + [100 + i % 900 for i in range(MAX_MODEL_LEN - 5)]
    r = generate(stack.url, {"token_ids": prompt,
                             "sampling_params": {"temperature": 0, "ignore_eos": True}})
    assert len(r["choices"][0]["token_ids"]) == 4
    assert r["choices"][0]["finish_reason"] == "length"


# ---------------------------------------------------------------- options

def test_output_mode_text(stack):
    body = {"token_ids": PROMPT, "output_mode": "text",
            "sampling_params": {"max_tokens": 8, "temperature": 0, "logprobs": 2}}
    r = generate(stack.url, body)
    assert r["output_mode"] == "text"
    ch = r["choices"][0]
    cmpl = post(stack.url, "/v1/completions", {
        "model": "tiny", "prompt": PROMPT, "max_tokens": 8, "temperature": 0}).json
    assert ch["text"] == cmpl["choices"][0]["text"]
    content = ch["logprobs"]["content"]
    assert len(content) == 8
    for entry in content:
        assert set(entry) == {"token", "logprob", "bytes", "top_logprobs"}
        assert entry["bytes"] == list(entry["token"].encode())
        assert 1 <= len(entry["top_logprobs"]) <= 2
    s = stream(stack.url, PATH, {**body, "stream": True})
    s.check_framing()
    assert "".join(c["choices"][0]["text"] for c in s.choice_chunks) == ch["text"]


def test_logprobs_tokens_mode(stack):
    for k in (0, 1, 3):
        r = generate(stack.url, {"token_ids": PROMPT, "sampling_params": {
            "max_tokens": 4, "temperature": 0, "logprobs": k}})
        ch = r["choices"][0]
        content = ch["logprobs"]["content"]
        assert [e["token_id"] for e in content] == ch["token_ids"]
        for e in content:
            assert set(e) == {"token_id", "logprob", "rank", "top_logprobs"}
            assert e["logprob"] <= 0 and e["rank"] >= 1
            tops = e["top_logprobs"]
            assert len(tops) == max(k, 1)
            assert tops[0]["token_id"] == e["token_id"]  # the sampled token first
            assert all(set(t) == {"token_id", "logprob", "rank"} for t in tops)
    s = stream(stack.url, PATH, {"token_ids": PROMPT, "stream": True, "sampling_params": {
        "max_tokens": 4, "temperature": 0, "logprobs": 1}})
    s.check_framing()
    streamed = [e["token_id"] for c in s.choice_chunks
                for e in c["choices"][0]["logprobs"]["content"]]
    assert streamed == ch["token_ids"]


def test_return_token_ids(stack):
    body = {"token_ids": PROMPT, "return_token_ids": True, "sampling_params": sampled(2)}
    r = generate(stack.url, body)
    assert r["prompt_token_ids"] == PROMPT
    s = stream(stack.url, PATH, {**body, "stream": True})
    s.check_framing()
    chunks = s.choice_chunks
    assert chunks[0]["prompt_token_ids"] == PROMPT  # on the first chunk only
    assert all("prompt_token_ids" not in c for c in chunks[1:])
    assert len(finals_by_index(chunks)) == 2
    plain = stream(stack.url, PATH, {"token_ids": PROMPT, "stream": True,
                                     "sampling_params": sampled(2)})
    assert all("prompt_token_ids" not in c for c in plain.chunks)


def test_stream_options_usage(stack):
    body = {"token_ids": PROMPT, "stream": True, "sampling_params": sampled(2, 5)}
    s = stream(stack.url, PATH, body)
    s.check_framing()
    assert not s.usage_chunks
    s = stream(stack.url, PATH, {**body, "stream_options": {
        "include_usage": True, "continuous_usage_stats": True}})
    s.check_framing()
    done: dict[int, int] = {}
    for c in s.choice_chunks:
        i = c["choices"][0]["index"]
        done[i] = done.get(i, 0) + len(c["choices"][0]["token_ids"])
        usage = {k: c["usage"][k] for k in ("prompt_tokens", "completion_tokens",
                                             "total_tokens")}
        assert usage == {"prompt_tokens": 3, "completion_tokens": done[i],
                         "total_tokens": 3 + done[i]}
    (final,) = s.usage_chunks
    assert final["usage"]["completion_tokens"] == 10


def new_fourth_token(url: str, prompt: list[int]) -> tuple[list[int], list[int]] | None:
    """(prompt, its greedy output) if the output has no EOS and its 4th token
    is new: a stop on that token ends the output right there. (The mock emits
    a stop token 4th: its documented rule.)"""
    choice = generate(url, {"token_ids": prompt, "sampling_params": {
        "max_tokens": 8, "temperature": 0}})["choices"][0]
    ids = choice["token_ids"]
    return (prompt, ids) if choice["finish_reason"] == "length" and ids[3] not in ids[:3] \
        else None


def test_stop_token_ids_and_stop_strings_in_text_mode(stack):
    prompt, ids = first_input([PROMPT, [1, 300], [1, 700, 701, 702, 703, 704], [1, 120, 845]],
                              lambda p: new_fourth_token(stack.url, p))
    r = generate(stack.url, {"token_ids": prompt, "sampling_params": {
        "max_tokens": 8, "temperature": 0, "stop_token_ids": [ids[3]]}})
    ch = r["choices"][0]
    assert ch["token_ids"] == ids[:4]
    assert ch["finish_reason"] == "stop" and ch["stop_reason"] == ids[3]


# ---------------------------------------------------------------- errors

BAD = {
    "negative-id": {"token_ids": [1, -5], "sampling_params": {"max_tokens": 2}},
    "empty": {"token_ids": [], "sampling_params": {"max_tokens": 2}},
    "out-of-vocab": {"token_ids": [1, 5000], "sampling_params": {"max_tokens": 2}},
    "too-long": {"token_ids": [1] * 1025, "sampling_params": {"max_tokens": 2}},
    "n-over-max-num-seqs": {"token_ids": PROMPT,
                            "sampling_params": {"n": 1000, "temperature": 1}},
    "greedy-n2": {"token_ids": PROMPT, "sampling_params": {"n": 2, "temperature": 0}},
    "temperature": {"token_ids": PROMPT, "sampling_params": {"temperature": -1}},
    "top-p": {"token_ids": PROMPT, "sampling_params": {"top_p": 0}},
    "max-tokens-0": {"token_ids": PROMPT, "sampling_params": {"max_tokens": 0}},
    "min-over-max": {"token_ids": PROMPT,
                     "sampling_params": {"max_tokens": 2, "min_tokens": 3}},
    "logprobs-21": {"token_ids": PROMPT, "sampling_params": {"logprobs": 21}},
    "stop-token-oov": {"token_ids": PROMPT, "sampling_params": {"stop_token_ids": [5000]}},
    "allowed-oov": {"token_ids": PROMPT, "sampling_params": {"allowed_token_ids": [5000]}},
    "logit-bias-oov": {"token_ids": PROMPT, "sampling_params": {"logit_bias": {"5000": 1}}},
    "unknown-model": {"model": "nope", "token_ids": PROMPT, "sampling_params": {}},
    "wrong-type": {"token_ids": "1 2 3", "sampling_params": {}},
    "bad-output-mode": {"token_ids": PROMPT, "output_mode": "words"},
}


@pytest.mark.parametrize("case", BAD)
def test_errors_never_reach_the_engine(stack, case):
    before = stack.adds()
    for streaming in (False, True):
        body = dict(BAD[case])
        if streaming:
            body["stream"] = True
        reply = post(stack.url, PATH, body)
        expected = 404 if case == "unknown-model" else 400
        assert reply.status == expected, (streaming, reply.status, reply.body)
        err = reply.error
        if case == "n-over-max-num-seqs":
            assert "max_num_seqs" in err["message"]
        if case == "greedy-n2":
            assert "n must be 1 when using greedy sampling" in err["message"]
    assert stack.adds() == before
    assert generate(stack.url, {"token_ids": PROMPT, "sampling_params": {
        "max_tokens": 2}})["usage"]["completion_tokens"] == 2


def test_streaming_disconnect_aborts_all_children(stack):
    with stack.mock_step_time(0.01):
        aborted, finished = stack.engine_requests()
        mock_aborted = stack.stats()["aborted"] if stack.mock else None
        req = RawRequest(stack.url, PATH, {"token_ids": PROMPT, "stream": True,
                                           "sampling_params": sampled(4, 1000)})
        try:
            req.read_until(b"data: ", count=8)
        finally:
            req.hang_up()
        wait_for(lambda: stack.frontend.debug_state()["table"] == 0, 30,
                 message="table not empty after the client left")
        stack.frontend.wait_idle(timeout=30)
        # The frontend aborted all four, and the engine finished none by itself.
        assert stack.engine_requests() == (aborted + 4, finished)
        if stack.mock:
            assert stack.stats()["aborted"] == mock_aborted + 4
