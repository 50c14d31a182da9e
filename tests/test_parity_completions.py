"""Parity with vLLM's own Python frontend: /v1/completions, /inference/v1/generate
and the small routes.

Every shape below is sent to vLLM 0.32's unmodified ``vllm serve`` API server
(fixture ``vllm_frontend``, on its own real engine) and to our frontend
(fixture ``frontend``, on the session's real engine); both engines run the same
tiny model with the same settings. The answers must be equal as parsed JSON,
except for the fields in ``IGNORED_FIELDS`` (ids, timestamps, the config hash).

* Every generation is greedy (temperature 0) or seeded. vLLM's seeded sampling
  is deterministic: each engine request has its own ``torch.Generator``, and
  n > 1 children get ``seed + j`` (vllm/v1/engine/parallel_sampling.py).
* Requests are sent one at a time, in the same order to both servers, so both
  engines see the same batches and the same prefix-cache state.
* Streams are compared event by event (every chunk, the usage chunk and
  ``[DONE]``, which must come exactly once, last), with two freedoms that
  come from vLLM itself, not from us:
  - chunks of *different* choices may interleave in any order (vLLM merges
    the per-prompt generators in arrival order, ``merge_async_iterators``,
    and n > 1 children race), so chunks are compared per choice index, in
    order, and the chunks without a single choice (usage, errors) in order;
  - both frontends merge consecutive engine steps of a choice into one chunk
    when they pile up before the client takes them (vLLM's
    ``RequestOutputCollector`` merges DELTA outputs when its HTTP side lags,
    which on a loaded CPU box happens in most streams; ours merges the steps
    read in one wake-up). So the two streams must cut into runs of
    consecutive chunks whose merges (``merge_chunks``: concatenated
    text/token ids/logprobs, the later finish fields, the first prompt
    fields) are equal pairwise, in order; with no lag that is plain equality.
* Errors: status, ``error.type``, ``error.param`` and ``error.code`` always;
  the message too, except for the shapes listed in ``MESSAGE_DIFFERS`` with
  the reason.
* ``KNOWN_DIFFERENCES`` lists where we differ from vLLM on purpose, each with
  its reason; such a shape checks our answer against what we do instead.
"""

from __future__ import annotations

import http.client
import itertools
import json
from dataclasses import dataclass, field
from typing import Any, Callable
from urllib.parse import urlsplit

import pytest

from tests.support.stream_chunks import match_coarsening

pytestmark = [pytest.mark.real_engine, pytest.mark.vllm_frontend]

# Top-level fields that legitimately differ between two servers.
IGNORED_FIELDS = ("id", "request_id", "created", "system_fingerprint")
TIMEOUT_S = 120.0

# Texts and tokens of the tiny model's greedy continuations (they are the same
# on both servers; the stop cases below only need them to be realistic).
HELLO = "Hello"          # greedy: "\ufffdok\ufffd\ufffd watches jalapeño\ufffdro Ångströ8 ..."
EOS_PROMPT = "1 2 3 4"   # greedy: 7 tokens, the last is <|im_end|> (5, a generation EOS)
LONG_TEXT = " ".join(["the quick brown fox jumps over the lazy dog"] * 12)


@dataclass
class Shape:
    id: str
    path: str
    body: Any = None              # a JSON value, or bytes sent as they are
    method: str = "POST"
    normalize: Callable[[Any], Any] | None = None  # extra per-route normalization


def cmpl(id: str, **body: Any) -> Shape:
    body.setdefault("model", "tiny")
    body.setdefault("temperature", 0)
    return Shape(f"completions-{id}", "/v1/completions", body)


def gen(id: str, token_ids: list[int] | None = None, sampling_params: dict | None = None,
        **body: Any) -> Shape:
    sp = {"temperature": 0, **(sampling_params or {})}
    payload = {"token_ids": token_ids if token_ids is not None else [1, 468, 995],
               "sampling_params": sp, **body}
    return Shape(f"generate-{id}", "/inference/v1/generate", payload)


def raw(id: str, path: str, body: Any, method: str = "POST",
        normalize: Callable[[Any], Any] | None = None) -> Shape:
    return Shape(id, path, body, method, normalize)


# vLLM's SamplingParams defaults, as its render routes leave them out (or not:
# msgspec's omit_defaults there depends on Python object identity).
_SAMPLING_DEFAULTS = {"n": 1, "repetition_penalty": 1.0, "temperature": 1.0, "top_p": 1.0,
                      "max_tokens": 16, "detokenize": True, "skip_special_tokens": True,
                      "spaces_between_special_tokens": True}


def _normalize_render(value: Any) -> Any:
    """/render: the sampling params without the fields at vLLM's default."""
    for body in value if isinstance(value, list) else [value]:
        if isinstance(body, dict) and isinstance(body.get("sampling_params"), dict):
            body.pop("request_id", None)
            body["sampling_params"] = {
                k: v for k, v in body["sampling_params"].items()
                if v not in (None, [], {}, False, 0) and _SAMPLING_DEFAULTS.get(k, ...) != v}
    return value


def render(id: str, path: str, **body: Any) -> Shape:
    body.setdefault("model", "tiny")
    return Shape(f"render-{id}", path, body, normalize=_normalize_render)


CHAT_RENDER, COMPLETIONS_RENDER = "/v1/chat/completions/render", "/v1/completions/render"
HI = [{"role": "user", "content": "Hi there"}]


def _normalize_models(value: Any) -> Any:
    """/v1/models: ``created`` is the time of the request, permission ids are
    random, ``root`` is each server's model path as given on its command line."""
    for model in value.get("data", []):
        model.pop("created", None)
        model.pop("root", None)
        for perm in model.get("permission", []):
            perm.pop("id", None)
            perm.pop("created", None)
    return value


STREAM_USAGE = {"include_usage": True}
STREAM_CONTINUOUS = {"include_usage": True, "continuous_usage_stats": True}

