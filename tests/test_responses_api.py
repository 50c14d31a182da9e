"""/v1/responses with the official ``openai`` SDK as a user calls it, and what
must hold around it: a client that leaves aborts the engine request, cancel
aborts a background response's engine request, admission and the store's
bound apply, shutdown leaves nothing running.

Our frontend with the agent parsers (hermes, qwen3) and the store switched on
(``VLLM_ENABLE_RESPONSES_API_STORE=1``, at most ``STORE_SIZE`` responses), on
a mock engine; tool calls are scripted (the mock plays the given token ids).
Engine aborts are proven from /metrics (tests/support/stacks.py's
``engine_requests``) and from the mock's own counters.
"""

from __future__ import annotations

import json
import signal
from types import SimpleNamespace

import openai
import pytest
from tokenizers import Tokenizer

from frontend.errors import ApiError
from frontend.responses.handlers import ResponsesApi
from harness.frontend import launch_mock_stack
from harness.waits import wait_for
from tests.support.http_client import RawRequest, client, get, post
from tests.support.stacks import engine_requests
from tests.support.vllm_frontend import AGENT_FLAGS

STORE_SIZE = 4
STEP_TIME = "0.005"
WEATHER = {"type": "function", "name": "get_weather", "description": "Weather in a city",
           "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                          "required": ["city"]}}
CALL = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
LONG = {"max_output_tokens": 900, "ignore_eos": True}  # (ignore_eos: an extra body field)


@pytest.fixture(scope="module")
def stack(tiny_model_dir, tmp_path_factory):
    with pytest.MonkeyPatch.context() as env:  # (the frontend process inherits it)
        env.setenv("VLLM_ENABLE_RESPONSES_API_STORE", "1")
        env.setenv("FRONTEND_RESPONSES_STORE_SIZE", str(STORE_SIZE))
        s = launch_mock_stack(tiny_model_dir, tmp_path_factory.mktemp("responses-api"),
                              *AGENT_FLAGS, "--max-concurrent-requests", "1",
                              "--shutdown-timeout", "1", engine_args=("--step-time", STEP_TIME))
    yield s
    s.stop()


@pytest.fixture
def sdk(stack):
    stack.control().clear_scripts()
    yield client(stack.url)
    stack.frontend.wait_idle()


@pytest.fixture(scope="module")
def tokenizer(tiny_model_dir) -> Tokenizer:
    return Tokenizer.from_file(str(tiny_model_dir / "tokenizer.json"))


def script(stack, tokenizer, *texts: str) -> None:
    """The next requests' outputs, in turn (then EOS)."""
    ids = [tokenizer.encode(t, add_special_tokens=False).ids for t in texts]
    stack.control().script({"alternatives": ids, "finish": "stop"})


# ---------------------------------------------------------------- the SDK


def test_sdk_create(sdk, stack, tokenizer):
    script(stack, tokenizer, "Let me see.\n</think>\n\nHello there!")
    resp = sdk.responses.create(model="tiny", input="Hi", instructions="Be kind.",
                                max_output_tokens=64)
    assert resp.id.startswith("resp_") and resp.status == "completed"
    assert [item.type for item in resp.output] == ["reasoning", "message"]
    assert resp.output[0].content[0].text == "Let me see.\n"
    assert resp.output_text == "\n\nHello there!"
    assert resp.instructions == "Be kind." and resp.max_output_tokens == 64
    usage = resp.usage
    assert usage.output_tokens_details.reasoning_tokens == len(
        tokenizer.encode("Let me see.\n", add_special_tokens=False).ids)
    assert usage.total_tokens == usage.input_tokens + usage.output_tokens
    assert usage.input_tokens_details.cached_tokens >= 0
    # stored: retrieve gives the same object
    assert sdk.responses.retrieve(resp.id).model_dump() == resp.model_dump()


def test_sdk_stream(sdk, stack, tokenizer):
    script(stack, tokenizer, "hmm</think>\n\nStreamed words here.")
    with sdk.responses.create(model="tiny", input="Hi", stream=True,
                              max_output_tokens=64) as stream:
        events = list(stream)
    kinds = [e.type for e in events]
    assert kinds[:2] == ["response.created", "response.in_progress"]
    assert kinds[-1] == "response.completed"
    assert [e.sequence_number for e in events] == list(range(len(events)))
    assert "response.reasoning_text.delta" in kinds and "response.output_text.delta" in kinds
    text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    final = events[-1].response
    assert text == final.output_text == "\n\nStreamed words here."
    done = [e.item for e in events if e.type == "response.output_item.done"]
    assert [i.id for i in done] == [i.id for i in final.output]
    assert sdk.responses.retrieve(final.id).output_text == text


def test_sdk_function_tool_round_trip(sdk, stack, tokenizer):
    script(stack, tokenizer, f"I should call.\n</think>\n\n{CALL}",
           "ok</think>\n\nIt is sunny in Paris.")
    first = sdk.responses.create(model="tiny", input="Weather in Paris?", tools=[WEATHER],
                                 max_output_tokens=128)
    calls = [item for item in first.output if item.type == "function_call"]
    assert len(calls) == 1 and calls[0].name == "get_weather"
    assert json.loads(calls[0].arguments) == {"city": "Paris"}
    assert calls[0].call_id.startswith("chatcmpl-tool-") and calls[0].status == "completed"
    # The client runs the tool and sends its output with the conversation so far.
    history = [{"role": "user", "content": "Weather in Paris?"},
               *[item.model_dump(exclude_none=True) for item in first.output],
               {"type": "function_call_output", "call_id": calls[0].call_id,
                "output": "sunny, 21 C"}]
    second = sdk.responses.create(model="tiny", input=history, tools=[WEATHER],
                                  max_output_tokens=64,
                                  extra_body={"enable_response_messages": True})
    assert second.output_text == "\n\nIt is sunny in Paris."
    prompt = second.model_extra["input_messages"][0]["message"]
    # the call and its result reached the model's prompt, in order
    assert prompt.index('"city": "Paris"') < prompt.index("sunny, 21 C")


def test_sdk_background_retrieve_cancel(sdk, stack):
    aborted, finished = engine_requests(stack.url)
    mock_aborted = stack.control().stats()["aborted"]
    resp = sdk.responses.create(model="tiny", input="Hi", background=True,
                                max_output_tokens=900, extra_body={"ignore_eos": True})
    assert resp.status == "queued" and resp.output == [] and resp.usage is None
    wait_for(lambda: stack.frontend.debug_state()["table"] == 1, timeout=10,
             message="the background response never reached the engine")
    assert sdk.responses.retrieve(resp.id).status == "queued"
    cancelled = sdk.responses.cancel(resp.id)
    assert cancelled.status == "cancelled" and cancelled.usage is None
    stack.frontend.wait_idle(timeout=30)
    # its engine request was aborted, not finished
    assert engine_requests(stack.url) == (aborted + 1, finished)
    assert stack.control().stats()["aborted"] == mock_aborted + 1
    assert sdk.responses.retrieve(resp.id).status == "cancelled"
    with pytest.raises(openai.BadRequestError, match="Cannot cancel a synchronous response"):
        sdk.responses.cancel(resp.id)


def test_sdk_background_completes(sdk, stack, tokenizer):
    script(stack, tokenizer, "x</think>\n\nDone in the background.")
    resp = sdk.responses.create(model="tiny", input="Hi", background=True, max_output_tokens=64)
    wait_for(lambda: sdk.responses.retrieve(resp.id).status != "queued", timeout=30,
             message="the background response never finished")
    final = sdk.responses.retrieve(resp.id)
    assert final.status == "completed" and final.output_text == "\n\nDone in the background."
    with pytest.raises(openai.NotFoundError):
        sdk.responses.retrieve("resp_never_made")


def test_previous_response_id_history(sdk, stack, tokenizer):
    script(stack, tokenizer, "a</think>\n\nFirst answer.", "b</think>\n\nSecond answer.")
    first = sdk.responses.create(model="tiny", input="One", instructions="SYSTEM-ONE",
                                 max_output_tokens=64)
    second = sdk.responses.create(model="tiny", input="Two", previous_response_id=first.id,
                                  max_output_tokens=64,
                                  extra_body={"enable_response_messages": True})
    prompt = second.model_extra["input_messages"][0]["message"]
    # the earlier turn and its answer are in the prompt; its instructions are not
    assert prompt.index("One") < prompt.index("First answer.") < prompt.index("Two")
    assert "SYSTEM-ONE" not in prompt


def test_store_is_bounded(sdk, stack):
    ids = [sdk.responses.create(model="tiny", input="Hi", max_output_tokens=2).id
           for _ in range(STORE_SIZE + 1)]
    with pytest.raises(openai.NotFoundError):
        sdk.responses.retrieve(ids[0])  # the least recently used went
    assert [sdk.responses.retrieve(i).id for i in ids[1:]] == ids[1:]


# ---------------------------------------------------------------- aborts, admission


def test_stream_hang_up_aborts_the_engine_request(stack, sdk):
    aborted, finished = engine_requests(stack.url)
    req = RawRequest(stack.url, "/v1/responses", {
        "model": "tiny", "input": "Hi", "stream": True, **LONG})
    try:
        req.read_until(b"event: response.reasoning_text.delta", count=20)
        assert req.status == 200
        assert stack.frontend.debug_state()["table"] == 1  # the stream is open and running
        assert b"response.completed" not in req.received
    finally:
        req.hang_up()
    wait_for(lambda: stack.frontend.debug_state()["table"] == 0, timeout=30,
             message="table not empty after the client left")
    stack.frontend.wait_idle(timeout=30)
    assert engine_requests(stack.url) == (aborted + 1, finished)


def test_non_stream_hang_up_aborts_the_engine_request(stack, sdk):
    aborted, finished = engine_requests(stack.url)
    req = RawRequest(stack.url, "/v1/responses", {"model": "tiny", "input": "Hi", **LONG})
    try:
        wait_for(lambda: stack.frontend.debug_state()["table"] == 1, timeout=10,
                 message="the response never reached the engine")
    finally:
        req.hang_up()
    stack.frontend.wait_idle(timeout=30)
    assert engine_requests(stack.url) == (aborted + 1, finished)


def test_admission_counts_responses(stack, sdk):
    req = RawRequest(stack.url, "/v1/responses", {
        "model": "tiny", "input": "Hi", "stream": True, **LONG})
    try:
        req.read_until(b"event: response.created")
        busy = post(stack.url, "/v1/responses", {"model": "tiny", "input": "Hi"})
        assert busy.status == 429 and busy.headers["Retry-After"] == "1"
    finally:
        req.hang_up()


def test_errors_keep_vllms_shape(stack, sdk):
    reply = post(stack.url, "/v1/responses", {"model": "tiny", "input": "x",
                                               "previous_response_id": "resp_nope"})
    assert reply.status == 404 and reply.error == {
        "message": "Response with id 'resp_nope' not found.", "type": "invalid_request_error",
        "param": "response_id", "code": 404}
    assert get(stack.url, "/v1/responses/resp_nope").status == 404
    assert post(stack.url, "/v1/responses/resp_nope/cancel", b"").status == 404


def test_shutdown_aborts_background_responses(tiny_model_dir, tmp_path):
    """SIGTERM: the drain waits --shutdown-timeout for a running background
    response, then aborts its engine request; the process exits cleanly."""
    with pytest.MonkeyPatch.context() as env:
        env.setenv("VLLM_ENABLE_RESPONSES_API_STORE", "1")
        s = launch_mock_stack(tiny_model_dir, tmp_path, "--shutdown-timeout", "1",
                              engine_args=("--step-time", "0.01"))
    try:
        reply = post(s.url, "/v1/responses", {"model": "tiny", "input": "Hi",
                                               "background": True, **LONG})
        assert reply.status == 200 and reply.json["status"] == "queued"
        wait_for(lambda: s.control().stats()["running"] == 1, timeout=10,
                 message="the background response never reached the engine")
        before = s.control().stats()["aborted"]
        s.frontend.proc.send_signal(signal.SIGTERM)
        assert s.frontend.proc.wait(30) == 0, s.frontend.log_tail()
        wait_for(lambda: s.control().stats()["running"] == 0, timeout=10,
                 message="the engine still runs the background response")
        assert s.control().stats()["aborted"] == before + 1
        assert "Task was destroyed" not in s.frontend.log()
    finally:
        s.stop()


# ---------------------------------------------------------------- gpt-oss


def test_gpt_oss_is_refused(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "gpt_oss"}))
    state = SimpleNamespace(model=SimpleNamespace(directory=str(tmp_path), path=str(tmp_path)))
    api = ResponsesApi(state)  # type: ignore[arg-type]
    with pytest.raises(ApiError) as e:
        api._refuse_harmony()
    assert e.value.status == 400 and "gpt-oss (Harmony)" in e.value.message
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "llama"}))
    ResponsesApi(state)._refuse_harmony()  # type: ignore[arg-type]


def test_store_off_by_default(tiny_model_dir, tmp_path):
    """Without the switch, as vLLM: store=true is quietly off, background is refused."""
    s = launch_mock_stack(tiny_model_dir, tmp_path)
    try:
        made = post(s.url, "/v1/responses", {"model": "tiny", "input": "Hi",
                                              "max_output_tokens": 2})
        assert made.status == 200
        assert get(s.url, f"/v1/responses/{made.json['id']}").status == 404
        refused = post(s.url, "/v1/responses", {"input": "Hi", "background": True})
        assert refused.status == 400 and refused.error["param"] == "background"
        assert "VLLM_ENABLE_RESPONSES_API_STORE=1" in refused.error["message"]
        s.frontend.wait_idle()
    finally:
        s.stop()
