"""Parity with vLLM's own Python frontend: /v1/chat/completions and chat /tokenize.

Every shape is sent to vLLM 0.32's unmodified ``vllm serve`` API server
(fixture ``vllm_frontend``, on its own real engine) and to our frontend
(fixture ``frontend``, on the session's real engine); both engines run the same
tiny model with the same settings. Generations are greedy or seeded, requests
go one at a time in the same order to both servers.

* Most shapes ask for ``return_token_ids``, so the rendered prompt
  (``prompt_token_ids``) is compared along with everything else.
* Non-streaming answers must be equal as parsed JSON, apart from ``id``,
  ``created`` and ``system_fingerprint``.
* Streams: vLLM's API server sometimes merges two engine steps into one chunk
  when it falls behind the engine (DELTA output kind), so chunk boundaries are
  not part of the contract. Per choice index we compare the role chunk and the
  echo chunk exactly, the concatenated content, token ids and logprobs, the
  finish chunk's fields, and the key sets of the content chunks; then the
  usage chunk, error events and ``[DONE]`` exactly.
* Errors: status, ``type`` and ``code`` always; ``param`` and the message too,
  except for the shapes in ``MESSAGE_DIFFERS`` (with the reason).
* ``KNOWN_DIFFERENCES``: where we answer differently on purpose; those shapes
  check our answer on its own.
"""

from __future__ import annotations

import http.client
import json
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import pytest

pytestmark = [pytest.mark.real_engine, pytest.mark.vllm_frontend]

IGNORED_FIELDS = ("id", "created", "system_fingerprint")
TIMEOUT_S = 120.0
CHAT = "/v1/chat/completions"

SYSTEM = {"role": "system", "content": "You are a helpful assistant."}
HI = [{"role": "user", "content": "Hi there"}]
MULTI = [SYSTEM, {"role": "user", "content": "Hi"},
         {"role": "assistant", "content": "Hello! How can I help?"},
         {"role": "user", "content": "Tell me a joke"}]
