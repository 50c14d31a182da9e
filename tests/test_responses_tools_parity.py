"""/v1/responses with function calls: our frontend against vLLM's server, on
mock engines that play the same scripted tokens.

The tiny model never writes a tool call by itself, so each case scripts the
mock's output (the case's text as token ids, then EOS) on both sides: vLLM
0.32's API server (tests/support/vllm_multi_server.py) on one scripted mock,
ours on another, both with the agent parsers (hermes tool calls, qwen3
reasoning). Per case a non-streaming and a streaming request; the answers
must be equal after masking ids (tests/support/responses.py). vLLM's server
merges engine steps it falls behind on (and then parses them together, which
changes the events), so a stream of vLLM's is asked for again with a slower
mock until it did not.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from tokenizers import Tokenizer

from harness.frontend import launch_mock_stack
from tests.support.responses import assert_same, deltas, send
from tests.support.vllm_frontend import AGENT_FLAGS, AGENT_MOCK_STEP_TIME

pytestmark = [pytest.mark.vllm_frontend, pytest.mark.timeout(900)]

STEP_TIME = AGENT_MOCK_STEP_TIME
# vLLM's mock's step time for each attempt at a stream (ours: unpaced steps,
# which our server never merges for a parsed choice).
STREAM_STEP_TIMES = (0.008, 0.03, 0.08, 0.2)
W = '{"name": "get_weather", "arguments": {"city": "Paris"}}'
S = '{"name": "search", "arguments": {"q": "rain"}}'
R = '{"name": "maps__route", "arguments": {}}'
TOOLS = [
    {"type": "function", "name": "get_weather", "description": "Weather in a city",
     "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                    "required": ["city"]}},
    {"type": "function", "name": "search",
     "parameters": {"type": "object", "properties": {"q": {"type": "string"}}}},
    {"type": "namespace", "name": "maps", "description": "Map tools",
     "tools": [{"type": "function", "name": "route",
                "parameters": {"type": "object", "properties": {}}}]},
]
# id -> (scripted text, extra request fields)
CASES: dict[str, tuple[str, dict[str, Any]]] = {
    "one-call": (f"Let me think.\n</think>\n\n<tool_call>\n{W}\n</tool_call>", {}),
    "two-calls": (f"plan</think>\n\n<tool_call>\n{W}\n</tool_call>\n<tool_call>\n{S}\n"
                  "</tool_call>", {}),
    "two-calls-not-parallel": (f"plan</think>\n\n<tool_call>\n{W}\n</tool_call>\n"
                               f"<tool_call>\n{S}\n</tool_call>", {"parallel_tool_calls": False}),
    "text-then-call": (f"ok</think>\n\nSure, checking. <tool_call>\n{W}\n</tool_call>", {}),
    "reasoning-then-text": ("Let me think about it.\n</think>\n\nThe answer is 42.", {}),
    "namespaced-call": (f"hm</think>\n\n<tool_call>\n{R}\n</tool_call>", {}),
    "call-with-logprobs": (f"x</think>\n\nSo: <tool_call>\n{W}\n</tool_call>",
                           {"include": ["message.output_text.logprobs"]}),
    "hidden-reasoning": (f"secret</think>\n\nVisible. <tool_call>\n{W}\n</tool_call>",
                         {"include_reasoning": False}),
    # max_output_tokens reached inside the reasoning: incomplete, reasoning only
    "unfinished-reasoning": ("still thinking about the weather in", {"finish": "length"}),
}


@pytest.fixture(scope="module")
def tokenizer(tiny_model_dir) -> Tokenizer:
    return Tokenizer.from_file(str(tiny_model_dir / "tokenizer.json"))


@pytest.fixture
def vllm_server(vllm_agents_on_mock):
    """vLLM's API server with the agent parsers on a scripted mock (the session's)."""
    return vllm_agents_on_mock


@pytest.fixture(scope="module")
def ours(tiny_model_dir, tmp_path_factory):
    stack = launch_mock_stack(tiny_model_dir, tmp_path_factory.mktemp("our-responses-tools"),
                              *AGENT_FLAGS)
    yield stack
    stack.stop()


def request(ids: list[int], extra: dict[str, Any], finish: str, stream: bool) -> dict[str, Any]:
    return {"model": "tiny", "input": "What's the weather?", "tools": TOOLS, "temperature": 0,
            "max_output_tokens": len(ids) + (finish == "stop"), "stream": stream, **extra}


@pytest.mark.parametrize("case", list(CASES))
def test_function_calls_match_vllm(vllm_server, ours, tokenizer, case):
    server, their_control = vllm_server
    their_url = server.url("agents")
    text, extra = CASES[case]
    extra = dict(extra)
    finish = extra.pop("finish", "stop")
    ids = tokenizer.encode(text, add_special_tokens=False).ids
    script = {"output_token_ids": ids, "finish": finish}
    their_control.script(script)
    ours.control().script(script)

    body = request(ids, extra, finish, stream=False)
    mine = send(ours.url, "POST", "/v1/responses", body)
    theirs = send(their_url, "POST", "/v1/responses", body)
    assert_same(mine, theirs)
    kinds = [item["type"] for item in mine.json()["output"]]
    assert ("function_call" in kinds) == ("<tool_call>" in text), kinds

    body = request(ids, extra, finish, stream=True)
    mine = send(ours.url, "POST", "/v1/responses", body)
    assert mine.status == 200 and mine.events, mine.body[:500]
    try:
        for step_time in STREAM_STEP_TIMES:
            their_control.configure(step_time=step_time)
            theirs = send(their_url, "POST", "/v1/responses", body)
            if deltas(theirs) == deltas(mine):  # vLLM parsed every step on its own
                break
        else:
            pytest.fail("vLLM's server merged steps in every stream: nothing to compare with")
    finally:
        their_control.configure(step_time=float(STEP_TIME))
    assert_same(mine, theirs, unmerged=True)
    completed = mine.events[-1][1]["response"]
    assert completed["output"] == [e[1]["item"] for e in mine.events
                                   if e[0] == "response.output_item.done"]
    ours.frontend.wait_idle()


def test_cases_cover_the_issue():
    """One call, two calls, text then a call, reasoning then text."""
    assert {"one-call", "two-calls", "text-then-call", "reasoning-then-text"} <= set(CASES)
    assert json.loads(W)["name"] == TOOLS[0]["name"]
