"""/v1/messages as Anthropic's own SDK uses it, on a scripted mock engine.

* the official ``anthropic`` SDK: ``messages.create``, ``messages.stream``
  (text, and a tool_use round trip that sends the tool_result back),
  ``messages.count_tokens``; with ``--api-key`` its ``x-api-key`` header is
  accepted (vLLM reads only ``Authorization: Bearer``);
* a client that leaves mid-stream (or before the answer) gets its engine
  request aborted, proven from /metrics and the mock's counters;
* admission (``--max-concurrent-requests``) counts a Messages request; its
  count_tokens renders only;
* a mid-stream engine error: ``event: error``, no ``message_stop`` (vLLM's);
* gpt-oss (Harmony) refused clearly;
* the stream's event machine and the request conversion, in process.
"""

from __future__ import annotations

import json
import shutil
import socket
import time
from urllib.parse import urlsplit

import pytest
from tokenizers import Tokenizer

from frontend.anthropic import convert, events, response
from frontend.anthropic.schemas import MessagesRequest
from frontend.anthropic.validate import decode
from harness.frontend import launch_mock_stack
from harness.waits import wait_for
from tests.support.anthropic_wire import fold, parse_events
from tests.support.http_client import get, post
from tests.support.requirements import require_module
from tests.support.stacks import engine_requests
from tests.support.vllm_frontend import AGENT_FLAGS

anthropic = require_module("anthropic", "the test extras: pip install -e '.[test]'")

KEY = "sk-ant-test-key"
STEP_TIME = "0.002"
W = '{"name": "get_weather", "arguments": {"city": "Paris"}}'
WEATHER = {"name": "get_weather", "description": "Weather in a city",
           "input_schema": {"type": "object", "properties": {"city": {"type": "string"}},
                            "required": ["city"]}}
AUTH = {"x-api-key": KEY}


@pytest.fixture(scope="module")
def stack(tiny_model_dir, tmp_path_factory):
    s = launch_mock_stack(tiny_model_dir, tmp_path_factory.mktemp("anthropic"), *AGENT_FLAGS,
                          "--api-key", KEY, "--max-concurrent-requests", "1",
                          engine_args=("--step-time", STEP_TIME))
    yield s
    s.stop()


@pytest.fixture
def mock(stack):
    """The stack, with no script left over and nothing left in flight after."""
    stack.control().clear_scripts()
    yield stack
    stack.control().configure(step_time=float(STEP_TIME))
    stack.frontend.wait_idle(timeout=30)


@pytest.fixture(scope="module")
def tokenizer(tiny_model_dir) -> Tokenizer:
    return Tokenizer.from_file(str(tiny_model_dir / "tokenizer.json"))


def sdk(url: str, key: str = KEY) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=url, api_key=key, max_retries=0, timeout=60)


def play(mock, tokenizer, text: str, finish: str = "stop") -> int:
    """Script the mock's next answers; returns their length in tokens."""
    ids = tokenizer.encode(text, add_special_tokens=False).ids
    mock.control().script({"output_token_ids": ids, "finish": finish})
    return len(ids)


# ---------------------------------------------------------------- the SDK

def test_sdk_create(mock, tokenizer):
    n = play(mock, tokenizer, "Let me think.\n</think>\n\nThe answer is 4.")
    message = sdk(mock.url).messages.create(
        model="tiny", max_tokens=64, system="Be brief.",
        messages=[{"role": "user", "content": "What is 2+2?"}])
    assert message.type == "message" and message.role == "assistant"
    assert message.id.startswith("chatcmpl-")
    assert [b.type for b in message.content] == ["thinking", "text"]
    assert message.content[0].thinking == "Let me think.\n"
    assert len(message.content[0].signature) == 32
    assert message.content[1].text == "\n\nThe answer is 4."  # (qwen3 keeps them)
    assert message.stop_reason == "end_turn" and message.stop_sequence is None
    assert message.usage.output_tokens == n + 1  # (and the EOS)
    assert message.usage.input_tokens > 0