SHAPES: list[Shape] = [
    # ---------------------------------------------------------------- prompts
    cmpl("text", prompt=HELLO, max_tokens=16),
    cmpl("max-tokens-omitted", prompt=HELLO),
    cmpl("max-tokens-null", prompt=HELLO, max_tokens=None),
    cmpl("model-omitted", prompt=HELLO, max_tokens=4, model=None),
    cmpl("batch-text", prompt=["Hello", "World"], max_tokens=8),
    cmpl("batch-text-3-lengths", prompt=["Hi", "The quick brown fox jumps", "A"],
         max_tokens=6),
    cmpl("batch-text-1", prompt=["Hello"], max_tokens=5),
    cmpl("token-prompt", prompt=[1, 468, 995], max_tokens=6),
    cmpl("token-prompt-no-bos", prompt=[468, 995, 17], max_tokens=6),
    cmpl("token-prompt-single-token", prompt=[1], max_tokens=4),
    cmpl("token-batch", prompt=[[1, 468], [1, 995, 17, 267]], max_tokens=5),
    cmpl("long-text-prompt", prompt=LONG_TEXT, max_tokens=4),
    cmpl("max-tokens-clamped", prompt=[7] * 1020, max_tokens=16),
    cmpl("max-tokens-omitted-clamped", prompt=[9] * 1012),
    cmpl("max-tokens-equals-context", prompt=HELLO, max_tokens=1024),
    cmpl("add-special-tokens-false", prompt=HELLO, max_tokens=6, add_special_tokens=False),
    cmpl("truncate-prompt-tokens", prompt=LONG_TEXT, max_tokens=4, truncate_prompt_tokens=5),
    cmpl("truncate-prompt-tokens-longer", prompt=HELLO, max_tokens=4,
         truncate_prompt_tokens=100),
    cmpl("truncate-prompt-tokens-minus-1", prompt=LONG_TEXT, max_tokens=2,
         truncate_prompt_tokens=-1, return_token_ids=True),
    cmpl("truncate-prompt-tokens-1", prompt=LONG_TEXT, max_tokens=2, truncate_prompt_tokens=1,
         return_token_ids=True),
    cmpl("truncation-side-left", prompt=LONG_TEXT, max_tokens=2, truncate_prompt_tokens=3,
         truncation_side="left", return_token_ids=True),
    cmpl("truncation-side-right", prompt=LONG_TEXT, max_tokens=2, truncate_prompt_tokens=3,
         truncation_side="right", return_token_ids=True),
    cmpl("truncate-token-prompt-echo", prompt=[1, 468, 995, 17, 267], max_tokens=2,
         truncate_prompt_tokens=2, echo=True),
    cmpl("cache-salt", prompt=HELLO, max_tokens=4, cache_salt="salt-1"),
    cmpl("logprobs-integral-float", prompt=HELLO, max_tokens=3, logprobs=2.0),
    # ---------------------------------------------------------------- n and seeds
    cmpl("seed", prompt=HELLO, max_tokens=8, temperature=1.0, seed=1234),
    cmpl("n2-seed", prompt=HELLO, max_tokens=8, n=2, temperature=1.0, seed=42),
    cmpl("n3-seed-batch", prompt=["Hello", "World"], max_tokens=6, n=3, temperature=0.9,
         seed=7),
    cmpl("seed-top-k-top-p-min-p", prompt=HELLO, max_tokens=8, temperature=0.7, top_p=0.9,
         top_k=20, min_p=0.05, seed=3),
    cmpl("penalties", prompt=HELLO, max_tokens=12, presence_penalty=0.5,
         frequency_penalty=0.5, repetition_penalty=1.3),
    # ---------------------------------------------------------------- echo, logprobs
    cmpl("echo", prompt=HELLO, max_tokens=4, echo=True),
    cmpl("echo-max-tokens-0", prompt=HELLO, max_tokens=0, echo=True),
    cmpl("echo-token-batch", prompt=[[1, 468], [995, 17]], max_tokens=3, echo=True),
    cmpl("logprobs-0", prompt=HELLO, max_tokens=5, logprobs=0),
    cmpl("logprobs-1", prompt=HELLO, max_tokens=5, logprobs=1),
    cmpl("logprobs-5", prompt=HELLO, max_tokens=5, logprobs=5),
    cmpl("echo-logprobs-2", prompt="Hello world", max_tokens=4, echo=True, logprobs=2),
    cmpl("echo-logprobs-max-tokens-0", prompt="Hello world", max_tokens=0, echo=True,
         logprobs=1),
    cmpl("echo-logprobs-single-token-prompts", prompt=[[1], [468]], max_tokens=3, echo=True,
         logprobs=1),
    cmpl("prompt-logprobs-0", prompt="Hello world", max_tokens=3, prompt_logprobs=0),
    cmpl("prompt-logprobs-3", prompt="Hello world", max_tokens=3, prompt_logprobs=3),
    cmpl("prompt-logprobs-and-logprobs", prompt="Hello world", max_tokens=3,
         prompt_logprobs=2, logprobs=3),
    cmpl("return-tokens-as-token-ids", prompt=HELLO, max_tokens=4, logprobs=2,
         return_tokens_as_token_ids=True),
    cmpl("return-tokens-as-token-ids-echo", prompt=HELLO, max_tokens=3, logprobs=1,
         echo=True, return_tokens_as_token_ids=True),
    # ---------------------------------------------------------------- token ids
    cmpl("return-token-ids", prompt=[1, 468, 995], max_tokens=4, return_token_ids=True),
    cmpl("return-token-ids-echo", prompt=HELLO, max_tokens=4, return_token_ids=True,
         echo=True),
    cmpl("return-token-ids-batch-n", prompt=["Hello", "World"], max_tokens=3, n=2,
         temperature=1.0, seed=5, return_token_ids=True),
    # ---------------------------------------------------------------- stops
    cmpl("stop-string", prompt=HELLO, max_tokens=32, stop="watches"),
    cmpl("stop-list", prompt=HELLO, max_tokens=32, stop=["clever", "jalapeño", "zzz"]),
    cmpl("stop-spanning-tokens", prompt=HELLO, max_tokens=32, stop=["ches jal"]),
    cmpl("stop-include-in-output", prompt=HELLO, max_tokens=32, stop=["watches"],
         include_stop_str_in_output=True),
    cmpl("stop-no-match", prompt=HELLO, max_tokens=12, stop=["zzzz", "qqq"]),
    cmpl("stop-with-min-tokens", prompt=HELLO, max_tokens=32, stop=["watches"],
         min_tokens=6),
    cmpl("stop-token-ids", prompt=HELLO, max_tokens=32, stop_token_ids=[1194]),
    cmpl("stop-token-ids-include", prompt=HELLO, max_tokens=32, stop_token_ids=[1194],
         include_stop_str_in_output=True),
    cmpl("eos", prompt=EOS_PROMPT, max_tokens=64),
    cmpl("eos-include-stop-str", prompt=EOS_PROMPT, max_tokens=64,
         include_stop_str_in_output=True),
    cmpl("ignore-eos", prompt=EOS_PROMPT, max_tokens=12, ignore_eos=True),
    cmpl("min-tokens", prompt=EOS_PROMPT, max_tokens=16, min_tokens=10),
    cmpl("skip-special-tokens-false-eos", prompt=EOS_PROMPT, max_tokens=64,
         skip_special_tokens=False, include_stop_str_in_output=True),
    # ---------------------------------------------------------------- logits processing
    cmpl("skip-special-tokens-false", prompt=HELLO, max_tokens=6, skip_special_tokens=False,
         logit_bias={"4": 9}),
    cmpl("spaces-between-special-tokens-false", prompt=HELLO, max_tokens=6,
         skip_special_tokens=False, spaces_between_special_tokens=False,
         logit_bias={"4": 9}),
    cmpl("special-tokens-mixed", prompt=HELLO, max_tokens=16, skip_special_tokens=False,
         logit_bias={"4": 2.5, "1": 2.5}, return_token_ids=True),
    cmpl("special-tokens-mixed-no-spaces", prompt=HELLO, max_tokens=16,
         skip_special_tokens=False, spaces_between_special_tokens=False,
         logit_bias={"4": 2.5, "1": 2.5}, return_token_ids=True),
    cmpl("special-tokens-mixed-stream", prompt=HELLO, max_tokens=16,
         skip_special_tokens=False, spaces_between_special_tokens=False,
         logit_bias={"4": 2.5, "1": 2.5}, stream=True),
    cmpl("special-tokens-skipped", prompt=HELLO, max_tokens=16,
         logit_bias={"4": 2.5, "1": 2.5}, return_token_ids=True),
    cmpl("logit-bias", prompt=HELLO, max_tokens=8, logit_bias={"995": 5, "488": -100}),
    cmpl("allowed-token-ids", prompt=HELLO, max_tokens=8, allowed_token_ids=[468, 995, 17, 267]),
    cmpl("bad-words", prompt=HELLO, max_tokens=12, bad_words=["watches", "clever"]),
    cmpl("logprob-token-ids", prompt=HELLO, max_tokens=4, logprobs=2, logprob_token_ids=[5, 6]),
    # ---------------------------------------------------------------- streaming
    cmpl("stream", prompt=HELLO, max_tokens=8, stream=True),
    cmpl("stream-include-usage", prompt=HELLO, max_tokens=8, stream=True,
         stream_options=STREAM_USAGE),
    cmpl("stream-continuous-usage", prompt=HELLO, max_tokens=8, stream=True,
         stream_options=STREAM_CONTINUOUS),
    cmpl("stream-continuous-without-include", prompt=HELLO, max_tokens=4, stream=True,
         stream_options={"continuous_usage_stats": True}),
    cmpl("stream-empty-options", prompt=HELLO, max_tokens=4, stream=True, stream_options={}),
    cmpl("stream-usage-false", prompt=HELLO, max_tokens=4, stream=True,
         stream_options={"include_usage": False}),
    cmpl("stream-batch", prompt=["Hello", "World"], max_tokens=6, stream=True,
         stream_options=STREAM_USAGE),
    cmpl("stream-batch-n-continuous", prompt=["Hello", "World"], max_tokens=5, n=2,
         temperature=1.0, seed=11, stream=True, stream_options=STREAM_CONTINUOUS),
    cmpl("stream-token-batch", prompt=[[1, 468], [1, 995, 17]], max_tokens=4, stream=True,
         stream_options=STREAM_USAGE),
    cmpl("stream-echo", prompt=HELLO, max_tokens=4, echo=True, stream=True),
    cmpl("stream-echo-max-tokens-0", prompt=HELLO, max_tokens=0, echo=True, stream=True,
         stream_options=STREAM_USAGE),
    cmpl("stream-logprobs", prompt=HELLO, max_tokens=5, logprobs=2, stream=True),
    cmpl("stream-echo-logprobs", prompt="Hello world", max_tokens=3, echo=True, logprobs=1,
         stream=True),
    cmpl("stream-stop-hold-back", prompt=HELLO, max_tokens=32, stop=["jalapeño", "clever"],
         stream=True, stream_options=STREAM_USAGE),
    cmpl("stream-stop-include", prompt=HELLO, max_tokens=32, stop=["watches"],
         include_stop_str_in_output=True, stream=True),
    cmpl("stream-stop-logprobs", prompt=HELLO, max_tokens=32, stop=["ches jal"], logprobs=1,
         stream=True),
    cmpl("stream-eos", prompt=EOS_PROMPT, max_tokens=64, stream=True,
         stream_options=STREAM_CONTINUOUS),
    cmpl("stream-return-token-ids", prompt=HELLO, max_tokens=4, return_token_ids=True,
         stream=True),
    cmpl("stream-return-token-ids-echo", prompt=HELLO, max_tokens=3, return_token_ids=True,
         echo=True, stream=True),
    cmpl("stream-interval", prompt=HELLO, max_tokens=9, stream_interval=3, stream=True,
         stream_options=STREAM_CONTINUOUS),
    cmpl("stream-interval-logprobs-stop", prompt=HELLO, max_tokens=32, stream_interval=2,
         logprobs=1, stop=["clever"], stream=True),
    cmpl("stream-logprob-token-ids", prompt=HELLO, max_tokens=3, logprobs=2,
         logprob_token_ids=[5, 6], stream=True),
    cmpl("stream-return-tokens-as-token-ids", prompt=HELLO, max_tokens=3, logprobs=1,
         return_tokens_as_token_ids=True, stream=True),
    # ---------------------------------------------------------------- errors
    cmpl("error-unknown-model", prompt=HELLO, max_tokens=4, model="nope"),
    cmpl("error-max-tokens-too-large", prompt=HELLO, max_tokens=5000),
    cmpl("error-max-tokens-0-without-echo", prompt=HELLO, max_tokens=0),
    cmpl("error-max-tokens-negative", prompt=HELLO, max_tokens=-1),
    cmpl("error-prompt-empty-string", prompt="", max_tokens=4),
    cmpl("error-prompt-missing", max_tokens=4),
    cmpl("error-prompt-empty-list", prompt=[], max_tokens=4),
    cmpl("error-prompt-empty-token-list-in-batch", prompt=[[1, 2], []], max_tokens=4),
    cmpl("error-prompt-mixed-batch", prompt=["a", [1, 2]], max_tokens=4),
    cmpl("error-token-out-of-vocab", prompt=[1, 5000], max_tokens=4),
    cmpl("error-token-negative", prompt=[1, -1], max_tokens=4),
    cmpl("error-prompt-too-long", prompt=[7] * 1100, max_tokens=4),
    cmpl("error-prompt-exactly-context", prompt=[7] * 1024, max_tokens=4),
    cmpl("error-later-prompt-too-long", prompt=[[1, 2], [7] * 1100], max_tokens=4),
    cmpl("error-n2-greedy", prompt=HELLO, max_tokens=4, n=2),
    cmpl("error-temperature", prompt=HELLO, max_tokens=4, temperature=3),
    cmpl("error-top-p", prompt=HELLO, max_tokens=4, top_p=0),
    cmpl("error-presence-penalty", prompt=HELLO, max_tokens=4, presence_penalty=3),
    cmpl("error-min-tokens-over-max", prompt=HELLO, max_tokens=4, min_tokens=8),
    cmpl("error-logprobs-over-max", prompt=HELLO, max_tokens=4, logprobs=30),
    cmpl("error-logprobs-below-minus-1", prompt=HELLO, max_tokens=4, logprobs=-2),
    cmpl("error-prompt-logprobs-stream", prompt=HELLO, max_tokens=4, prompt_logprobs=1,
         stream=True),
    cmpl("error-stream-options-without-stream", prompt=HELLO, max_tokens=4,
         stream_options=STREAM_USAGE),
    cmpl("error-logit-bias-key", prompt=HELLO, max_tokens=4, logit_bias={"abc": 1}),
    cmpl("error-logit-bias-out-of-vocab", prompt=HELLO, max_tokens=4, logit_bias={"5000": 1}),
    cmpl("error-allowed-token-ids-empty", prompt=HELLO, max_tokens=4, allowed_token_ids=[]),
    cmpl("error-allowed-token-ids-out-of-vocab", prompt=HELLO, max_tokens=4,
         allowed_token_ids=[1, 5000]),
    cmpl("error-truncate-over-context", prompt=HELLO, max_tokens=4,
         truncate_prompt_tokens=2000),
    cmpl("error-max-tokens-wrong-type", prompt=HELLO, max_tokens="abc"),
    cmpl("error-stream-n2-greedy", prompt=HELLO, max_tokens=4, n=2, stream=True),
    cmpl("error-text-prompt-too-long", prompt=LONG_TEXT * 10, max_tokens=4),
    cmpl("error-token-prompt-context-plus-1", prompt=[7] * 1025, max_tokens=4),
    cmpl("error-truncate-0", prompt=HELLO, max_tokens=4, truncate_prompt_tokens=0),
    cmpl("error-truncate-below-minus-1", prompt=HELLO, max_tokens=4, truncate_prompt_tokens=-2),
    cmpl("error-logprobs-string", prompt=HELLO, max_tokens=4, logprobs="2"),
    cmpl("error-logprobs-fraction", prompt=HELLO, max_tokens=4, logprobs=1.5),
    cmpl("error-cache-salt-empty", prompt=HELLO, max_tokens=4, cache_salt=""),
    cmpl("error-cache-salt-forbidden-char", prompt=HELLO, max_tokens=4, cache_salt="a/b"),
    # The rules chat and completions share (vLLM's models have them on both).
    cmpl("error-cache-salt-not-a-string", prompt=HELLO, max_tokens=4, cache_salt=5),
    cmpl("stream-options-empty-without-stream", prompt=HELLO, max_tokens=4, stream_options={}),
    cmpl("error-truncation-side", prompt=HELLO, max_tokens=4, truncation_side="middle"),
    cmpl("error-stream-interval-0", prompt=HELLO, max_tokens=4, stream_interval=0),
    cmpl("error-logprobs-negative-fraction", prompt=HELLO, max_tokens=4, logprobs=-0.5),
    cmpl("error-prompt-logprobs-negative-fraction", prompt=HELLO, max_tokens=4,
         prompt_logprobs=-0.5),
    cmpl("error-too-many-prompts", prompt=["a"] * 1025, max_tokens=1),
    cmpl("error-suffix", prompt=HELLO, max_tokens=4, suffix="x"),
    cmpl("beam-search", prompt=HELLO, max_tokens=4, n=2, use_beam_search=True),
    cmpl("response-format", prompt=HELLO, max_tokens=4,
         response_format={"type": "json_object"}),
    cmpl("error-prompt-embeds", prompt_embeds="AAAA", max_tokens=4),
    cmpl("error-logprob-token-ids-without-logprobs", prompt=HELLO, max_tokens=4,
         logprob_token_ids=[5]),
    cmpl("error-empty-stop-string", prompt=HELLO, max_tokens=4, stop=["a", ""]),
    raw("completions-error-malformed-json", "/v1/completions", b'{"prompt": "Hello",'),
    raw("completions-error-empty-body", "/v1/completions", b""),
    raw("completions-lax-types", "/v1/completions",
        {"prompt": HELLO, "max_tokens": "3", "temperature": "0", "echo": "true"}),
    raw("completions-unknown-field-ignored", "/v1/completions",
        {"prompt": HELLO, "max_tokens": 3, "temperature": 0, "no_such_field": 1}),
    # ---------------------------------------------------------------- generate
    gen("basic", [1, 468], {"max_tokens": 8}),
    gen("max-tokens-omitted", [1] + [7] * 1015, {}),
    gen("n2-seed", [1, 468], {"max_tokens": 6, "n": 2, "temperature": 1.0, "seed": 42}),
    gen("n4-seed", [1, 468], {"max_tokens": 4, "n": 4, "temperature": 1.0, "seed": 1}),
    gen("logprobs", [1, 468, 995], {"max_tokens": 4, "logprobs": 2}),
    gen("logprobs-0", [1, 468, 995], {"max_tokens": 3, "logprobs": 0}),
    gen("prompt-logprobs", [1, 468, 995], {"max_tokens": 3, "prompt_logprobs": 2}),
    gen("output-mode-text", [1, 998], {"max_tokens": 8}, output_mode="text"),
    gen("output-mode-text-logprobs", [1, 998], {"max_tokens": 4, "logprobs": 2},
        output_mode="text"),
    gen("stop-token-ids", [1, 998], {"max_tokens": 32, "stop_token_ids": [1194]}),
    gen("eos", [1, 22, 965, 962, 951], {"max_tokens": 64}),
    gen("ignore-eos", [1, 22, 965, 962, 951], {"max_tokens": 10, "ignore_eos": True}),
    gen("stop-string-text", [1, 998], {"max_tokens": 32, "stop": ["watches"]},
        output_mode="text"),
    gen("return-token-ids", [1, 468], {"max_tokens": 3}, return_token_ids=True),
    gen("stream", [1, 468], {"max_tokens": 4}, stream=True),
    gen("stream-include-usage", [1, 468], {"max_tokens": 4}, stream=True,
        stream_options=STREAM_USAGE),
    gen("stream-continuous-usage", [1, 468], {"max_tokens": 4}, stream=True,
        stream_options=STREAM_CONTINUOUS),
    gen("stream-n2-seed", [1, 468], {"max_tokens": 4, "n": 2, "temperature": 1.0, "seed": 9},
        stream=True, stream_options=STREAM_USAGE),
    gen("stream-text-logprobs", [1, 998], {"max_tokens": 4, "logprobs": 1}, stream=True,
        output_mode="text"),
    gen("stream-interval", [1, 468], {"max_tokens": 7, "stream_interval": 3}, stream=True),
    gen("stream-return-token-ids", [1, 468], {"max_tokens": 3}, stream=True,
        return_token_ids=True),
    gen("error-empty-token-ids", [], {"max_tokens": 4}),
    raw("generate-error-malformed-json", "/inference/v1/generate", b'{"token_ids": [1,'),
    raw("generate-error-missing-sampling-params", "/inference/v1/generate",
        {"token_ids": [1, 468]}),
    gen("error-negative-token-id", [1, -3], {"max_tokens": 4}),
    gen("error-token-out-of-vocab", [1, 5000], {"max_tokens": 4}),
    gen("error-n2-greedy", [1, 468], {"max_tokens": 4, "n": 2}),
    gen("error-unknown-model", [1, 468], {"max_tokens": 4}, model="nope"),
    gen("error-prompt-too-long", [7] * 1100, {"max_tokens": 4}),
    gen("error-prompt-too-long-max-tokens-omitted", [7] * 1100, {}),
    gen("error-prompt-exactly-context", [7] * 1024, {"max_tokens": 4}),
    gen("error-prompt-exactly-context-max-tokens-omitted", [7] * 1024, {}),
    gen("prompt-plus-max-tokens-over-context", [7] * 1020, {"max_tokens": 16}),
    gen("stream-options-without-stream", [1, 468], {"max_tokens": 2},
        stream_options=STREAM_USAGE),
    gen("cache-salt", [1, 468], {"max_tokens": 2}, cache_salt="salt-2"),
    gen("unknown-fields", [1, 468], {"max_tokens": 2, "no_such_param": 1}, no_such_field=2),
    gen("error-cache-salt-forbidden-char", [1, 468], {"max_tokens": 2}, cache_salt="a@b"),
    gen("error-temperature", [1, 468], {"max_tokens": 4, "temperature": 3}),
    gen("error-max-tokens-0", [1, 468], {"max_tokens": 0}),
    gen("error-logprobs-over-max", [1, 468], {"max_tokens": 2, "logprobs": 30}),
    gen("error-stop-token-out-of-vocab", [1, 468], {"max_tokens": 2,
                                                    "allowed_token_ids": [5000]}),
    # ---------------------------------------------------------------- small routes
    raw("tokenize", "/tokenize", {"model": "tiny",
                                  "prompt": "Hello world, the quick brown fox."}),
    raw("tokenize-no-special", "/tokenize", {"prompt": "Hello world", "add_special_tokens": False}),
    raw("tokenize-token-strs", "/tokenize", {"prompt": "Hello world", "return_token_strs": True}),
    raw("detokenize", "/detokenize", {"model": "tiny",
                                      "tokens": [1, 468, 995, 17, 267, 1028, 1145, 882, 19]}),
    raw("detokenize-unknown-id", "/detokenize", {"tokens": [1, 5000]}),
    raw("detokenize-empty", "/detokenize", {"tokens": []}),
    raw("detokenize-error-negative", "/detokenize", {"tokens": [1, -1]}),
    raw("detokenize-error-over-32-bits", "/detokenize", {"tokens": [1, 2 ** 33]}),
    raw("models", "/v1/models", None, method="GET", normalize=_normalize_models),
    raw("version", "/version", None, method="GET"),
    raw("health", "/health", None, method="GET"),
    # ------------------------------------------- every request field vLLM accepts
    # (issue 24; tests/test_request_fields.py checks none is dropped)
    cmpl("vllm-xargs", prompt=HELLO, max_tokens=4, vllm_xargs={"a": 1, "b": "x", "c": [1, 2.5]}),
    cmpl("vllm-xargs-bool", prompt=HELLO, max_tokens=4, vllm_xargs={"flag": True}),
    cmpl("error-vllm-xargs-nested", prompt=HELLO, max_tokens=4, vllm_xargs={"a": {"b": 1}}),
    cmpl("error-vllm-xargs-int-range", prompt=HELLO, max_tokens=4, vllm_xargs={"a": 2 ** 64}),
    cmpl("kv-transfer-params", prompt=HELLO, max_tokens=4,
         kv_transfer_params={"do_remote_prefill": False, "remote_engine_id": None}),
    cmpl("kv-transfer-params-empty", prompt=HELLO, max_tokens=4, kv_transfer_params={}),
    cmpl("ec-transfer-params", prompt=HELLO, max_tokens=4, ec_transfer_params={"x": 1}),
    cmpl("kv-transfer-params-batch-stream", prompt=["Hi", "Yo"], max_tokens=3, stream=True,
         kv_transfer_params={"x": 1}),
    cmpl("error-kv-transfer-params-list", prompt=HELLO, max_tokens=4, kv_transfer_params=[1]),
    cmpl("session-id", prompt=HELLO, max_tokens=4, session_id="conversation-7"),
    cmpl("error-session-id-int", prompt=HELLO, max_tokens=4, session_id=5),
    cmpl("thinking-budget-unlimited", prompt=HELLO, max_tokens=4, thinking_token_budget=-1),
    cmpl("error-thinking-budget-without-reasoning", prompt=HELLO, max_tokens=4,
         thinking_token_budget=8),
    cmpl("error-thinking-budget-negative", prompt=HELLO, max_tokens=4, thinking_token_budget=-5),
    cmpl("error-thinking-budget-fraction", prompt=HELLO, max_tokens=4, thinking_token_budget=1.5),
    cmpl("error-thinking-budget-bool", prompt=HELLO, max_tokens=4, thinking_token_budget=True),
    cmpl("routed-experts-start", prompt=HELLO, max_tokens=4, routed_experts_prompt_start=1),
    cmpl("error-routed-experts-start-past-prompt", prompt=HELLO, max_tokens=4,
         routed_experts_prompt_start=999),
    cmpl("error-routed-experts-start-negative", prompt=HELLO, max_tokens=4,
         routed_experts_prompt_start=-1),
    cmpl("watermarking", prompt=HELLO, max_tokens=4, watermarking=True),
    cmpl("watermarking-lax", prompt=HELLO, max_tokens=4, watermarking="no"),
    cmpl("return-token-offsets", prompt=HELLO, max_tokens=4, return_token_offsets=True),
    cmpl("mm-payload-none", prompt=HELLO, max_tokens=4, mm_payload="none",
         return_mm_kwargs=False),
    cmpl("error-mm-payload", prompt=HELLO, max_tokens=4, mm_payload="everything"),
    cmpl("media-io-kwargs-empty", prompt=HELLO, max_tokens=4, media_io_kwargs={}),
    gen("logprob-token-ids", sampling_params={"max_tokens": 4, "logprob_token_ids": [5, 9],
                                              "logprobs": 2}),
    gen("extra-args", sampling_params={"max_tokens": 4, "extra_args": {"k": [1, "v"]}}),
    gen("structured-outputs-regex", sampling_params={
        "max_tokens": 8, "structured_outputs": {"regex": "[ab]{3,5}"}}),
    gen("structured-outputs-choice", sampling_params={
        "max_tokens": 8, "structured_outputs": {"choice": ["yes", "no"]}}),
    gen("thinking-budget-unlimited", sampling_params={"max_tokens": 4,
                                                      "thinking_token_budget": -1}),
    gen("error-thinking-budget", sampling_params={"max_tokens": 4, "thinking_token_budget": 3}),
    gen("routed-experts-start", sampling_params={"max_tokens": 4,
                                                 "routed_experts_prompt_start": 3}),
    gen("error-routed-experts-start", sampling_params={"max_tokens": 4,
                                                       "routed_experts_prompt_start": 4}),
    gen("watermarking-skip-prefix-flat", sampling_params={
        "max_tokens": 4, "watermarking": False, "skip_reading_prefix_cache": True,
        "flat_logprobs": True, "skip_clone": True, "output_kind": 1}),
    gen("error-prompt-logprob-token-ids", sampling_params={
        "max_tokens": 4, "prompt_logprob_token_ids": [[1], [2]]}),
    gen("error-prompt-logprob-start", sampling_params={"max_tokens": 4,
                                                       "prompt_logprob_start": 1}),
    gen("error-trace-decode-token-ids", sampling_params={"max_tokens": 4, "temperature": 1.0,
                                                         "top_k": 5,
                                                         "trace_decode_token_ids": [1, 2]}),
    gen("reasoning-ended", sampling_params={"max_tokens": 4}, reasoning_ended=True,
        reasoning_parser_kwargs={"chat_template_kwargs": {"enable_thinking": False}}),
    gen("error-reasoning-parser-kwargs-extra", sampling_params={"max_tokens": 4},
        reasoning_parser_kwargs={"foo": 1}),
    gen("kv-transfer-params", sampling_params={"max_tokens": 4}, kv_transfer_params={},
        ec_transfer_params={"e": 1}),
    gen("kv-transfer-params-stream", sampling_params={"max_tokens": 4}, stream=True,
        kv_transfer_params={"a": 1}),
    gen("token-offsets", sampling_params={"max_tokens": 4}, token_offsets=[[0, 1], [1, 2]]),
    # ------------------------------------------- the render routes (prompt -> ids, no engine)
    render("chat", CHAT_RENDER, messages=HI, max_tokens=8, temperature=0),
    render("chat-offsets", CHAT_RENDER, messages=HI, return_token_offsets=True),
    render("chat-sampling", CHAT_RENDER, messages=HI, temperature=0.5, top_p=0.9, seed=3,
           stream=True, stream_options={"include_usage": True}, stop=["x"], n=2,
           logprobs=True, top_logprobs=2, vllm_xargs={"a": 1}, kv_transfer_params={"b": 2},
           priority=0, cache_salt="salt-1234567890"),
    render("chat-structured", CHAT_RENDER, messages=HI,
           response_format={"type": "json_object"}),
    render("chat-watermarking", CHAT_RENDER, messages=HI, watermarking=True),
    render("chat-error-beam-search", CHAT_RENDER, messages=HI, use_beam_search=True),
    render("chat-error-model", CHAT_RENDER, messages=HI, model="nope"),
    render("chat-error-no-messages", CHAT_RENDER, messages="x"),
    render("completions", COMPLETIONS_RENDER, prompt="Hello there", max_tokens=8),
    render("completions-batch", COMPLETIONS_RENDER, prompt=["Hi there", "yo"], max_tokens=8),
    render("completions-offsets", COMPLETIONS_RENDER, prompt="Hello there you",
           return_token_offsets=True),
    render("completions-tokens-offsets", COMPLETIONS_RENDER, prompt=[1, 45, 78],
           return_token_offsets=True),
    render("completions-truncated", COMPLETIONS_RENDER, prompt=LONG_TEXT,
           truncate_prompt_tokens=5, return_token_offsets=True),
    render("completions-error-beam-search", COMPLETIONS_RENDER, prompt="a",
           use_beam_search=True),
    render("completions-error-empty-list", COMPLETIONS_RENDER, prompt=[]),
    raw("abort-requests-unknown-ids", "/inference/v1/abort_requests",
        {"request_ids": ["cmpl-nobody-0", "chatcmpl-nobody"]}),
    raw("abort-requests-error-missing-ids", "/inference/v1/abort_requests", {"ids": []}),
    raw("abort-requests-error-json", "/inference/v1/abort_requests", b"{not json"),
]

