"""Parity with vLLM's own server: POST /v1/messages and /v1/messages/count_tokens.

vLLM 0.32's server runs with the agent flags (``AGENT_FLAGS``: hermes tool
calls, qwen3 reasoning) on a real engine of its own (``vllm_flagged``); ours
with the same flags on the session's real engine. Both engines run the tiny
model greedily; the requests go one at a time in the same order to both. The
answers are compared by ``tests/support/anthropic_wire.py`` (ids and thinking
signatures masked, streams folded per content block).

The tiny model's text is gibberish, and with the qwen3 parser all of it is
thinking unless the prompt closes the reasoning (``thinking: disabled``, or
``enable_thinking: false``), so these shapes mostly exercise the request's
translation (the rendered prompt shows in ``input_tokens``, the sampling in
the text) and the text and thinking blocks; forced tool calls ("any", a named
tool) come from the engine's grammar. tests/test_anthropic_tools.py plays
scripted tool calls.
"""

from __future__ import annotations

import pytest

from tests.support.anthropic_wire import COUNT, Shape, assert_same, send
from tests.support.vllm_frontend import AGENT_FLAGS

pytestmark = [pytest.mark.real_engine, pytest.mark.vllm_frontend, pytest.mark.timeout(900)]

HI = [{"role": "user", "content": "Hi there"}]
NO = [{"role": "user", "content": "no"}]  # thinking off: " he\ufffd\ufffd screen stops ..."
OK = [{"role": "user", "content": "ok"}]  # thinking off: EOS after 12 tokens
NO_THINKING = {"type": "disabled"}
WEATHER = {"name": "get_weather", "description": "Weather in a city",
           "input_schema": {"type": "object", "properties": {"city": {"type": "string"}},
                            "required": ["city"]}}
SEARCH = {"name": "search", "input_schema": {"properties": {"q": {"type": "string"}}}}
HISTORY = [
    {"role": "user", "content": "Weather in Paris?"},
    {"role": "assistant", "content": [
        {"type": "thinking", "thinking": "The user wants weather.", "signature": "abc"},
        {"type": "text", "text": "Let me check."},
        {"type": "tool_use", "id": "toolu_01", "name": "get_weather",
         "input": {"city": "Paris", "note": "é"}}]},
    {"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": "toolu_01", "content": "Sunny, 21C"},
        {"type": "text", "text": "Thanks, and tomorrow?"}]},
]
LONG = [{"role": "user", "content": "word " * 1100}]
IMAGE = {"type": "image", "source": {"type": "base64", "media_type": "image/png",
                                     "data": "iVBORw0KGgo="}}


def msg(id: str, messages: list | None = None, **body) -> Shape:
    payload = {"model": "tiny", "max_tokens": 12, "temperature": 0,
               "messages": HI if messages is None else messages, **body}
    return Shape(id, {k: v for k, v in payload.items() if v is not None})


def streamed(id: str, messages: list | None = None, **body) -> Shape:
    return msg(f"stream-{id}", messages, stream=True, **body)


def count(id: str, messages: list | None = None, **body) -> Shape:
    payload = {"model": "tiny", "messages": HI if messages is None else messages, **body}
    return Shape(f"count-{id}", payload, COUNT)


def error(id: str, messages: list | None = None, *, differs: str | None = None, **body) -> Shape:
    s = msg(f"error-{id}", messages, **body)
    s.message_differs = differs
    return s