def test_sdk_stream_text(mock, tokenizer):
    play(mock, tokenizer, "Hello there, how are you?")
    client = sdk(mock.url)
    with client.messages.stream(model="tiny", max_tokens=64, thinking={"type": "disabled"},
                                messages=[{"role": "user", "content": "Hi"}]) as stream:
        text = "".join(stream.text_stream)
        final = stream.get_final_message()
    assert text == "Hello there, how are you?"
    assert [b.type for b in final.content] == ["text"]
    assert final.content[0].text == text
    assert final.stop_reason == "end_turn"


def test_sdk_stop_sequence(mock, tokenizer):
    play(mock, tokenizer, "one two three four")
    message = sdk(mock.url).messages.create(
        model="tiny", max_tokens=64, thinking={"type": "disabled"}, stop_sequences=[" three"],
        messages=[{"role": "user", "content": "count"}])
    assert message.content[0].text == "one two"
    assert (message.stop_reason, message.stop_sequence) == ("stop_sequence", " three")


def test_sdk_tool_use_round_trip(mock, tokenizer):
    """The model calls a tool (streamed); the client runs it and sends the
    tool_result back; the second answer is text. The second request's prompt
    is the chat template's rendering of the same conversation as OpenAI
    messages (count_tokens = /tokenize)."""
    client = sdk(mock.url)
    play(mock, tokenizer, f"Let me check.\n<tool_call>\n{W}\n</tool_call>")
    messages = [{"role": "user", "content": "Weather in Paris?"}]
    with client.messages.stream(model="tiny", max_tokens=64, tools=[WEATHER],
                                thinking={"type": "disabled"}, messages=messages) as stream:
        first = stream.get_final_message()
    assert [b.type for b in first.content] == ["text", "tool_use"]
    assert first.content[0].text == "Let me check.\n"
    call = first.content[1]
    assert (call.name, call.input) == ("get_weather", {"city": "Paris"})
    assert call.id.startswith("chatcmpl-tool-")
    assert first.stop_reason == "tool_use"

    play(mock, tokenizer, "It is sunny in Paris.")
    messages += [
        {"role": "assistant", "content": [b.model_dump(exclude_none=True)
                                          for b in first.content]},
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": call.id, "content": "Sunny, 21C"}]},
    ]
    second = client.messages.create(model="tiny", max_tokens=64, tools=[WEATHER],
                                    thinking={"type": "disabled"}, messages=messages)
    assert [b.type for b in second.content] == ["text"]
    assert second.content[0].text == "It is sunny in Paris."
    assert second.stop_reason == "end_turn"

    counted = client.messages.count_tokens(model="tiny", tools=[WEATHER], messages=messages)
    chat_messages = [
        messages[0],
        {"role": "assistant", "content": first.content[0].text, "tool_calls": [{
            "id": call.id, "type": "function",
            "function": {"name": "get_weather", "arguments": json.dumps(call.input)}}]},
        {"role": "tool", "tool_call_id": call.id, "content": "Sunny, 21C"},
    ]
    tools = [{"type": "function", "function": {"name": WEATHER["name"],
                                                "description": WEATHER["description"],
                                                "parameters": WEATHER["input_schema"]}}]
    tokenized = post(mock.url, "/tokenize", {"model": "tiny", "messages": chat_messages,
                                             "tools": tools}).json
    assert counted.input_tokens == tokenized["count"] > 50
    assert counted.context_management == {"original_input_tokens": counted.input_tokens}


def test_sdk_count_tokens(mock):
    client = sdk(mock.url)
    short = client.messages.count_tokens(model="tiny",
                                         messages=[{"role": "user", "content": "Hi"}])
    longer = client.messages.count_tokens(model="tiny", system="You are a helpful assistant.",
                                          messages=[{"role": "user", "content": "Hi"}])
    assert 0 < short.input_tokens < longer.input_tokens