# Shapes whose error *message* differs from vLLM's on purpose (status, type,
# param and code must still match). In each, vLLM's message is pydantic's
# rendering of its own validation errors: the repr of pydantic's error dicts
# ({'type', 'loc', 'msg', 'input', 'ctx'}) for *every* branch of a union, with
# pydantic's error type names and input summaries. We validate with msgspec
# and answer "1 validation error:\n  <what is wrong>" with the same ``param``.
# (Malformed JSON and a missing body are not here: FastAPI's messages for
# those are reproduced exactly.)
_PYDANTIC = "vLLM's message is pydantic's error-dict dump"
MESSAGE_DIFFERS: dict[str, str] = {
    "completions-error-prompt-mixed-batch":
        _PYDANTIC + " (5 errors, one per branch of the prompt union)",
    "completions-error-token-negative":
        _PYDANTIC + " (6 errors, one per branch of the prompt union)",
    "completions-error-max-tokens-wrong-type": _PYDANTIC + " (int_parsing)",
    "completions-error-logprobs-fraction": _PYDANTIC + " (int_from_float)",
    "generate-error-empty-token-ids": _PYDANTIC + " (too_short)",
    "generate-error-negative-token-id": _PYDANTIC + " (value_error)",
    "generate-error-missing-sampling-params": _PYDANTIC + " (missing)",
    "detokenize-error-negative": _PYDANTIC + " (greater_than_equal)",
}

