"""Parity with vLLM's own server under the frontend flags of issue 24.

vLLM's server runs with ``FRONTEND_FLAGS`` (tests/support/vllm_frontend.py:
--response-role, --return-tokens-as-token-ids, --enable-prompt-tokens-details,
--exclude-tools-when-tool-choice-none, --default-chat-template-kwargs,
--trust-request-chat-template, --trust-request-mm-kwargs,
--chat-template-content-format openai) on a real engine of its own; ours with
the same flags on the session's real engine. The same requests go to both,
one at a time in the same order (so both prefix caches hold the same prompts
when ``cached_tokens`` is reported), and the answers are compared as in the
chat and completions parity modules.
"""

from __future__ import annotations

import pytest

from tests import test_chat_parity as chat
from tests import test_parity_completions as cmpl
from tests.support.vllm_frontend import FRONTEND_FLAGS

pytestmark = [pytest.mark.real_engine, pytest.mark.vllm_frontend, pytest.mark.timeout(900)]

HI = [{"role": "user", "content": "Hi there"}]
# Longer than two of the CPU engine's KV blocks, so that a repeat hits the prefix cache;
# a text no other module sends (both engines are shared), so "first" is a miss on both.
LONG = [{"role": "user", "content": "tell me about the river and the sea " * 40}]
LONG_TEXT = "the river and the sea " * 60
TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}}}}]
# A template of the request's own: the messages, upper-cased, then the prompt.
OWN_TEMPLATE = ("{% for m in messages %}{{ m['role'] | upper }}: {{ m['content'] }}\n"
                "{% endfor %}{% if add_generation_prompt %}BOT:{% endif %}")
USAGE = {"include_usage": True}

CHAT_SHAPES = [
    chat.shape("flags-plain"),
    chat.streamed("flags-plain", stream_options=USAGE),
    chat.shape("flags-no-generation-prompt", add_generation_prompt=False),
    chat.shape("flags-logprobs", logprobs=True, top_logprobs=2),
    chat.streamed("flags-logprobs", logprobs=True, top_logprobs=1),
    chat.shape("flags-token-strings", logprobs=True, top_logprobs=1,
               return_tokens_as_token_ids=False),
    chat.shape("flags-cached-first", LONG, max_tokens=4),
    chat.shape("flags-cached-again", LONG, max_tokens=4),
    chat.streamed("flags-cached-again", LONG, max_tokens=4, stream_options=USAGE),
    chat.shape("flags-tools-choice-none", tools=TOOLS, tool_choice="none"),
    chat.error("flags-tools-auto-absent-parser", tools=TOOLS),
    chat.shape("flags-own-template", chat_template=OWN_TEMPLATE),
    chat.shape("flags-kwargs-template", chat_template_kwargs={"chat_template": OWN_TEMPLATE}),
    chat.shape("flags-kwargs-override-default",
               chat_template_kwargs={"flavour": "lemon", "enable_thinking": None}),
    chat.shape("flags-parts", [{"role": "user", "content": [
        {"type": "text", "text": "Hello"}, {"type": "text", "text": "there"}]}]),
    chat.shape("flags-mm-kwargs-trusted", mm_processor_kwargs={"size": 2},
               media_io_kwargs={"image": {"x": 1}}),
    chat.Shape("tokenize-flags-own-template",
               {"model": "tiny", "messages": HI, "chat_template": OWN_TEMPLATE}, "/tokenize"),
    chat.Shape("tokenize-flags-defaults", {"model": "tiny", "messages": HI}, "/tokenize"),
]