def test_api_keys(mock):
    """x-api-key (the Anthropic SDK's) or a bearer token on the Messages
    routes; elsewhere vLLM's rule (a bearer token only) stands."""
    with pytest.raises(anthropic.AuthenticationError):
        sdk(mock.url, key="wrong").messages.count_tokens(
            model="tiny", messages=[{"role": "user", "content": "Hi"}])
    body = {"model": "tiny", "messages": [{"role": "user", "content": "Hi"}]}
    path = "/v1/messages/count_tokens"
    assert post(mock.url, path, body).status == 401
    assert post(mock.url, path, body, headers={"x-api-key": "wrong"}).status == 401
    assert post(mock.url, path, body, headers=AUTH).status == 200
    assert post(mock.url, path, body, headers={"Authorization": f"Bearer {KEY}"}).status == 200
    chat = {**body, "max_tokens": 2}
    assert post(mock.url, "/v1/chat/completions", chat, headers=AUTH).status == 401
    reply = post(mock.url, "/v1/chat/completions", chat,
                 headers={"Authorization": f"Bearer {KEY}"})
    assert reply.status == 200


# ---------------------------------------------------------------- clients that leave

class RawStream:
    """A Messages request on a plain socket, so the test can hang up."""

    def __init__(self, url: str, body: dict) -> None:
        parts = urlsplit(url)
        self.sock = socket.create_connection((parts.hostname, parts.port), timeout=30)
        data = json.dumps(body).encode()
        head = (f"POST /v1/messages HTTP/1.1\r\nHost: {parts.hostname}\r\n"
                f"Content-Type: application/json\r\nx-api-key: {KEY}\r\n"
                f"Content-Length: {len(data)}\r\nConnection: close\r\n\r\n").encode()
        self.sock.sendall(head + data)
        self.received = b""

    def read_until(self, marker: bytes, count: int, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while self.received.partition(b"\r\n\r\n")[2].count(marker) < count:
            self.sock.settimeout(max(deadline - time.monotonic(), 0.01))
            data = self.sock.recv(65536)
            assert data, self.received[-500:]
            self.received += data

    def hang_up(self) -> None:
        """Close at once with a reset, as a killed client would."""
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\0\0\0\0\0\0\0")
        self.sock.close()


LONG = {"model": "tiny", "max_tokens": 1000, "thinking": {"type": "disabled"},
        "messages": [{"role": "user", "content": "Tell me a long story"}]}


@pytest.mark.parametrize("stream", [True, False], ids=["stream", "non-stream"])
def test_client_leaving_aborts_the_engine_request(mock, stream):
    mock.control().configure(step_time=0.01)  # 1000 tokens: ten seconds
    aborted, finished = engine_requests(mock.url)
    before = mock.control().stats()
    client = RawStream(mock.url, {**LONG, "stream": stream})
    try:
        if stream:
            client.read_until(b"event: content_block_delta", count=5)
            assert client.received.startswith(b"HTTP/1.1 200")
        else:
            wait_for(lambda: mock.control().stats()["running"] == 1, timeout=10,
                     message="the engine does not run the request")
        assert mock.frontend.debug_state()["table"] == 1  # still open
    finally:
        client.hang_up()
    wait_for(lambda: mock.frontend.debug_state()["table"] == 0, timeout=30,
             message="table not empty after the client left")
    mock.frontend.wait_idle(timeout=30)
    assert engine_requests(mock.url) == (aborted + 1, finished)
    after = mock.control().stats()
    assert after["aborted"] == before["aborted"] + 1
    assert after["finished"]["length"] == before["finished"]["length"]


def test_admission_counts_messages(mock):
    """--max-concurrent-requests 1: a second Messages request waits its turn
    (429); count_tokens, which sends nothing to the engine, is not counted."""
    mock.control().configure(step_time=0.01)
    client = RawStream(mock.url, {**LONG, "stream": True})
    try:
        client.read_until(b"event: content_block_delta", count=2)
        reply = post(mock.url, "/v1/messages", {**LONG, "max_tokens": 2}, headers=AUTH)
        assert reply.status == 429, reply.body
        counted = post(mock.url, "/v1/messages/count_tokens",
                       {"model": "tiny", "messages": LONG["messages"]}, headers=AUTH)
        assert counted.status == 200, counted.body
    finally:
        client.hang_up()


def test_engine_error_mid_stream(mock):
    """vLLM's converter meets chat's error chunk: an error event, and the
    stream ends without message_delta or message_stop."""
    mock.control().error_next(1)
    reply = post(mock.url, "/v1/messages", {**LONG, "max_tokens": 8, "stream": True},
                 headers=AUTH)
    assert reply.status == 200
    stream = fold(parse_events(reply.body))
    assert stream["errors"] and stream["errors"][0]["error"]["type"] == "internal_error"
    assert stream["delta"] is None and stream["stop"] == 0


def test_metrics_count_messages(mock, tokenizer):
    """The route's HTTP counter and the engine's finished requests (/metrics)."""
    play(mock, tokenizer, "ok")
    label = 'handler="/v1/messages",'
    before, (_, finished) = _count(get(mock.url, "/metrics").body.decode(), label), \
        engine_requests(mock.url)
    reply = post(mock.url, "/v1/messages", {**LONG, "max_tokens": 8}, headers=AUTH)
    assert reply.status == 200
    after = _count(get(mock.url, "/metrics").body.decode(), label)
    assert after == before + 1
    wait_for(lambda: engine_requests(mock.url)[1] == finished + 1, timeout=10,
             message="the engine's finished requests did not count it")


def _count(text: str, label: str) -> float:
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith("http_requests_total{") and label in line)


