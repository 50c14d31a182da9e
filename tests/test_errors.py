"""Bad input: a 4xx in OpenAI's error shape, nothing sent to the engine, and the
engine still serving afterwards.

The engine validates nothing and dies (or silently stops reading input) on
some invalid requests, so the frontend must catch everything first. Against
the mock engine its ``adds`` counter proves that nothing reached it; against
the real engine a good request after every bad one proves that it survived.
Streaming requests are rejected the way vLLM's Python server rejects them:
with the status, before the stream starts.
"""

from __future__ import annotations

import json

import pytest

from tests.support.http_client import MODEL, post
from tests.support.stacks import Target

BASE = {"model": MODEL, "prompt": "Hello", "max_tokens": 4}
OOV = 1207  # the tiny model's vocab_size: the first id out of vocabulary

# name -> (body changes, expected status, a substring of the message or None)
CASES: dict[str, tuple[dict, int, str | None]] = {
    # prompts
    "empty-prompt-list": ({"prompt": []}, 400, None),
    "empty-prompt-string": ({"prompt": ""}, 400, "non-empty"),
    "empty-token-prompt-in-batch": ({"prompt": [[1, 2], []]}, 400, None),
    "prompt-too-long-tokens": ({"prompt": [1] * 1025}, 400, "maximum context length"),
    "prompt-fills-the-context": ({"prompt": [1] * 1024}, 400, None),
    "prompt-too-long-text": ({"prompt": "hello " * 1100}, 400, "maximum context length"),
    "prompt-too-long-chars": ({"prompt": "x" * 100_000}, 400, "maximum context length"),
    "token-out-of-vocab": ({"prompt": [1, OOV]}, 400, "out of vocabulary"),
    "token-out-of-vocab-batch": ({"prompt": [[1, 2], [3, OOV + 5000]]}, 400, None),
    "token-negative": ({"prompt": [1, -1]}, 400, None),
    "token-negative-batch": ({"prompt": [[1, 2], [-7]]}, 400, None),
    "mixed-text-and-tokens": ({"prompt": ["Hello", [1, 2]]}, 400, None),
    "mixed-tokens-and-text": ({"prompt": [[1, 2], "Hello"]}, 400, None),
    "mixed-int-and-list": ({"prompt": [[1, 2], 3]}, 400, None),
    "mixed-int-and-str": ({"prompt": [1, "a"]}, 400, None),
    "too-many-prompts": ({"prompt": ["a"] * 1025}, 400, None),
    # sampling parameters
    "temperature-negative": ({"temperature": -1}, 400, "temperature"),
    "temperature-3": ({"temperature": 3}, 400, "temperature"),
    "top-p-0": ({"top_p": 0}, 400, "top_p"),
    "top-p-2": ({"top_p": 2}, 400, "top_p"),
    "top-k-minus-2": ({"top_k": -2}, 400, "top_k"),
    "min-p-2": ({"min_p": 2}, 400, "min_p"),
    "presence-penalty-3": ({"presence_penalty": 3}, 400, "presence_penalty"),
    "frequency-penalty-minus-3": ({"frequency_penalty": -3}, 400, "frequency_penalty"),
    "repetition-penalty-0": ({"repetition_penalty": 0}, 400, "repetition_penalty"),
    "max-tokens-0": ({"max_tokens": 0}, 400, "max_tokens"),
    "max-tokens-negative": ({"max_tokens": -1}, 400, None),
    "max-tokens-5000": ({"max_tokens": 5000}, 400, "max_tokens=5000"),
    "min-tokens-over-max": ({"min_tokens": 5, "max_tokens": 4}, 400, "min_tokens"),
    "min-tokens-negative": ({"min_tokens": -1}, 400, "min_tokens"),
    "n-0": ({"n": 0}, 400, None),
    "greedy-n-2": ({"n": 2, "temperature": 0}, 400, "greedy"),
    "logprobs-21": ({"logprobs": 21}, 400, "logprobs"),
    "logprobs-minus-2": ({"logprobs": -2}, 400, "logprobs"),
    "prompt-logprobs-21": ({"prompt_logprobs": 21}, 400, "logprobs"),
    "prompt-logprobs-minus-2": ({"prompt_logprobs": -2}, 400, "prompt_logprobs"),
    "echo-logprobs-21": ({"echo": True, "logprobs": 21}, 400, None),
    "stop-empty-string": ({"stop": [""]}, 400, "stop"),
    "stop-empty-string-alone": ({"stop": ""}, 400, None),
    "bad-words-empty": ({"bad_words": [""]}, 400, None),
    "logit-bias-bad-key": ({"logit_bias": {"abc": 1}}, 400, "logit_bias"),
    "logit-bias-out-of-vocab": ({"logit_bias": {str(OOV): 1}}, 400, "logit_bias"),
    "logit-bias-negative-id": ({"logit_bias": {"-1": 1}}, 400, None),
    "allowed-token-ids-out-of-vocab": ({"allowed_token_ids": [1, OOV]}, 400,
                                       "allowed_token_ids"),
    "allowed-token-ids-empty": ({"allowed_token_ids": []}, 400, "allowed_token_ids"),
    "stop-token-ids-out-of-vocab": ({"stop_token_ids": [OOV]}, 400, "stop_token_ids"),
    "stop-token-ids-negative": ({"stop_token_ids": [-1]}, 400, None),
    "truncate-below-minus-1": ({"truncate_prompt_tokens": -2}, 400, None),
    "truncate-over-context": ({"truncate_prompt_tokens": 5000}, 400, None),
    # the request itself
    "unknown-model": ({"model": "nope"}, 404, "does not exist"),
    "wrong-type-prompt": ({"prompt": 5}, 400, None),
    "wrong-type-prompt-dict": ({"prompt": {"text": "x"}}, 400, None),
    "wrong-type-max-tokens": ({"max_tokens": "many"}, 400, None),
    "wrong-type-n": ({"n": "two"}, 400, None),
    "wrong-type-stop": ({"stop": 5}, 400, None),
    "wrong-type-temperature": ({"temperature": "hot"}, 400, None),
    "wrong-type-logprobs": ({"logprobs": "x"}, 400, None),
    "wrong-type-logit-bias": ({"logit_bias": [1, 2]}, 400, None),
    "wrong-type-stream-options": ({"stream_options": "yes"}, 400, None),
    "float-token-id": ({"prompt": [1, 2.5]}, 400, None),
    "huge-token-id": ({"prompt": [1, 2**70]}, 400, None),
    "huge-seed": ({"seed": 2**70}, 400, None),
}