# Where we differ from vLLM on purpose: shape id -> (reason, our status, our
# error type). The test checks that we answer so, and that vLLM still does not
# (so that a stale entry shows up).
KNOWN_DIFFERENCES: dict[str, tuple[str, int, str]] = {
}

# ------------------------------------------------------------------ HTTP

@dataclass
class Reply:
    status: int
    content_type: str
    body: bytes
    events: list[Any] | None = field(default=None)  # parsed SSE events, "[DONE]" kept

    def json(self) -> Any:
        return json.loads(self.body)


def send(base_url: str, shape: Shape) -> Reply:
    url = urlsplit(base_url)
    conn = http.client.HTTPConnection(url.hostname, url.port, timeout=TIMEOUT_S)
    try:
        headers = {}
        payload = None
        if shape.method == "POST":
            payload = (shape.body if isinstance(shape.body, bytes)
                       else json.dumps(_drop_none_model(shape.body)).encode())
            headers["Content-Type"] = "application/json"
        conn.request(shape.method, shape.path, body=payload, headers=headers)
        resp = conn.getresponse()
        body = resp.read()
        reply = Reply(resp.status, resp.getheader("Content-Type", ""), body)
    finally:
        conn.close()
    if reply.content_type.startswith("text/event-stream"):
        reply.events = parse_sse(body)
    return reply


