"""Tool use and thinking in /v1/messages, ours against vLLM's server, on
scripted mock engines.

The tiny model never writes a tool call by itself, so both servers run with
the agent flags (hermes tool calls, qwen3 reasoning) on mock engines that
play the same script: the case's text as token ids, then EOS (or the length
limit). Per case a non-streaming and a streaming request go to both; the
answers are compared as in tests/test_anthropic_parity.py (ids and
signatures masked, streams folded per content block: vLLM's server merges
steps it falls behind on, which regroups deltas). A stream that still differs
is asked of vLLM again with a slower mock (vLLM's parsers see merged steps
otherwise).
"""

from __future__ import annotations

import copy

import pytest
from tokenizers import Tokenizer

from harness.frontend import launch_mock_stack
from tests.support.anthropic_wire import Shape, assert_same, fold, send
from tests.support.vllm_frontend import AGENT_FLAGS, AGENT_MOCK_STEP_TIME

pytestmark = [pytest.mark.vllm_frontend, pytest.mark.timeout(900)]

STEP_TIME = AGENT_MOCK_STEP_TIME
# vLLM's mock's step time for each attempt at a stream (ours: unpaced steps,
# which our server never merges for a parsed choice).
STREAM_STEP_TIMES = (0.008, 0.03, 0.1)
W = '{"name": "get_weather", "arguments": {"city": "Paris", "days": 3}}'
S = '{"name": "search", "arguments": {"query": "café ☕", "tags": ["a"]}}'
TOOLS = [
    {"name": "get_weather", "description": "Weather in a city", "input_schema": {
        "type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
        "required": ["city"]}},
    {"name": "search", "input_schema": {"properties": {
        "query": {"type": "string"}, "tags": {"type": "array", "items": {"type": "string"}}}}},
]
NO_THINKING = {"type": "disabled"}  # the prompt closes the reasoning: the text is content

# id -> (scripted text, extra body fields, finish)
CASES: dict[str, tuple[str, dict, str]] = {
    "one-tool-use": (f"<tool_call>\n{W}\n</tool_call>", {"thinking": NO_THINKING}, "stop"),
    "two-tool-uses": (f"<tool_call>\n{W}\n</tool_call>\n<tool_call>\n{S}\n</tool_call>",
                      {"thinking": NO_THINKING}, "stop"),
    "text-then-tool-use": (f"Let me check.\n<tool_call>\n{W}\n</tool_call>",
                           {"thinking": NO_THINKING}, "stop"),
    "tool-use-then-text": (f"<tool_call>{W}</tool_call> and some more text",
                           {"thinking": NO_THINKING}, "stop"),
    "thinking-then-text": ("Let me think.\n</think>\n\nThe answer is 4.", {}, "stop"),
    "thinking-then-tool-use": (f"Let me think.\n</think>\n\n<tool_call>\n{W}\n</tool_call>",
                               {}, "stop"),
    "truncated-tool-use": ('<tool_call>\n{"name": "get_weather", "arguments": {"city": "Pa',
                           {"thinking": NO_THINKING}, "length"),
    "named-tool": (f"<tool_call>\n{W}\n</tool_call>",
                   {"thinking": NO_THINKING,
                    "tool_choice": {"type": "tool", "name": "get_weather"}}, "stop"),
    "any-tool": (f"<tool_call>\n{W}\n</tool_call>",
                 {"thinking": NO_THINKING, "tool_choice": {"type": "any"}}, "stop"),
    "stop-sequence-after-tool-use": (f"<tool_call>\n{W}\n</tool_call>STOP and more",
                                     {"thinking": NO_THINKING, "stop_sequences": ["STOP"]},
                                     "stop"),
    "thinking-only": ("still thinking about it", {}, "length"),
}


@pytest.fixture(scope="module")
def tokenizer(tiny_model_dir) -> Tokenizer:
    return Tokenizer.from_file(str(tiny_model_dir / "tokenizer.json"))