# ---------------------------------------------------------------- gpt-oss

def test_gpt_oss_is_refused(tiny_model_dir, tmp_path):
    model = tmp_path / "gpt-oss"
    shutil.copytree(tiny_model_dir, model)
    config = json.loads((model / "config.json").read_text())
    (model / "config.json").write_text(json.dumps({**config, "model_type": "gpt_oss"}))
    stack = launch_mock_stack(model, tmp_path)
    try:
        body = {"model": "tiny", "max_tokens": 4, "messages": [{"role": "user", "content": "Hi"}]}
        for path in ("/v1/messages", "/v1/messages/count_tokens"):
            reply = post(stack.url, path, body)
            assert reply.status == 400, reply.body
            assert reply.json == {"type": "error", "error": {
                "type": "invalid_request_error",
                "message": "The Messages API is not supported for gpt-oss (Harmony) models "
                           "by this server"}}
    finally:
        stack.stop()


# ---------------------------------------------------------------- in process

def test_event_stream_holds_text_back_while_a_tool_use_block_is_open():
    stream = events.EventStream(lambda v: json.dumps(v).encode())
    out = stream.start("chatcmpl-1", "tiny", 7)
    out += stream.chunk("hmm", None, [], None, None)
    call = {"index": 0, "id": "chatcmpl-tool-1", "type": "function",
            "function": {"name": "f", "arguments": ""}}
    out += stream.chunk(None, None, [call], None, None)
    out += stream.chunk(None, "later", [{"index": 0, "function": {"arguments": '{"a": 1}'}}],
                        None, None)
    out += stream.chunk(None, " text", [], "tool_calls", None)
    out += stream.finish({"input_tokens": 7, "output_tokens": 5})
    folded = fold(parse_events(out))
    assert [b["start"]["type"] for b in folded["blocks"]] == ["thinking", "tool_use", "text"]
    assert folded["blocks"][0]["kinds"] == ["thinking_delta", "signature_delta"]
    assert folded["blocks"][1]["deltas"] == {"input_json_delta": '{"a": 1}'}
    assert folded["blocks"][2]["deltas"] == {"text_delta": "later text"}
    assert folded["delta"]["delta"] == {"stop_reason": "tool_use", "stop_sequence": None}
    assert folded["order"][-2:] == ["message_delta", "message_stop"]