def _drop_none_model(body: Any) -> Any:
    """``model=None`` in a shape means: leave ``model`` out of the body."""
    if isinstance(body, dict) and "model" in body and body["model"] is None:
        body = {k: v for k, v in body.items() if k != "model"}
    return body


def parse_sse(body: bytes) -> list[Any]:
    events = []
    text = body.decode("utf-8")
    assert text.endswith("\n\n"), f"stream does not end with a blank line: {text[-200:]!r}"
    for block in text.split("\n\n")[:-1]:
        assert block.startswith("data: ") and "\n" not in block, f"bad SSE event {block!r}"
        data = block[len("data: "):]
        events.append(data if data == "[DONE]" else json.loads(data))
    return events


# ------------------------------------------------------------------ comparison

def normalize(value: Any, shape: Shape) -> Any:
    if isinstance(value, dict):
        value = {k: v for k, v in value.items() if k not in IGNORED_FIELDS}
    if shape.normalize is not None:
        value = shape.normalize(value)
    return value


def split_stream(events: list[Any], shape: Shape) -> tuple[dict[int, list], list]:
    """Chunks per choice index (in order), and every other event in order."""
    per_choice: dict[int, list] = {}
    others: list = []
    for event in events:
        if isinstance(event, dict) and len(event.get("choices") or []) == 1:
            per_choice.setdefault(event["choices"][0]["index"], []).append(
                normalize(event, shape))
        else:
            others.append(normalize(event, shape))
    return per_choice, others


