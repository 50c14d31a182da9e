"""--chat-template-content-format openai, against vLLM's server with the same
flag: message content reaches the template as OpenAI's list of parts even when
the client sent a string. The tiny model's template concatenates strings, so
both servers fail the render the same way (vLLM's 400)."""

from __future__ import annotations

import pytest

from tests import test_chat_parity as chat
from tests.support.vllm_frontend import OPENAI_CONTENT_FLAGS

pytestmark = [pytest.mark.real_engine, pytest.mark.vllm_frontend, pytest.mark.timeout(900)]

SHAPES = [
    chat.error("openai-content-parts", [{"role": "user", "content": [
        {"type": "text", "text": "Hello"}]}]),
    chat.error("openai-content-string"),
]


@pytest.fixture(scope="module")
def servers(vllm_flagged, real_stack):
    theirs = vllm_flagged.url("openai-content")
    with real_stack.restarted(*OPENAI_CONTENT_FLAGS) as fe:
        yield fe.url, theirs


@pytest.mark.parametrize("s", SHAPES, ids=[s.id for s in SHAPES])
def test_content_format_parity(s, servers):
    ours, theirs = servers
    reply = chat.send(theirs, s)
    assert reply.status == 400, reply.body  # the parts reached the template as a list
    chat.assert_same(s, chat.send(ours, s), reply)