@pytest.mark.parametrize("args, expected", [
    (("length", None, True, True), ("max_tokens", None)),
    (("abort", None, False, False), (None, None)),
    (("stop", "END", True, True), ("tool_use", None)),  # a complete call wins
    (("stop", "END", True, False), ("stop_sequence", "END")),  # a cut one does not
    (("stop", 5, False, False), ("end_turn", None)),  # a stop token id is no sequence
    (("stop", None, True, False), ("tool_use", None)),  # a named call: chat says "stop"
    (("tool_calls", None, False, False), ("tool_use", None)),
])
def test_stop_reasons(args, expected):
    assert response.stop_reason(*args) == expected


def test_usage_subtracts_cached_tokens():
    chat = {"prompt_tokens": 10, "completion_tokens": 3,
            "prompt_tokens_details": {"cached_tokens": 4, "created_cache_tokens": 0}}
    assert response.usage(chat) == {"input_tokens": 6, "output_tokens": 3,
                                    "cache_creation_input_tokens": 0,
                                    "cache_read_input_tokens": 4}
    assert response.usage({"prompt_tokens": 10, "completion_tokens": None}) == {
        "input_tokens": 10, "output_tokens": 0}


def test_conversion():
    body = {
        "model": "tiny", "max_tokens": 9, "stream": True, "stop_sequences": ["X"],
        "system": [{"type": "text", "text": "x-anthropic-billing-header: cch=1"},
                   {"type": "text", "text": "A"}, {"type": "text", "text": "B"}],
        "messages": [
            {"role": "user", "content": "q"},
            {"role": "assistant", "content": [
                {"type": "thinking", "thinking": "t", "signature": "s"},
                {"type": "tool_use", "id": "toolu_1", "name": "f", "input": {"a": "é"}}]},
            {"role": "user", "content": [
                {"type": "text", "text": "after"},
                {"type": "tool_result", "tool_use_id": "toolu_1",
                 "content": [{"type": "text", "text": "r1"}, {"type": "text", "text": "r2"},
                             {"type": "image", "source": {"type": "url", "url": "http://i"}}]}]},
        ],
        "tools": [{"name": "f", "input_schema": {"properties": {}}}],
        "tool_choice": {"type": "any", "disable_parallel_tool_use": True},
        "thinking": {"type": "disabled"}, "output_config": {"effort": "high"},
    }
    req = decode(json.dumps(body).encode(), MessagesRequest)
    converted = convert.to_chat_request(req, merge_inline_system=False, disabled_effort="none")
    chat = converted.chat
    assert chat.messages == [
        {"role": "system", "content": "AB"},
        {"role": "user", "content": "q"},
        {"role": "assistant", "reasoning": "t", "tool_calls": [{
            "id": "toolu_1", "type": "function",
            "function": {"name": "f", "arguments": '{"a": "\\u00e9"}'}}]},
        {"role": "tool", "tool_call_id": "toolu_1", "content": "r1\nr2"},
        {"role": "user", "content": [{"type": "image_url", "image_url": {"url": "http://i"}}]},
        {"role": "user", "content": "after"},
    ]
    assert (chat.max_tokens, chat.max_completion_tokens, chat.stop) == (9, 9, ["X"])
    assert chat.stream_options == {"include_usage": True, "continuous_usage_stats": True}
    assert chat.reasoning_effort == "none"  # thinking wins over output_config.effort
    assert (chat.tool_choice, chat.parallel_tool_calls) == ("required", False)
    assert chat.tools == [{"type": "function", "function": {
        "name": "f", "description": None, "parameters": {"properties": {}, "type": "object"},
        "strict": None, "defer_loading": None}}]
    merged = convert.to_chat_request(
        decode(json.dumps({"model": "m", "max_tokens": 1, "system": "S", "messages": [
            {"role": "user", "content": "a"}, {"role": "system", "content": "I"},
            {"role": "user", "content": "b"}]}).encode(), MessagesRequest),
        merge_inline_system=True, disabled_effort="none").chat
    assert merged.messages == [{"role": "system", "content": "SI"},
                               {"role": "user", "content": "a"},
                               {"role": "user", "content": "b"}]
    assert merged.tool_choice is None and merged.stream is False