def assert_same(shape: Shape, ours: Reply, theirs: Reply) -> None:
    assert ours.status == theirs.status, (
        f"status {ours.status} != vLLM's {theirs.status}\nours: {ours.body[:2000]!r}\n"
        f"vLLM: {theirs.body[:2000]!r}")
    assert _media_type(ours) == _media_type(theirs)
    if theirs.events is not None:
        assert ours.events is not None
        assert theirs.events.count("[DONE]") == 1 and theirs.events[-1] == "[DONE]"
        assert ours.events.count("[DONE]") == 1 and ours.events[-1] == "[DONE]"
        our_choices, our_others = split_stream(ours.events, shape)
        their_choices, their_others = split_stream(theirs.events, shape)
        assert sorted(our_choices) == sorted(their_choices)
        for index, their_chunks in their_choices.items():
            assert match_coarsening(our_choices[index], their_chunks), (
                f"choice {index}: the chunks differ (even where merged steps are "
                f"joined)\nours:\n{_lines(our_choices[index])}\nvLLM:\n{_lines(their_chunks)}")
        assert our_others == their_others
        return
    if not theirs.body:
        assert ours.body == theirs.body
        return
    our_json, their_json = ours.json(), theirs.json()
    if theirs.status >= 400:
        ours_err, theirs_err = our_json["error"], their_json["error"]
        for key in ("type", "param", "code"):
            assert ours_err[key] == theirs_err[key], (
                f"error.{key}: {ours_err!r} != vLLM's {theirs_err!r}")
        if shape.id in MESSAGE_DIFFERS:  # both schema errors, worded differently
            assert ours_err["message"].startswith("1 validation error:\n  ")
            assert theirs_err["message"].split(" ", 1)[1].startswith("validation error")
        else:
            assert ours_err["message"] == theirs_err["message"], (
                f"error.message: {ours_err!r} != vLLM's {theirs_err!r}")
        assert set(our_json) == set(their_json)
        return
    assert normalize(our_json, shape) == normalize(their_json, shape)


