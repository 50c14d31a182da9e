"""/v1/messages under the chat flags of issue 24, against vLLM's server.

vLLM's Messages handler is its chat handler, so chat's flags reach it:
``--enable-prompt-tokens-details`` gives the cache fields of Anthropic's
usage (``cache_read_input_tokens``, input tokens without them), the
``--default-chat-template-kwargs`` and ``--chat-template-content-format``
change the prompt, ``--exclude-tools-when-tool-choice-none`` hides the tools
of ``tool_choice: none``; ``--response-role`` does not apply (the role is
always "assistant"). Both servers run ``FRONTEND_FLAGS``
(tests/support/vllm_frontend.py) on real engines, greedy, one request at a
time in the same order (so both prefix caches hold the same prompts).
"""

from __future__ import annotations

import pytest

from tests.support.anthropic_wire import COUNT, Shape, assert_same, send
from tests.support.vllm_frontend import FRONTEND_FLAGS

pytestmark = [pytest.mark.real_engine, pytest.mark.vllm_frontend, pytest.mark.timeout(900)]

# Longer than two of the CPU engine's KV blocks, so that a repeat hits the prefix cache;
# a text no other module sends (both engines are shared), so "first" is a miss on both.
LONG = [{"role": "user", "content": "write to me about the hills and the sky " * 36}]
TOOLS = [{"name": "get_weather", "input_schema": {"properties": {"city": {"type": "string"}}}}]


def msg(id: str, messages: list | None = None, **body) -> Shape:
    return Shape(id, {"model": "tiny", "max_tokens": 6, "temperature": 0,
                      "messages": messages or [{"role": "user", "content": "Hi there"}],
                      **body})


SHAPES = [
    msg("plain"),
    msg("stream-plain", stream=True),
    msg("cached-first", LONG, max_tokens=3),
    msg("cached-again", LONG, max_tokens=3),
    msg("stream-cached-again", LONG, max_tokens=3, stream=True),
    msg("text-blocks-openai-format", [{"role": "user", "content": [
        {"type": "text", "text": "Hello"}, {"type": "text", "text": "there"}]}]),
    msg("tools-choice-none-excluded", tools=TOOLS, tool_choice={"type": "none"}),
    msg("kwargs-over-defaults", chat_template_kwargs={"enable_thinking": True}),
    Shape("count-tools-choice-none-excluded", {
        "model": "tiny", "messages": [{"role": "user", "content": "Hi"}], "tools": TOOLS,
        "tool_choice": {"type": "none"}}, COUNT),
    Shape("error-tools-auto-without-parser", msg("x", tools=TOOLS).body),
]


@pytest.fixture(scope="module")
def servers(vllm_flagged, real_stack):
    theirs = vllm_flagged.url("frontend-flags")
    with real_stack.restarted(*FRONTEND_FLAGS) as fe:
        yield fe, theirs


@pytest.mark.parametrize("s", SHAPES, ids=[s.id for s in SHAPES])
def test_parity_with_the_flags(s: Shape, servers) -> None:
    ours, theirs = servers
    reply = send(theirs, s)
    assert (reply.status >= 400) == ("error" in s.id), reply.body
    assert_same(s, send(ours.url, s), reply)
    ours.wait_idle()


def test_the_cache_fields_show(servers) -> None:
    """A repeated long prompt reports its cached share (so the parity above
    is not two servers agreeing on nothing)."""
    ours, _ = servers
    body = send(ours.url, msg("again", LONG, max_tokens=2)).json()
    usage = body["usage"]
    assert usage["cache_read_input_tokens"] > 0
    total = send(ours.url, Shape("n", {"model": "tiny", "messages": LONG}, COUNT)).json()
    assert usage["input_tokens"] + usage["cache_read_input_tokens"] \
        + usage.get("cache_creation_input_tokens", 0) == total["input_tokens"]