EOS = [{"role": "user", "content": "no"}]  # greedy: 29 tokens, the last is <|im_end|> (5)
PREFILL = [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Once upon a"}]
# ~1000 prompt tokens: with max_tokens omitted, the rest of the context is a few tokens.
NEAR_CONTEXT = [{"role": "user", "content": "word " * 1000}]
USAGE = {"include_usage": True}
CONTINUOUS = {"include_usage": True, "continuous_usage_stats": True}


@dataclass
class Shape:
    id: str
    body: dict
    path: str = CHAT

    @property
    def stream(self) -> bool:
        return self.body.get("stream") is True


def shape(id: str, messages: list | None = None, **body: Any) -> Shape:
    payload = {"model": "tiny", "messages": HI if messages is None else messages,
               "temperature": 0, "max_tokens": 8, "return_token_ids": True, **body}
    return Shape(id, {k: v for k, v in payload.items() if v is not None})


def streamed(id: str, messages: list | None = None, **body: Any) -> Shape:
    return shape(f"stream-{id}", messages, stream=True, **body)


def error(id: str, messages: list | None = None, **body: Any) -> Shape:
    return shape(f"error-{id}", messages, **body)


def tok(id: str, **body: Any) -> Shape:
    return Shape(f"tokenize-{id}", {"model": "tiny", **body}, "/tokenize")


SHAPES: list[Shape] = [
    # ---------------------------------------------------------------- prompts
    shape("plain", return_token_ids=None),
    shape("plain-token-ids"),
    shape("system-user", [SYSTEM, {"role": "user", "content": "What is the capital of France?"}],
          max_tokens=16),
    shape("multi-turn", MULTI),
    shape("text-parts", [{"role": "user", "content": [
        {"type": "text", "text": "Hello"}, {"type": "text", "text": "world"}]}]),
    shape("name-field", [{"role": "user", "content": "Hi", "name": "bob"}]),
    shape("developer-role", [{"role": "developer", "content": "Be nice"},
                             {"role": "user", "content": "Hi"}]),
    shape("system-parts", [{"role": "system", "content": [{"type": "text", "text": "sys"}]},
                           {"role": "user", "content": "Hi"}]),
    shape("assistant-null-content", [{"role": "user", "content": "Hi"},
                                     {"role": "assistant", "content": None},
                                     {"role": "user", "content": "again"}]),
    shape("tool-calls-in-history", [
        {"role": "user", "content": "Weather?"},
        {"role": "assistant", "content": "Let me check.", "tool_calls": [
            {"id": "call_1", "type": "function",
             "function": {"name": "weather", "arguments": "{\"city\": \"Paris\"}"}}]},
        {"role": "user", "content": "Thanks"}]),
    shape("reasoning-effort", reasoning_effort="low"),
    shape("documents", documents=[{"title": "Doc", "text": "Some text"}]),
    shape("unicode", [{"role": "user", "content": "héllo 你好 — ünïcode \"q\" <b>"}]),
    shape("chat-template-kwargs", chat_template_kwargs={"foo": 1, "bar": None}),
    shape("no-generation-prompt", add_generation_prompt=False),
    shape("continue-final-message", PREFILL, add_generation_prompt=False,
          continue_final_message=True),
    shape("echo-continue", PREFILL, add_generation_prompt=False, continue_final_message=True,
          echo=True),
    shape("echo-with-generation-prompt", echo=True),
    shape("add-special-tokens", add_special_tokens=True),
    shape("truncate-prompt-tokens", [SYSTEM, {"role": "user", "content": "What is 2+2?"}],
          truncate_prompt_tokens=10),
    shape("truncate-with-special-tokens", [SYSTEM, {"role": "user", "content": "What?"}],
          truncate_prompt_tokens=10, add_special_tokens=True),
    shape("truncate-right", [SYSTEM, {"role": "user", "content": "What is 2+2?"}],
          truncate_prompt_tokens=10, truncation_side="right"),
    shape("truncate-minus-one", [{"role": "user", "content": "word " * 1100}], max_tokens=4,
          truncate_prompt_tokens=-1),
    shape("return-prompt-text", return_prompt_text=True),
    shape("lax-strings", max_tokens="4", temperature="0", stream="false"),
    # ---------------------------------------------------------------- max tokens
    shape("max-completion-tokens", max_completion_tokens=5, max_tokens=20),
    shape("max-tokens-omitted-near-context", NEAR_CONTEXT, max_tokens=None, ignore_eos=True),
    # ---------------------------------------------------------------- stops
    shape("stop-strings", max_tokens=16, stop=["late", "zzz"]),
    shape("stop-string-included", max_tokens=16, stop="oft", include_stop_str_in_output=True),
    shape("stop-token-ids", max_tokens=16, stop_token_ids=[739]),
    shape("min-tokens", max_tokens=16, min_tokens=6, stop_token_ids=[18]),
    shape("ignore-eos", max_tokens=24, ignore_eos=True),
    shape("generation-eos", EOS, max_tokens=40),
    shape("generation-eos-included", EOS, max_tokens=40, include_stop_str_in_output=True,
          skip_special_tokens=False),
    shape("skip-special-tokens-false", max_tokens=24, ignore_eos=True,
          skip_special_tokens=False, stop_token_ids=[5]),
    # ---------------------------------------------------------------- sampling
    shape("seeded-n3", temperature=0.8, seed=7, n=3),
    shape("seeded-knobs", temperature=0.7, top_p=0.9, top_k=20, min_p=0.05, seed=3),
    shape("penalties", presence_penalty=0.5, frequency_penalty=0.3, repetition_penalty=1.2),
    shape("logit-bias", logit_bias={"18": -100, "860": 5}),
    shape("allowed-token-ids", allowed_token_ids=[18, 860, 739, 204]),
    shape("bad-words", bad_words=["oft"]),
    # ---------------------------------------------------------------- logprobs
    shape("logprobs", logprobs=True),
    shape("top-logprobs", logprobs=True, top_logprobs=3),
    shape("top-logprobs-unicode", [{"role": "user", "content": "héllo 你好"}], logprobs=True,
          top_logprobs=2, max_tokens=16),
    shape("top-logprobs-as-token-ids", logprobs=True, top_logprobs=2,
          return_tokens_as_token_ids=True),
    shape("prompt-logprobs", prompt_logprobs=2),
    # ---------------------------------------------------------------- streaming
    streamed("plain"),
    streamed("usage", stream_options=USAGE, return_token_ids=None),
    streamed("continuous-usage", stream_options=CONTINUOUS),
    streamed("seeded-n3", temperature=0.8, seed=7, n=3, stream_options=USAGE),
    streamed("logprobs", logprobs=True, top_logprobs=2),
    streamed("stop-string", max_tokens=16, stop=["late"]),
    streamed("echo-continue", PREFILL, add_generation_prompt=False,
             continue_final_message=True, echo=True, stream_options=CONTINUOUS),
    streamed("prompt-text", return_prompt_text=True),
    streamed("generation-eos", EOS, max_tokens=40, stream_options=USAGE),
    # ---------------------------------------------------------------- chat /tokenize
    tok("messages", messages=MULTI),
    tok("no-generation-prompt", messages=MULTI, add_generation_prompt=False),
    tok("continue", messages=PREFILL, add_generation_prompt=False,
        continue_final_message=True),
    tok("special-tokens-strs", messages=HI, add_special_tokens=True, return_token_strs=True),
    tok("bad-role", messages=[{"role": "tool", "content": "x"}]),
    # ---------------------------------------------------------------- errors
    error("unsupported-role", [{"role": "tool", "content": "x"}]),
    error("empty-messages", []),
    error("prompt-too-long", [{"role": "user", "content": "word " * 1100}]),
    error("max-tokens-too-big", max_tokens=5000),
    error("max-completion-tokens-too-big", max_completion_tokens=5000),
    error("max-tokens-zero", max_tokens=0),
    error("greedy-n", n=2),
    error("top-logprobs-without-logprobs", top_logprobs=2),
    error("top-logprobs-negative", logprobs=True, top_logprobs=-2),
    error("top-logprobs-string", logprobs=True, top_logprobs="2"),
    error("top-logprobs-too-many", logprobs=True, top_logprobs=21),
    error("prompt-logprobs-stream", prompt_logprobs=1, stream=True),
    error("unknown-model", model="nope"),
    error("both-generation-flags", PREFILL, add_generation_prompt=True,
          continue_final_message=True),
    error("continue-with-default-generation-prompt", PREFILL, continue_final_message=True),
    error("temperature", temperature=3),
    error("min-tokens-over-max", min_tokens=10, max_tokens=5),
    error("stream-options-without-stream", stream_options=USAGE),
    error("tools-auto", tools=[{"type": "function", "function": {"name": "f"}}]),
    error("tool-choice-without-tools", tool_choice="auto"),
    error("request-chat-template", chat_template="{{ messages }}"),
    error("image-part", [{"role": "user", "content": [
        {"type": "image_url", "image_url": {"url": "http://example.com/a.png"}}]}]),
    Shape("error-missing-messages", {"model": "tiny", "max_tokens": 4}),
    error("messages-not-a-list", "hello"),
    error("too-many-stop-strings", stop=["a", "b", "c", "d", "e"]),
    error("cache-salt", cache_salt="a/b"),
    # ---------------------------------------------------------------- differences
    error("functions", functions=[{"name": "f"}]),
    shape("tools-with-tool-choice-none",
          tools=[{"type": "function", "function": {"name": "f"}}], tool_choice="none"),
    error("unknown-part-type", [{"role": "user", "content": [{"type": "video", "x": 1}]}]),
    error("missing-role", [{"content": "Hi"}]),
    # ------------------------------------------- every request field vLLM accepts
    # (issue 24; tests/test_request_fields.py checks none is dropped)
    shape("logprob-token-ids", logprobs=True, logprob_token_ids=[5, 17, 300]),
    shape("logprob-token-ids-top-logprobs-ignored", logprobs=True, top_logprobs=1,
          logprob_token_ids=[17, 9]),
    streamed("logprob-token-ids", logprobs=True, logprob_token_ids=[5, 9], max_tokens=4),
    error("logprob-token-ids-without-logprobs", logprob_token_ids=[5]),
    error("logprob-token-ids-out-of-vocab", logprobs=True, logprob_token_ids=[5, 10 ** 6]),
    shape("vllm-xargs", vllm_xargs={"a": 1, "b": ["x", 2]}),
    error("vllm-xargs-nested", vllm_xargs={"a": [{"b": 1}]}),
    shape("kv-transfer-params", kv_transfer_params={"do_remote_decode": False}),
    shape("ec-transfer-params", ec_transfer_params={"a": 1}),
    streamed("kv-transfer-params", kv_transfer_params={"do_remote_decode": False},
             stream_options=USAGE),
    error("kv-transfer-params-string", kv_transfer_params="x"),
    shape("session-id", session_id="chat-7"),
    shape("thinking-budget-unlimited", thinking_token_budget=-1),
    error("thinking-budget-without-reasoning", thinking_token_budget=16),
    error("thinking-budget-string", thinking_token_budget="5"),
    shape("routed-experts-start", routed_experts_prompt_start=2),
    error("routed-experts-start-past-prompt", routed_experts_prompt_start=10 ** 5),
    shape("watermarking", watermarking=True),
    shape("return-token-offsets-mm-payload", return_token_offsets=True, mm_payload="none"),
    shape("mm-kwargs-empty", mm_processor_kwargs={}, media_io_kwargs={}),
]

# Error messages that differ on purpose (status, type and code still match).
MESSAGE_DIFFERS: dict[str, str] = {
    "error-image-part": "vLLM says only 'tiny is not a multimodal model'; ours goes on to say "
                        "which part is unsupported and what content is accepted",
    "error-unknown-part-type": "vLLM's pydantic lists 7 union-member errors with pydantic "
                               "internals; ours is vLLM's own 'Unsupported chat content part "
                               "type' message",
    "error-missing-role": "vLLM's pydantic reports one error per message union member "
                          "(param body.messages.0.ChatCompletionDeveloperMessageParam.role); "
                          "ours: 'Field required', param body.messages.0.role",
    "error-missing-messages": "pydantic's error dict repr vs our plain message",
    "error-too-many-stop-strings": "pydantic reports two errors (string and list); ours one",
    "error-kv-transfer-params-string": "pydantic's error dict repr vs msgspec's message",
}

# Where we answer differently on purpose: shape id -> (reason, check of our answer).
KNOWN_DIFFERENCES: dict[str, str] = {
    "error-functions": "vLLM ignores the deprecated `functions`/`function_call` fields and "
                       "generates as if they were absent; we answer 400 so that a client "
                       "does not believe function calling is active",
}


# ------------------------------------------------------------------ HTTP

@dataclass
class Reply:
    status: int
    content_type: str
    body: bytes
    events: list[Any] | None = field(default=None)

    def json(self) -> Any:
        return json.loads(self.body)


def send(base_url: str, s: Shape) -> Reply:
    url = urlsplit(base_url)
    conn = http.client.HTTPConnection(url.hostname, url.port, timeout=TIMEOUT_S)
    try:
        conn.request("POST", s.path, body=json.dumps(s.body).encode(),
                     headers={"Content-Type": "application/json"})
        resp = conn.getresponse()
        reply = Reply(resp.status, resp.getheader("Content-Type", ""), resp.read())
    finally:
        conn.close()
    if reply.content_type.startswith("text/event-stream"):
        reply.events = parse_sse(reply.body)
    return reply


def parse_sse(body: bytes) -> list[Any]:
    text = body.decode("utf-8")
    assert text.endswith("\n\n"), f"stream does not end with a blank line: {text[-200:]!r}"
    events = []
    for block in text.split("\n\n")[:-1]:
        assert block.startswith("data: ") and "\n" not in block, f"bad SSE event {block!r}"
        data = block[len("data: "):]
        events.append(data if data == "[DONE]" else json.loads(data))
    return events


# ------------------------------------------------------------------ comparison

def strip(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: v for k, v in value.items() if k not in IGNORED_FIELDS}
    return value


def fold_stream(events: list[Any]) -> tuple[dict[int, dict], list[Any]]:
    """Per choice: role/echo chunks, merged content, finish fields; other events."""
    choices: dict[int, dict] = {}
    others: list[Any] = []
    for event in events:
        if not (isinstance(event, dict) and len(event.get("choices") or []) == 1):
            others.append(strip(event))
            continue
        event = strip(event)
        ch = event["choices"][0]
        c = choices.setdefault(ch["index"], {
            "role": None, "echo": None, "content": "", "token_ids": [], "logprobs": [],
            "final": None, "chunk_keys": set(), "usage": []})
        if "role" in ch["delta"]:
            assert c["role"] is None, "two role chunks"
            c["role"] = event
            continue
        if "token_ids" not in ch:  # the echo chunk
            assert c["echo"] is None and not c["content"], "echo chunk not first"
            c["echo"] = event
            continue
        assert c["final"] is None, "a chunk after the finish chunk"
        c["content"] += ch["delta"]["content"]
        c["token_ids"] += ch["token_ids"] or []
        if ch["logprobs"] is not None:
            c["logprobs"] += ch["logprobs"]["content"]
        c["chunk_keys"].add((tuple(event), tuple(ch), tuple(ch["delta"]),
                             ch["finish_reason"] is not None))
        if "usage" in event:
            c["usage"].append(event["usage"]["completion_tokens"])
        if ch["finish_reason"] is not None:
            c["final"] = {k: v for k, v in ch.items()
                          if k not in ("delta", "logprobs", "token_ids")}
            c["final_usage"] = event.get("usage")
    for c in choices.values():
        # Merged chunks skip some running counts; the last one is the same.
        c["usage"] = c["usage"][-1:] if c["usage"] else []
        # Which key sets exist is the contract; whether a mid-stream chunk exists
        # at all depends on merging.
        keys = c.pop("chunk_keys")
        c["final_keys"] = sorted(k for k in keys if k[3])
        c["mid_keys"] = sorted(k for k in keys if not k[3])
    return choices, others


def assert_same(s: Shape, ours: Reply, theirs: Reply) -> None:
    assert ours.status == theirs.status, (
        f"status {ours.status} != vLLM's {theirs.status}\nours: {ours.body[:2000]!r}\n"
        f"vLLM: {theirs.body[:2000]!r}")
    assert ours.content_type.split(";")[0] == theirs.content_type.split(";")[0]
    if theirs.events is not None:
        assert ours.events is not None
        for events in (ours.events, theirs.events):
            assert events.count("[DONE]") == 1 and events[-1] == "[DONE]"
        our_choices, our_others = fold_stream(ours.events)
        their_choices, their_others = fold_stream(theirs.events)
        assert sorted(our_choices) == sorted(their_choices)
        for index, theirs_c in their_choices.items():
            ours_c = our_choices[index]
            if not ours_c["mid_keys"] or not theirs_c["mid_keys"]:
                ours_c["mid_keys"] = theirs_c["mid_keys"] = None  # all merged into one
            assert ours_c == theirs_c, f"choice {index}"
        assert our_others == their_others
        return
    our_json, their_json = ours.json(), theirs.json()
    if theirs.status >= 400:
        ours_err, theirs_err = our_json["error"], their_json["error"]
        keys = ("type", "code") if s.id in MESSAGE_DIFFERS else ("type", "code", "param",
                                                                  "message")
        for key in keys:
            assert ours_err[key] == theirs_err[key], (
                f"error.{key}: {ours_err!r} != vLLM's {theirs_err!r}")
        return
    assert strip(our_json) == strip(their_json)


def test_enough_shapes() -> None:
    ids = [s.id for s in SHAPES]
    assert len(ids) == len(set(ids))
    assert set(MESSAGE_DIFFERS) <= set(ids) and set(KNOWN_DIFFERENCES) <= set(ids)
    generation = [s for s in SHAPES if s.path == CHAT and not s.id.startswith("error-")]
    assert len(generation) >= 25


@pytest.mark.parametrize("s", SHAPES, ids=[s.id for s in SHAPES])
def test_parity(s: Shape, vllm_frontend, frontend) -> None:
    ours = send(frontend.url, s)
    if s.id in KNOWN_DIFFERENCES:
        assert ours.status == 400, ours.body
        assert ours.json()["error"]["type"] == "BadRequestError"
        return
    theirs = send(vllm_frontend.url, s)
    assert_same(s, ours, theirs)