# Raw bodies that are not a JSON object of the right shape.
RAW_CASES: dict[str, bytes] = {
    "malformed-json": b'{"model": "tiny", "prompt": ',
    "not-json": b"prompt=Hello",
    "json-list": b'["Hello"]',
    "json-string": b'"Hello"',
    "empty-body": b"",
    "invalid-utf8": b'{"model": "tiny", "prompt": "\xff\xfe"}',
}


def check_rejected(reply, status: int, text: str | None, case: str) -> dict:
    assert reply.status == status, (case, reply.status, reply.body[:500])
    assert reply.headers.get("Content-Type", "").startswith("application/json"), \
        (case, reply.headers)
    err = reply.error  # {"error": {message, type, param, code}}, code == status
    if text is not None:
        assert text in err["message"], (case, err)
    return err


def check_engine_serves(target: Target) -> None:
    reply = post(target.url, "/v1/completions", {**BASE, "max_tokens": 2})
    assert reply.status == 200, reply.body
    assert reply.json["usage"]["completion_tokens"] == 2


@pytest.mark.parametrize("case", CASES)
def test_bad_completion_request(stack, case):
    change, status, text = CASES[case]
    before = stack.adds()
    body = {**BASE, **change}
    err = check_rejected(post(stack.url, "/v1/completions", body), status, text, case)
    if status == 404:
        assert err["type"] == "NotFoundError" and err["param"] == "model"
    # Streaming: the same status, before any event (vLLM validates first).
    streamed = post(stack.url, "/v1/completions", {**body, "stream": True})
    check_rejected(streamed, status, text, case)
    assert stack.adds() == before
    check_engine_serves(stack)