def _lines(chunks: list) -> str:
    return "\n".join(json.dumps(c, ensure_ascii=False) for c in chunks)


def _media_type(reply: Reply) -> str:
    return reply.content_type.split(";")[0].strip()


def test_enough_shapes() -> None:
    assert len(SHAPES) >= 60
    ids = [s.id for s in SHAPES]
    assert len(ids) == len(set(ids))
    assert set(MESSAGE_DIFFERS) <= set(ids) and set(KNOWN_DIFFERENCES) <= set(ids)


# The first test also waits for both servers to start (minutes on a cold 2-core box).
@pytest.mark.timeout(900)
@pytest.mark.parametrize("shape", SHAPES, ids=[s.id for s in SHAPES])
def test_parity(shape: Shape, vllm_frontend, frontend) -> None:
    theirs = send(vllm_frontend.url, shape)
    ours = send(frontend.url, shape)
    if shape.id in KNOWN_DIFFERENCES:
        reason, status, err_type = KNOWN_DIFFERENCES[shape.id]
        assert (ours.status, ours.json()["error"]["type"]) == (status, err_type), reason
        assert theirs.status == 200, f"vLLM no longer differs here: {theirs.body[:500]!r}"
        return
    assert_same(shape, ours, theirs)


def test_stream_interval_rule(frontend) -> None:
    """vLLM's stream_interval (RequestState.make_request_output): the first delta at
    once, then one every ``interval`` tokens, and the rest at the finish. vLLM's
    own chunks can be coarser still (see ``merge_chunks``), so our chunking is
    checked against the rule itself."""
    shape = cmpl("interval-rule", prompt=HELLO, max_tokens=9, stream_interval=3,
                 return_token_ids=True, stream=True)
    reply = send(frontend.url, shape)
    sizes = [len(e["choices"][0]["token_ids"]) for e in reply.events[:-1]]
    # Where chunks may end: the rule's boundaries. Steps that come before the
    # client takes the previous chunk merge into it (as in vLLM), so a loaded
    # host may see fewer, larger chunks; tests/test_fanout_merge.py checks the
    # exact chunking with a client that keeps up.
    ends = list(itertools.accumulate(sizes))
    assert ends[-1] == 9 and set(ends) <= {1, 4, 7, 9}, sizes