SHAPES: list[Shape] = [
    # ---------------------------------------------------------------- requests
    msg("plain"),
    msg("system-string", system="You are a helpful assistant."),
    msg("system-blocks", system=[
        {"type": "text", "text": "x-anthropic-billing-header: cc_version=1; cch=ab12"},
        {"type": "text", "text": "You are terse. "}, {"type": "text", "text": "Be kind.",
                                                      "cache_control": {"type": "ephemeral"}}]),
    msg("multi-turn", [{"role": "user", "content": "Hi"},
                       {"role": "assistant", "content": "Hello! How can I help?"},
                       {"role": "user", "content": "Tell me a joke"}]),
    msg("text-blocks", [{"role": "user", "content": [
        {"type": "text", "text": "Hello"}, {"type": "text", "text": "world"}]}]),
    msg("inline-system", [{"role": "user", "content": "Hi"},
                          {"role": "system", "content": "Reminder: be brief."},
                          {"role": "user", "content": "ok"}]),
    msg("history-thinking-tools", HISTORY, tools=[WEATHER]),
    msg("tool-result-blocks", [
        {"role": "user", "content": "Search it"},
        {"role": "assistant", "content": [
            {"type": "tool_use", "id": "toolu_2", "name": "search", "input": {"q": "x"}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_2",
                                      "content": [{"type": "text", "text": "r1"},
                                                  {"type": "text", "text": "r2"}],
                                      "is_error": True}]}], tools=[SEARCH]),
    msg("assistant-tool-result", [
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": [{"type": "tool_result", "tool_use_id": "t",
                                           "content": "done"}]},
        {"role": "user", "content": "next"}]),
    msg("redacted-thinking", [
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": [{"type": "redacted_thinking", "data": "opaque"},
                                          {"type": "text", "text": "Hello"}]},
        {"role": "user", "content": "again"}]),
    msg("tools-auto", tools=[WEATHER, SEARCH]),
    # (the forced call's arguments are 6: vLLM's tool_use block refuses them)
    error("tool-input-not-an-object", tools=[WEATHER], tool_choice={"type": "any"},
          max_tokens=60),
    msg("tools-named", tools=[WEATHER, SEARCH], tool_choice={"type": "tool", "name": "search"},
        max_tokens=40),
    msg("tools-none", tools=[WEATHER], tool_choice={"type": "none"}),
    streamed("tools-single-call", tools=[WEATHER], max_tokens=60,
        tool_choice={"type": "any", "disable_parallel_tool_use": True}),
    msg("tool-choice-without-tools", tool_choice={"type": "auto"}),
    msg("tools-empty", tools=[]),
    msg("tool-addition", [{"role": "system", "content": [
        {"type": "tool_addition", "tool": {"type": "tool_definition", "definition": SEARCH}}]},
        {"role": "user", "content": "Hi"}], tools=[WEATHER]),
    msg("tool-removal", [{"role": "user", "content": "Hi"}, {"role": "system", "content": [
        {"type": "tool_removal", "tool": {"type": "tool_reference", "name": "search"}}]}],
        tools=[WEATHER, SEARCH]),
    msg("thinking-disabled", thinking=NO_THINKING),
    msg("thinking-adaptive", thinking={"type": "adaptive", "display": "omitted"}),
    msg("effort", output_config={"effort": "low"}),
    msg("json-format", thinking=NO_THINKING, max_tokens=30, output_config={
        "format": {"type": "json_schema", "schema": {
            "type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}}}),
    msg("stop-sequences", NO, thinking=NO_THINKING, max_tokens=40,
        stop_sequences=["stops", "zzz"]),
    msg("end-turn", OK, thinking=NO_THINKING, max_tokens=60),
    msg("max-tokens-one", max_tokens=1),
    msg("sampling-knobs", top_p=0.9, top_k=20),
    msg("template-kwargs", chat_template_kwargs={"enable_thinking": False}),
    msg("ignored-fields", metadata={"user_id": "u1"}, service_tier="auto",
        container="c", mcp_servers=[]),
    msg("vllm-extras", vllm_xargs={"a": 1}, cache_salt="salt-1", watermarking=False,
        kv_transfer_params={"do_remote_decode": False}),
    msg("unicode", [{"role": "user", "content": "héllo 你好 — \"q\" <b>"}],
        thinking=NO_THINKING),
    # ---------------------------------------------------------------- streams
    streamed("plain"),
    streamed("thinking-disabled", thinking=NO_THINKING),
    streamed("system-multi-turn", [{"role": "user", "content": "Hi"},
                                   {"role": "assistant", "content": "Hello!"},
                                   {"role": "user", "content": "more"}], system="Be brief."),
    streamed("stop-sequences", NO, thinking=NO_THINKING, max_tokens=40,
             stop_sequences=["stops"]),
    streamed("end-turn", OK, thinking=NO_THINKING, max_tokens=60),
    streamed("tools-any", tools=[WEATHER], tool_choice={"type": "any"}, max_tokens=60),
    streamed("tools-named", tools=[WEATHER], tool_choice={"type": "tool", "name": "get_weather"},
             max_tokens=40),
    streamed("max-tokens-one", max_tokens=1),
    streamed("history", HISTORY, tools=[WEATHER]),
    streamed("tools-auto", tools=[WEATHER, SEARCH]),
    streamed("tool-choice-without-tools", tool_choice={"type": "any"}),
    streamed("json-format", thinking=NO_THINKING, max_tokens=30, output_config={
        "format": {"type": "json_schema", "schema": {"type": "object"}}}),
    streamed("unicode", [{"role": "user", "content": "héllo 你好 — \"q\" <b>"}],
             thinking=NO_THINKING, max_tokens=16),
    streamed("inline-system", [{"role": "user", "content": "Hi"},
                               {"role": "system", "content": "Reminder."},
                               {"role": "user", "content": "ok"}]),
    # ---------------------------------------------------------------- count_tokens
    count("plain"),
    count("system-tools", system="Be brief.", tools=[WEATHER, SEARCH],
          tool_choice={"type": "auto"}),
    count("history", HISTORY, tools=[WEATHER]),
    count("thinking-disabled", thinking=NO_THINKING),
    count("ignored-fields", max_tokens=5, stream=True),
    Shape("count-error-unknown-model", {"model": "nope", "messages": HI}, COUNT),
    Shape("count-error-too-long", {"model": "tiny", "messages": LONG}, COUNT),
    Shape("count-error-missing-model", {"messages": HI}, COUNT),
    # ---------------------------------------------------------------- errors
    error("unknown-model", model="nope"),
    error("missing-model", model=None),
    error("empty-model", model=""),
    error("missing-max-tokens", max_tokens=None),
    Shape("error-missing-messages", {"model": "tiny", "max_tokens": 5}),
    error("max-tokens-zero", max_tokens=0),
    error("max-tokens-too-big", max_tokens=5000),
    error("prompt-too-long", LONG),
    error("bad-role", [{"role": "bot", "content": "Hi"}],
          differs="msgspec's message for a literal"),
    error("bad-block-type", [{"role": "user", "content": [{"type": "document", "text": "x"}]}],
          differs="pydantic lists the str and the list branch; ours msgspec's one error"),
    error("too-many-stop-sequences", stop_sequences=["a", "b", "c", "d", "e"]),
    error("thinking-budget-too-small", thinking={"type": "enabled", "budget_tokens": 100}),
    error("thinking-budget-over-max-tokens",
          thinking={"type": "enabled", "budget_tokens": 2000}),
    error("thinking-budget-over-context", max_tokens=3000,
          thinking={"type": "enabled", "budget_tokens": 2000}),
    error("thinking-bad-type", thinking={"type": "bogus"},
          differs="pydantic's union_tag_invalid; ours msgspec's invalid value"),
    error("tool-choice-without-name", tools=[WEATHER], tool_choice={"type": "tool"}),
    error("tool-choice-unknown-tool", tools=[WEATHER],
          tool_choice={"type": "tool", "name": "nope"}),
    error("tool-without-schema", tools=[{"name": "f"}]),
    error("tool-addition-in-user-message", [{"role": "user", "content": [
        {"type": "tool_addition", "tool": {"type": "tool_reference", "name": "search"}}]}]),
    error("tool-addition-without-tool", [{"role": "system", "content": [
        {"type": "tool_addition"}]}, {"role": "user", "content": "Hi"}]),
    error("tool-removal-undeclared", [{"role": "system", "content": [
        {"type": "tool_removal", "tool": {"type": "tool_reference", "name": "search"}}]},
        {"role": "user", "content": "Hi"}], tools=[WEATHER]),
    error("temperature", temperature=5),
    error("tool-result-text-not-a-string", [{"role": "user", "content": [  # (a TypeError)
        {"type": "tool_result", "tool_use_id": "t", "content": [{"type": "text", "text": 5}]}]}]),
    error("image", [{"role": "user", "content": [IMAGE, {"type": "text", "text": "what?"}]}],
          differs="vLLM: 'tiny is not a multimodal model'; ours says which part and why "
                  "(as on chat)"),
    error("cache-salt-empty", cache_salt=""),
    Shape("error-content-type", msg("x").body, content_type="text/plain"),
    Shape("error-invalid-json", b'{"model": "tiny", "messages": [', ),
    Shape("error-not-an-object", [1, 2], message_differs="pydantic's model_attributes_type; "
          "ours msgspec's"),
]


@pytest.fixture(scope="module")
def servers(vllm_flagged, real_stack):
    theirs = vllm_flagged.url("agents")
    with real_stack.restarted(*AGENT_FLAGS) as fe:
        yield fe, theirs


def test_enough_shapes() -> None:
    ids = [s.id for s in SHAPES]
    assert len(ids) == len(set(ids))
    assert len([i for i in ids if "error" not in i]) >= 40


@pytest.mark.parametrize("s", SHAPES, ids=[s.id for s in SHAPES])
def test_parity(s: Shape, servers) -> None:
    ours, theirs = servers
    reply = send(theirs, s)
    assert (reply.status >= 400) == ("error" in s.id), reply.body  # (the shape does its job)
    assert_same(s, send(ours.url, s), reply)
    ours.wait_idle()