@pytest.mark.parametrize("case", RAW_CASES)
def test_malformed_body(stack, case):
    before = stack.adds()
    reply = post(stack.url, "/v1/completions", RAW_CASES[case])
    err = check_rejected(reply, 400, None, case)
    assert err["type"] in ("Bad Request", "BadRequestError")
    assert stack.adds() == before
    check_engine_serves(stack)


def test_stream_only_and_non_stream_only_rules(stack):
    before = stack.adds()
    # prompt_logprobs cannot stream ...
    check_rejected(post(stack.url, "/v1/completions",
                        {**BASE, "prompt_logprobs": 1, "stream": True}),
                   400, "prompt_logprobs", "prompt_logprobs+stream")
    # ... and stream_options need a stream.
    check_rejected(post(stack.url, "/v1/completions",
                        {**BASE, "stream_options": {"include_usage": True}}),
                   400, "stream=True", "stream_options without stream")
    assert stack.adds() == before
    # The non-streaming / streaming twins are fine; so is an empty stream_options
    # without a stream (vLLM's check reads the raw value: {} is "not set").
    assert post(stack.url, "/v1/completions", {**BASE, "prompt_logprobs": 1}).status == 200
    assert post(stack.url, "/v1/completions",
                {**BASE, "stream": True, "stream_options": {}}).status == 200
    assert post(stack.url, "/v1/completions", {**BASE, "stream_options": {}}).status == 200


def test_oversized_body_is_413(stack):
    before = stack.adds()
    body = json.dumps({**BASE, "prompt": "x" * (33 * 1024 * 1024)}).encode()
    for streaming in (False, True):
        data = body if not streaming else body.replace(b'"max_tokens"',
                                                       b'"stream": true, "max_tokens"')
        reply = post(stack.url, "/v1/completions", data, timeout=60)
        check_rejected(reply, 413, None, "oversized")
    assert stack.adds() == before
    check_engine_serves(stack)


def test_lax_parsing_like_vllm(stack):
    """vLLM's pydantic models are lax: numbers and booleans as strings are fine,
    unknown fields are ignored."""
    reply = post(stack.url, "/v1/completions", {
        **BASE, "temperature": "0", "max_tokens": "3", "echo": "false",
        "some_unknown_field": {"x": 1}})
    assert reply.status == 200, reply.body
    assert reply.json["usage"]["completion_tokens"] == 3


def test_bad_routes_and_methods(stack):
    assert post(stack.url, "/v1/nothing-here", BASE).status == 404
    reply = post(stack.url, "/detokenize", {"model": MODEL, "tokens": [1, -1]})
    check_rejected(reply, 400, None, "detokenize negative")
    reply = post(stack.url, "/tokenize", {"model": "nope", "prompt": "x"})
    check_rejected(reply, 404, None, "tokenize unknown model")


@pytest.mark.parametrize("message", [
    "bad <object at 0x7f00aa>",
    "cannot open /tmp/x/y.png",
    "see https://pytorch.org/docs/stable/generated/torch.load.html.",
    'boom\n  File "/usr/lib/x.py", line 3, in f\n    raise E\nValueError: no',
    "a ratio 3/4 and tokens/s, not paths",
])
def test_messages_sanitized_as_vllm(message: str) -> None:
    """Client-facing messages lose what vLLM's ``sanitize_message`` strips."""
    from frontend.errors import sanitize
    from tests.support.requirements import require_vllm

    require_vllm()
    from vllm.entrypoints.serve.exception_handling.utils import sanitize_message

    assert sanitize(message) == sanitize_message(message)