@pytest.fixture
def theirs(vllm_agents_on_mock):
    """vLLM's server with the agent flags on a scripted mock (the session's)."""
    return vllm_agents_on_mock


@pytest.fixture(scope="module")
def ours(tiny_model_dir, tmp_path_factory):
    stack = launch_mock_stack(tiny_model_dir, tmp_path_factory.mktemp("our-anthropic-tools"),
                              *AGENT_FLAGS)
    yield stack
    stack.stop()


def shape(id: str, text_ids: list[int], extra: dict, finish: str, stream: bool) -> Shape:
    body = {"model": "tiny", "messages": [{"role": "user", "content": "hi"}],
            "max_tokens": len(text_ids) + (1 if finish == "stop" else 0), "temperature": 0,
            "tools": TOOLS, **copy.deepcopy(extra)}
    if stream:
        body["stream"] = True
    return Shape(f"{id}-stream" if stream else id, body)


@pytest.mark.parametrize("case", sorted(CASES))
def test_tool_use_matches_vllm(case, theirs, ours, tokenizer):
    server, their_control = theirs
    their_url = server.url("agents")
    text, extra, finish = CASES[case]
    ids = tokenizer.encode(text, add_special_tokens=False).ids
    script = {"output_token_ids": ids, "finish": finish}
    their_control.script(script)
    ours.control().script(script)
    for stream in (False, True):
        s = shape(case, ids, extra, finish, stream)
        mine = send(ours.url, s)
        assert mine.status == 200, mine.body
        reply = their_stream(their_control, their_url, s, mine) if stream else send(their_url, s)
        assert_same(s, mine, reply)
    ours.frontend.wait_idle()


def their_stream(control, url: str, s: Shape, mine):
    """vLLM's stream on paced steps; again, slower, while it differs from ours
    when folded (vLLM's parsers saw merged steps)."""
    try:
        for step_time in STREAM_STEP_TIMES:
            control.configure(step_time=step_time)
            reply = send(url, s)
            if fold(mine.events) == fold(reply.events):
                break
    finally:
        control.configure(step_time=float(STEP_TIME))
    return reply


def test_the_cases_show_what_they_say(ours, tokenizer):
    """Our answers have the blocks and stop reasons the cases are named for
    (so the comparison above is not two servers agreeing on plain text)."""
    expected = {
        "one-tool-use": (["tool_use"], "tool_use"),
        "two-tool-uses": (["tool_use", "tool_use"], "tool_use"),
        "text-then-tool-use": (["text", "tool_use"], "tool_use"),
        "thinking-then-text": (["thinking", "text"], "end_turn"),
        "thinking-then-tool-use": (["thinking", "tool_use"], "tool_use"),
        "stop-sequence-after-tool-use": (["tool_use"], "tool_use"),
        "truncated-tool-use": (["text"], "max_tokens"),
        "named-tool": (["tool_use"], "tool_use"),  # (chat's finish_reason: "stop")
    }
    for case, (blocks, reason) in expected.items():
        text, extra, finish = CASES[case]
        ids = tokenizer.encode(text, add_special_tokens=False).ids
        ours.control().script({"output_token_ids": ids, "finish": finish})
        body = send(ours.url, shape(case, ids, extra, finish, False)).json()
        assert [b["type"] for b in body["content"]] == blocks, (case, body)
        assert body["stop_reason"] == reason, (case, body)
        events = fold(send(ours.url, shape(case, ids, extra, finish, True)).events)
        assert events["delta"]["delta"]["stop_reason"] == reason, (case, events)
    # hermes drops the text after a call, streaming or not (as vLLM's)
    text, extra, finish = CASES["tool-use-then-text"]
    ids = tokenizer.encode(text, add_special_tokens=False).ids
    ours.control().script({"output_token_ids": ids, "finish": finish})
    events = fold(send(ours.url, shape("x", ids, extra, finish, True)).events)
    assert [b["start"]["type"] for b in events["blocks"]] == ["tool_use"]
    assert events["blocks"][0]["deltas"]["input_json_delta"] == '{"city": "Paris", "days": 3}'
