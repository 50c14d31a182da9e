"""Parity with vLLM's own Python server: /v1/responses, GET and cancel.

Both servers run with the agent flag set (``--enable-auto-tool-choice
--tool-call-parser hermes --reasoning-parser qwen3``) and
``VLLM_ENABLE_RESPONSES_API_STORE=1``, each on a real engine with the tiny
model: vLLM's API server from the session's ``vllm_flagged`` fixture, ours
restarted with the same flags on the session's engine. Requests go one at a
time, in the same order, to both (temperature 0: the same tokens); sequences
(store, previous_response_id, background, cancel) give their own
``request_id`` so the ids agree. Answers are compared after masking random ids
and times (tests/support/responses.py); streams after folding delta runs.

The tiny model writes gibberish: these shapes exercise request translation,
the echoed fields, reasoning and text output, forced tool calls (the hermes
structural tag makes even this model call a tool), structured outputs, the
store and background mode. Scripted tool calls: test_responses_tools_parity.py.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import pytest

from tests.support.responses import Reply, assert_same, deltas, send
from tests.support.vllm_frontend import AGENT_FLAGS, FLAGGED_ENV

pytestmark = [pytest.mark.real_engine, pytest.mark.vllm_frontend, pytest.mark.timeout(1800)]

PATH = "/v1/responses"
WEATHER = {"type": "function", "name": "get_weather", "description": "Weather in a city",
           "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                          "required": ["city"]}}
SEARCH = {"type": "function", "name": "search", "strict": True,
          "parameters": {"type": "object", "properties": {"q": {"type": "string"}},
                         "required": ["q"], "additionalProperties": False}}
NAMESPACE = {"type": "namespace", "name": "maps", "description": "Map tools",
             "tools": [{"type": "function", "name": "route",
                        "parameters": {"type": "object", "properties": {}}}]}
CUSTOM = {"type": "custom", "name": "shell", "description": "Run a command"}
TEXT_PARTS = [{"type": "message", "role": "user", "content": [
    {"type": "input_text", "text": "Hello"}, {"type": "input_text", "text": "world"}]}]
HISTORY = [{"role": "user", "content": "Hi"},
           {"role": "assistant", "content": "Hello! How can I help?"},
           {"role": "user", "content": "Tell me a joke"}]
TOOL_TURN = [{"role": "user", "content": "Weather in Paris?"},
             {"type": "function_call", "call_id": "call_1", "name": "get_weather",
              "arguments": "{\"city\": \"Paris\"}"},
             {"type": "function_call_output", "call_id": "call_1", "output": "sunny, 21 C"}]
LOGPROBS = ["message.output_text.logprobs"]
# (vLLM's server, the slow one, can fall behind several times in a row on a
# busy host: a retry is one short request)
MERGED_RETRIES = 10
SCHEMA = {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}


@dataclass
class Step:
    method: str
    path: str
    body: Any = None
    content_type: str = "application/json"
    until_done: bool = False  # GET again until the response is no longer queued
    streamed: bool = False  # the answer was parsed as a stream (a stored background stream)


@dataclass
class Shape:
    id: str
    steps: list[Step]
    message_differs: str | None = None  # why the error message may differ (status/type match)


def body(**fields: Any) -> dict[str, Any]:
    out = {"model": "tiny", "input": "Hi there", "temperature": 0, "max_output_tokens": 8,
           **fields}
    return {k: v for k, v in out.items() if v is not None}


def shape(id: str, **fields: Any) -> Shape:
    return Shape(id, [Step("POST", PATH, body(**fields))])


def streamed(id: str, **fields: Any) -> Shape:
    return shape(f"stream-{id}", stream=True, **fields)


def error(id: str, why: str | None = None, **fields: Any) -> Shape:
    out = shape(f"error-{id}", **fields)
    out.message_differs = why
    return out


def get(rid: str, **kw: Any) -> Step:
    return Step("GET", f"{PATH}/{rid}", **kw)


def cancel(rid: str) -> Step:
    return Step("POST", f"{PATH}/{rid}/cancel")


def post(**fields: Any) -> Step:
    return Step("POST", PATH, body(**fields))


SHAPES: list[Shape] = [
    # ---------------------------------------------------------------- input
    shape("plain"),
    shape("longer", max_output_tokens=24),
    shape("instructions", instructions="You are terse."),
    shape("input-text-parts", input=TEXT_PARTS),
    shape("multi-turn", input=HISTORY),
    shape("developer-and-system-items", input=[
        {"role": "developer", "content": "Be nice"}, {"role": "system", "content": "sys"},
        {"role": "user", "content": "Hi"}]),
    shape("assistant-output-message-item", input=[
        {"role": "user", "content": "Hi"},
        {"type": "message", "role": "assistant",
         "content": [{"type": "output_text", "text": "Hello there"}]},
        {"role": "user", "content": "More"}]),
    shape("function-call-round-trip-input", input=TOOL_TURN, tools=[WEATHER]),
    shape("reasoning-item-input", input=[
        {"role": "user", "content": "Hi"},
        {"type": "reasoning", "summary": [], "content": [
            {"type": "reasoning_text", "text": "they greet me"}]},
        {"type": "message", "role": "assistant",
         "content": [{"type": "output_text", "text": "Hello"}]},
        {"role": "user", "content": "And?"}]),
    shape("continue-partial-assistant", input=[
        {"role": "user", "content": "Hi"},
        {"type": "message", "role": "assistant", "status": "in_progress",
         "content": [{"type": "output_text", "text": "Once upon a"}]}]),
    shape("truncation-auto", input="word " * 1100, truncation="auto", max_output_tokens=4),
    shape("unicode", input="héllo 你好 — ünïcode \"q\" <b>"),
    # ---------------------------------------------------------------- sampling, echo
    shape("reasoning-effort-low", reasoning={"effort": "low"}),
    shape("reasoning-effort-none", reasoning={"effort": "none"}),
    shape("reasoning-summary-echo", reasoning={"effort": "high", "summary": "auto"}),
    shape("enable-thinking-false", chat_template_kwargs={"enable_thinking": False}),
    shape("seeded", temperature=0.8, seed=7, top_p=0.9, top_k=20, min_p=0.05),
    shape("penalties", presence_penalty=0.5, frequency_penalty=0.3, repetition_penalty=1.2),
    shape("stop-string", max_output_tokens=16, stop=["e"]),
    shape("stop-token-ids", max_output_tokens=16, stop_token_ids=[739]),
    shape("ignore-eos", max_output_tokens=24, ignore_eos=True),
    shape("skip-special-tokens-false", skip_special_tokens=False),
    shape("logit-bias", logit_bias={"18": -100, "860": 5}),
    shape("logprobs", include=LOGPROBS),
    shape("top-logprobs", include=LOGPROBS, top_logprobs=3),
    shape("top-logprobs-without-include", top_logprobs=3),
    shape("include-reasoning-false-logprobs", include=LOGPROBS, include_reasoning=False),
    shape("echoes", metadata={"k": "v"}, user="u1", service_tier="flex", max_tool_calls=3,
          parallel_tool_calls=False, prompt_cache_key="pk", truncation="disabled"),
    shape("unknown-fields-ignored", conversation="c1", stream_options={"include_usage": True},
          safety_identifier="s"),
    shape("request-id", request_id="resp_parity_custom_id"),
    shape("store-false", store=False),
    shape("enable-response-messages", enable_response_messages=True),
    shape("kv-transfer-params", kv_transfer_params={"do_remote_decode": False}),
    shape("max-output-tokens-omitted", max_output_tokens=None, input="word " * 1000,
          ignore_eos=True),
    # ---------------------------------------------------------------- text.format
    shape("json-object", text={"format": {"type": "json_object"}}, max_output_tokens=12,
          reasoning={"effort": "none"}),
    shape("json-schema", text={"format": {"type": "json_schema", "name": "n", "schema": SCHEMA,
                                          "strict": True}}, max_output_tokens=12,
          reasoning={"effort": "none"}),
    shape("text-format-text", text={"format": {"type": "text"}, "verbosity": "low"}),
    # ---------------------------------------------------------------- tools
    shape("tools-auto", tools=[WEATHER]),
    shape("tools-none", tools=[WEATHER], tool_choice="none"),
    shape("tools-required", tools=[WEATHER], tool_choice="required", max_output_tokens=64,
          reasoning={"effort": "none"}),
    shape("tools-named", tools=[WEATHER, SEARCH],
          tool_choice={"type": "function", "name": "get_weather"}, max_output_tokens=64,
          reasoning={"effort": "none"}),
    shape("tools-required-single", tools=[WEATHER, SEARCH], tool_choice="required",
          parallel_tool_calls=False, max_output_tokens=64, reasoning={"effort": "none"}),
    shape("tools-strict-auto", tools=[SEARCH]),
    shape("tools-namespace", tools=[NAMESPACE]),
    shape("tools-namespace-named", tools=[NAMESPACE],
          tool_choice={"type": "function", "name": "route"}, max_output_tokens=48,
          reasoning={"effort": "none"}),
    shape("tools-custom", tools=[CUSTOM, WEATHER]),
    shape("tools-hosted-ignored", tools=[{"type": "web_search"}, WEATHER]),
    shape("tools-allowed-choice", tools=[WEATHER], tool_choice={
        "type": "allowed_tools", "mode": "auto", "tools": [{"type": "function",
                                                            "name": "get_weather"}]}),
    # ---------------------------------------------------------------- streaming
    streamed("plain"),
    streamed("longer", max_output_tokens=24),
    streamed("instructions", instructions="You are terse."),
    streamed("content", reasoning={"effort": "none"}, max_output_tokens=16),
    streamed("logprobs", include=LOGPROBS, top_logprobs=2, reasoning={"effort": "none"}),
    streamed("reasoning-logprobs", include=LOGPROBS),
    streamed("include-reasoning-false", include_reasoning=False),
    streamed("stop-string", max_output_tokens=16, stop=["e"], reasoning={"effort": "none"}),
    streamed("tools-required", tools=[WEATHER], tool_choice="required", max_output_tokens=64,
             reasoning={"effort": "none"}),
    streamed("tools-named", tools=[WEATHER, SEARCH],
             tool_choice={"type": "function", "name": "search"}, max_output_tokens=64,
             reasoning={"effort": "none"}),
    streamed("json-object", text={"format": {"type": "json_object"}}, max_output_tokens=12,
             reasoning={"effort": "none"}),
    streamed("one-token", max_output_tokens=1),
    streamed("store-false", store=False),
    # ---------------------------------------------------------------- store and history
    Shape("seq-previous-response", [
        post(request_id="resp_seq_prev_1", instructions="Be brief."),
        post(request_id="resp_seq_prev_2", input="And then?",
             previous_response_id="resp_seq_prev_1"),
        get("resp_seq_prev_2"),
        get("resp_seq_prev_1"),
    ]),
    Shape("seq-previous-streamed", [
        post(request_id="resp_seq_ps_1", stream=True, reasoning={"effort": "none"}),
        get("resp_seq_ps_1"),
        post(request_id="resp_seq_ps_2", input="Go on", previous_response_id="resp_seq_ps_1",
             reasoning={"effort": "none"}),
    ]),
    Shape("seq-previous-tool-output", [
        post(request_id="resp_seq_pt_1", tools=[WEATHER], tool_choice="required",
             max_output_tokens=64, reasoning={"effort": "none"}),
        post(request_id="resp_seq_pt_2", tools=[WEATHER], previous_response_id="resp_seq_pt_1",
             input=[{"type": "function_call_output", "call_id": "call_x", "output": "21 C"}]),
    ]),
    Shape("seq-store-false-not-found", [
        post(request_id="resp_seq_nostore", store=False),
        get("resp_seq_nostore"),
        post(input="x", previous_response_id="resp_seq_nostore"),
    ]),
    Shape("seq-background", [
        post(request_id="resp_seq_bg", background=True, max_output_tokens=16),
        get("resp_seq_bg", until_done=True),
        cancel("resp_seq_bg"),
    ]),
    Shape("seq-background-cancel", [
        post(request_id="resp_seq_bgc", background=True, max_output_tokens=900,
             ignore_eos=True, input="word " * 40),
        cancel("resp_seq_bgc"),
        get("resp_seq_bgc"),
        cancel("resp_seq_bgc"),
    ]),
    Shape("seq-background-stream", [
        post(request_id="resp_seq_bgs", background=True, stream=True, max_output_tokens=8),
        get("resp_seq_bgs", until_done=True, streamed=True),
        Step("GET", f"{PATH}/resp_seq_bgs?stream=true&starting_after=3"),
    ]),
    Shape("seq-not-found", [get("resp_nope"), cancel("resp_nope"),
                            Step("GET", f"{PATH}/resp_nope?stream=true")]),
    # ---------------------------------------------------------------- errors
    error("unknown-model", model="nope"),
    error("missing-input", input=None),
    error("prompt-template", prompt={"id": "p1"}),
    error("background-without-store", background=True, store=False),
    error("previous-response-unknown", previous_response_id="resp_unknown"),
    error("required-without-tools", tool_choice="required"),
    error("named-without-tools", tool_choice={"type": "function", "name": "f"}),
    error("named-not-found", tools=[WEATHER], tool_choice={"type": "function", "name": "f"}),
    error("named-ambiguous", tools=[NAMESPACE, {**NAMESPACE, "name": "geo"}],
          tool_choice={"type": "function", "name": "route"}),
    error("custom-grammar-tool", tools=[{**CUSTOM, "format": {"type": "grammar",
                                                              "syntax": "lark",
                                                              "definition": "x"}}]),
    error("include-literal", include=["bogus"]),
    error("service-tier", service_tier="turbo"),
    error("reasoning-effort", reasoning={"effort": "ultra"}),
    error("metadata-not-string", metadata={"k": 1}),
    error("json-schema-without-name",
          text={"format": {"type": "json_schema", "schema": SCHEMA}}),
    error("unsupported-item",
          input=[{"type": "item_reference", "id": "x"}]),
    error("encrypted-reasoning", input=[
        {"type": "reasoning", "summary": [], "encrypted_content": "abc"},
        {"role": "user", "content": "Hi"}]),
    error("max-output-tokens-too-big", max_output_tokens=5000),
    error("prompt-too-long", input="word " * 1100),
    error("temperature-range", temperature=3),
    error("top-logprobs-too-many", include=LOGPROBS, top_logprobs=25),
    error("cache-salt", cache_salt="a/b"),
    error("presence-penalty-range", presence_penalty=3),
    error("tools-bad-type", "pydantic lists all 24 union-member errors; ours the type's",
          tools=[{"type": "bogus"}]),
    error("too-many-stops", "pydantic reports two errors (string and list); ours one",
          stop=["a", "b", "c", "d", "e"]),
    error("both-formats", text={"format": {"type": "json_object"}},
          structured_outputs={"json": SCHEMA}),
    Shape("error-content-type", [Step("POST", PATH, body(), content_type="text/plain")]),
]


@pytest.fixture(scope="module")
def ours(real_stack):
    with real_stack.restarted(*AGENT_FLAGS, env=FLAGGED_ENV) as fe:
        yield fe


def run(url: str, step: Step) -> Reply:
    reply = send(url, step.method, step.path, step.body, step.content_type)
    deadline = time.monotonic() + 120
    while step.until_done and reply.status == 200 and reply.json()["status"] == "queued":
        assert time.monotonic() < deadline, "background response never finished"
        time.sleep(0.1)
        reply = send(url, step.method, step.path)
    return reply


def test_enough_shapes() -> None:
    ids = [s.id for s in SHAPES]
    assert len(ids) == len(set(ids))
    generation = [s for s in SHAPES if not s.id.startswith(("error-", "seq-"))]
    assert len(generation) >= 50
    assert sum(s.id.startswith("stream-") for s in SHAPES) >= 12


@pytest.mark.parametrize("s", SHAPES, ids=[s.id for s in SHAPES])
def test_parity(s: Shape, vllm_flagged, ours) -> None:
    theirs_url = vllm_flagged.url("agents")
    for n, step in enumerate(s.steps):
        mine = run(ours.url, step)
        theirs = run(theirs_url, step)
        for _ in range(MERGED_RETRIES):
            # vLLM's server merged steps it fell behind on (a loaded host): some
            # outputs depend on the steps' grouping (a forced call's partial JSON).
            if theirs.events is None or len(deltas(theirs)) >= len(deltas(mine)) or \
                    "request_id" in (step.body or {}):  # (an id is taken once)
                break
            theirs = run(theirs_url, step)
        try:
            assert_same(mine, theirs, message_differs=s.message_differs is not None,
                        streamed=step.streamed)
        except AssertionError as e:
            raise AssertionError(f"step {n} ({step.method} {step.path}): {e}") from None
    ours.wait_idle()


def test_stream_logprobs_cover_every_token(ours) -> None:
    """Every generated token's logprobs reach the stream, those of steps that
    gave no text too (a partial character: the stream-logprobs shape's prompt
    makes some): joined, the deltas' lists are the answer's list without bytes."""
    fields = {"include": LOGPROBS, "top_logprobs": 2, "reasoning": {"effort": "none"}}
    whole = run(ours.url, Step("POST", PATH, body(**fields))).json()
    streamed = run(ours.url, Step("POST", PATH, body(stream=True, **fields)))
    joined = [e for name, data in streamed.events if name == "response.output_text.delta"
              for e in data["logprobs"]]
    expected = [{"token": e["token"], "logprob": e["logprob"], "top_logprobs": [
        {"token": t["token"], "logprob": t["logprob"]} for t in e["top_logprobs"]]}
        for e in whole["output"][0]["content"][0]["logprobs"]]
    assert len(expected) == whole["usage"]["output_tokens"] == 8
    assert any(not e["token"] for e in expected)  # (a textless step is there)
    assert joined == expected
    ours.wait_idle()