OTHER_SHAPES = [
    cmpl.cmpl("flags-logprobs", prompt="Hello", max_tokens=4, logprobs=2),
    cmpl.cmpl("flags-logprobs-stream", prompt="Hello", max_tokens=4, logprobs=1, stream=True,
              stream_options={"include_usage": True}),
    cmpl.cmpl("flags-cached", prompt=[LONG_TEXT, "Hi"], max_tokens=3),
    cmpl.cmpl("flags-cached-again", prompt=[LONG_TEXT, "Hi"],
              max_tokens=3),
    cmpl.cmpl("flags-cached-stream", prompt=LONG_TEXT, max_tokens=3,
              stream=True, stream_options={"include_usage": True}),
    cmpl.cmpl("flags-mm-kwargs-trusted", prompt="Hello", max_tokens=2,
              mm_processor_kwargs={"a": 1}),
    cmpl.gen("flags-usage", token_ids=[1] + [468] * 40, sampling_params={"max_tokens": 3}),
    cmpl.gen("flags-usage-stream", token_ids=[1] + [468] * 40,
             sampling_params={"max_tokens": 3}, stream=True,
             stream_options={"include_usage": True}),
    cmpl.gen("flags-text-logprobs", sampling_params={"max_tokens": 3, "logprobs": 1},
             output_mode="text"),
    # --root-path /api: every route with the prefix and without it
    cmpl.raw("root-path-models", "/api/v1/models", None, method="GET",
             normalize=cmpl._normalize_models),
    cmpl.raw("root-path-completion", "/api/v1/completions",
             {"model": "tiny", "prompt": "Hello", "max_tokens": 3, "temperature": 0}),
    cmpl.raw("root-path-health", "/api/health", None, method="GET"),
]
ROOT_ERRORS = [
    cmpl.raw("root-path-alone", "/api", None, method="GET"),
    cmpl.raw("root-path-unknown", "/api/nothing-here", None, method="GET"),
]


@pytest.fixture(scope="module")
def servers(vllm_flagged, real_stack):
    theirs = vllm_flagged.url("frontend-flags")
    with real_stack.restarted(*FRONTEND_FLAGS) as fe:
        yield fe.url, theirs


@pytest.mark.parametrize("s", CHAT_SHAPES, ids=[s.id for s in CHAT_SHAPES])
def test_chat_parity_with_the_flags(s, servers):
    ours, theirs = servers
    reply = chat.send(theirs, s)
    assert (reply.status >= 400) == ("error" in s.id), reply.body  # (the shape does its job)
    chat.assert_same(s, chat.send(ours, s), reply)


@pytest.mark.parametrize("shape", OTHER_SHAPES, ids=[s.id for s in OTHER_SHAPES])
def test_completions_and_generate_parity_with_the_flags(shape, servers):
    ours, theirs = servers
    reply = cmpl.send(theirs, shape)
    assert reply.status == 200, reply.body
    cmpl.assert_same(shape, cmpl.send(ours, shape), reply)


@pytest.mark.parametrize("shape", ROOT_ERRORS, ids=[s.id for s in ROOT_ERRORS])
def test_root_path_errors_as_vllm(shape, servers):
    ours, theirs = servers
    reply, mine = cmpl.send(theirs, shape), cmpl.send(ours, shape)
    assert reply.status == mine.status == 404, (reply.body, mine.body)
    assert mine.json() == reply.json() == {"detail": "Not Found"}  # (Starlette's, as vLLM's)


def test_the_openapi_document_names_the_root_path(servers):
    for url in servers:
        doc = cmpl.send(url, cmpl.raw("doc", "/openapi.json", None, method="GET")).json()
        assert doc["servers"] == [{"url": "/api"}]


def test_the_flags_show(servers):
    """The flags did something on our side (so the parity above is not two
    defaults agreeing): the role, the token-id strings and the cached tokens."""
    ours, _ = servers
    reply = chat.send(ours, chat.shape("check", logprobs=True, top_logprobs=1))
    assert reply.status == 200, reply.body
    body = reply.json()
    assert body["choices"][0]["message"]["role"] == "bot"
    assert body["choices"][0]["logprobs"]["content"][0]["token"].startswith("token_id:")
    assert body["usage"]["prompt_tokens_details"]["cached_tokens"] >= 0
    again = chat.send(ours, chat.shape("check", LONG, max_tokens=2))
    assert again.status == 200, again.body
    again = again.json()
    assert again["usage"]["prompt_tokens_details"]["cached_tokens"] > 0  # LONG was cached
