"""Tools, reasoning and structured outputs over HTTP, as a client sees them.

* A mock engine playing scripted token ids behind our frontend with
  ``--enable-auto-tool-choice --tool-call-parser hermes --reasoning-parser
  qwen3``: the ``openai`` client's view of tool calls and reasoning, whole and
  streamed, n > 1 (each choice parsed on its own), parallel_tool_calls=false,
  include_reasoning=false, malformed calls as content, usage with reasoning
  tokens, stream_interval; and every 400 arriving before the engine (the
  mock's ADD counter does not move).
* The session's real engine, without parser flags: constrained output from
  the ``openai`` client (streamed, n > 1, batch) obeys its constraint, and
  ``tools`` with tool_choice="none" reach the chat template.

Engine-level parity with vLLM is in test_tools_parity.py, parser-level
parity in test_parsers_e2e.py.
"""

from __future__ import annotations

import json
import re

import pytest
from tokenizers import Tokenizer

from harness.frontend import launch_mock_stack
from tests.support.http_client import MODEL, client, post, stream

HI = [{"role": "user", "content": "Hi"}]
WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                   "required": ["city"]}}}
SEARCH = {"type": "function", "function": {"name": "search", "parameters": {
    "type": "object", "properties": {"q": {"type": "string"}}}}}
TOOLS = [WEATHER, SEARCH]
CALL = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
CALL2 = '<tool_call>\n{"name": "search", "arguments": {"q": "rain"}}\n</tool_call>'
SCHEMA = {"type": "object", "properties": {"a": {"type": "integer", "minimum": 0, "maximum": 9},
                                           "b": {"enum": ["x", "y"]}},
          "required": ["a", "b"], "additionalProperties": False}


@pytest.fixture(scope="module")
def tokenizer(tiny_model_dir) -> Tokenizer:
    return Tokenizer.from_file(str(tiny_model_dir / "tokenizer.json"))


@pytest.fixture(scope="module")
def mock(tiny_model_dir, tmp_path_factory):
    stack = launch_mock_stack(tiny_model_dir, tmp_path_factory.mktemp("tools-mock"),
                              "--enable-auto-tool-choice", "--tool-call-parser", "hermes",
                              "--reasoning-parser", "qwen3",
                              engine_args=("--step-time", "0.002"))
    yield stack
    stack.stop()


@pytest.fixture
def script(mock, tokenizer):
    """``script(text, ...)``: the next requests' outputs (several: in turn)."""
    def set_script(*texts: str) -> None:
        ids = [tokenizer.encode(t, add_special_tokens=False).ids for t in texts]
        mock.control().script({"alternatives": ids})

    yield set_script
    mock.control().clear_scripts()
    mock.frontend.wait_idle()


def chat(url: str, body: dict, status: int = 200) -> dict:
    reply = post(url, "/v1/chat/completions", {"model": MODEL, "messages": HI,
                                               "max_tokens": 200, **body})
    assert reply.status == status, reply.body[:2000]
    return reply.json if status == 200 else reply.error


def streamed(url: str, body: dict) -> list[dict]:
    s = stream(url, "/v1/chat/completions", {"model": MODEL, "messages": HI,
                                             "max_tokens": 200, "stream": True, **body})
    s.check_framing()
    return s.chunks


def assembled(chunks: list[dict]) -> dict[int, dict]:
    """Per choice: content, reasoning, calls {index: [name, arguments, id]}, finish."""
    out: dict[int, dict] = {}
    for chunk in chunks:
        for ch in chunk.get("choices", ()):
            c = out.setdefault(ch["index"], {"content": "", "reasoning": "", "calls": {},
                                             "finish": None})
            delta = ch["delta"]
            c["content"] += delta.get("content") or ""
            c["reasoning"] += delta.get("reasoning") or ""
            for call in delta.get("tool_calls", ()):
                slot = c["calls"].setdefault(call["index"], ["", "", None])
                function = call.get("function") or {}
                slot[0] += function.get("name") or ""
                slot[1] += function.get("arguments") or ""
                slot[2] = slot[2] or call.get("id")
            if ch["finish_reason"]:
                c["finish"] = ch["finish_reason"]
    return out


# ============================================================== mock: tool calls

def test_tool_call_through_the_openai_client(mock, script):
    script(f"<think>The user wants weather.</think>Checking.{CALL}")
    res = client(mock.url).chat.completions.create(model=MODEL, messages=HI, tools=TOOLS,
                                                   max_tokens=200)
    choice = res.choices[0]
    assert choice.finish_reason == "tool_calls"
    assert choice.message.content == "Checking."
    assert choice.message.model_extra["reasoning"] == "The user wants weather."
    [call] = choice.message.tool_calls
    assert call.type == "function" and call.function.name == "get_weather"
    assert json.loads(call.function.arguments) == {"city": "Paris"}
    assert re.fullmatch(r"chatcmpl-tool-[0-9a-f]{16}", call.id)
    assert res.usage.completion_tokens_details.reasoning_tokens > 0


def test_streamed_tool_calls_in_openai_shape(mock, script):
    script(f"<think>hmm</think>{CALL}{CALL2}")
    pieces = list(client(mock.url).chat.completions.create(
        model=MODEL, messages=HI, tools=TOOLS, max_tokens=200, stream=True,
        stream_options={"include_usage": True}))
    calls: dict[int, list] = {}
    for chunk in pieces:
        for ch in chunk.choices:
            for tc in ch.delta.tool_calls or ():
                slot = calls.setdefault(tc.index, [None, "", ""])
                if tc.id:
                    assert slot[0] is None, "an id is sent once, with the name"
                    slot[0] = tc.id
                    assert tc.type == "function" and tc.function.name
                slot[1] += tc.function.name or "" if tc.function else ""
                slot[2] += (tc.function.arguments or "") if tc.function else ""
    assert [calls[i][1] for i in sorted(calls)] == ["get_weather", "search"]
    assert [json.loads(calls[i][2]) for i in sorted(calls)] == [{"city": "Paris"}, {"q": "rain"}]
    finals = [ch.finish_reason for c in pieces for ch in c.choices if ch.finish_reason]
    assert finals == ["tool_calls"]
    assert pieces[-1].usage.completion_tokens_details.reasoning_tokens > 0


@pytest.mark.parametrize("stream_it", [False, True])
def test_n_choices_are_parsed_each_on_their_own(mock, script, stream_it):
    """Three samples: a call, plain text, reasoning + a different call (qwen3:
    what comes before </think> is reasoning, a prompt that does not end it)."""
    script(f"</think>{CALL}", "</think>just text", f"x</think>{CALL2}")
    body = {"tools": TOOLS, "n": 3, "temperature": 1.0, "seed": 3}
    if stream_it:
        got = assembled(streamed(mock.url, body))
        by_index = {i: (c["content"] or None, c["reasoning"] or None,
                        [(n, json.loads(a)) for n, a, _ in c["calls"].values()], c["finish"])
                    for i, c in got.items()}
    else:
        res = chat(mock.url, body)
        by_index = {c["index"]: (c["message"]["content"], c["message"]["reasoning"],
                                 [(t["function"]["name"], json.loads(t["function"]["arguments"]))
                                  for t in c["message"].get("tool_calls", ())],
                                 c["finish_reason"]) for c in res["choices"]}
    assert sorted(by_index.values(), key=str) == sorted([
        (None, None, [("get_weather", {"city": "Paris"})], "tool_calls"),
        ("just text", None, [], "stop"),
        (None, "x", [("search", {"q": "rain"})], "tool_calls"),
    ], key=str)


def test_parallel_tool_calls_false_keeps_the_first(mock, script):
    script(f"{CALL}{CALL2}")
    body = {"tools": TOOLS, "parallel_tool_calls": False}
    [choice] = chat(mock.url, body)["choices"]
    assert [t["function"]["name"] for t in choice["message"]["tool_calls"]] == ["get_weather"]
    got = assembled(streamed(mock.url, body))[0]
    assert [n for n, _, _ in got["calls"].values()] == ["get_weather"]


def test_named_tool_choice(mock, script):
    """hermes forces a named call with a structural tag and parses its own format."""
    script(CALL2)
    body = {"tools": TOOLS, "tool_choice": {"type": "function", "function": {"name": "search"}}}
    [choice] = chat(mock.url, body)["choices"]
    assert choice["finish_reason"] == "stop"  # OpenAI's: a named call "stops"
    assert [t["function"]["name"] for t in choice["message"]["tool_calls"]] == ["search"]
    assert assembled(streamed(mock.url, body))[0]["finish"] == "stop"


@pytest.mark.parametrize("text", [  # (after the reasoning, which qwen3 expects first)
    "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": }\n</tool_call>",
    "<tool_call>\n{\"name\": \"get_wea",
    "<tool_call>not json at all</tool_call>",
    "Use {braces} and <tool_ tags",
])
def test_malformed_tool_text_is_content_never_an_error(mock, script, text):
    script(f"</think>{text}")
    [choice] = chat(mock.url, {"tools": TOOLS})["choices"]
    assert choice["finish_reason"] == "stop"
    message = choice["message"]
    assert not message.get("tool_calls")
    assert message["content"] == text
    # Streamed, a call whose name came before the broken arguments was already
    # announced (as vLLM does; test_parsers_e2e.py compares the chunks).
    chunks = streamed(mock.url, {"tools": TOOLS})
    assert not any("error" in c for c in chunks)
    assert assembled(chunks)[0]["finish"] in ("stop", "tool_calls")


def test_include_reasoning_false_hides_reasoning_and_its_tokens(mock, script):
    script("<think>secret plan</think>The answer.")
    body = {"include_reasoning": False, "return_token_ids": True, "logprobs": True}
    [choice] = chat(mock.url, body)["choices"]
    assert choice["message"]["reasoning"] is None
    assert choice["message"]["content"] == "The answer."
    assert choice["token_ids"] is None and choice["logprobs"] is None
    chunks = streamed(mock.url, body)
    assert "secret" not in json.dumps(chunks)
    assert all(ch.get("token_ids") is None and ch["logprobs"] is None
               for c in chunks for ch in c["choices"])
    assert assembled(chunks)[0]["content"] == "The answer."


def test_reasoning_usage_continuous_and_final(mock, script):
    script("<think>one two three</think>done")
    chunks = streamed(mock.url, {"stream_options": {"include_usage": True,
                                                    "continuous_usage_stats": True}})
    counts = [c["usage"]["completion_tokens_details"]["reasoning_tokens"]
              for c in chunks if c.get("choices")]
    assert counts[0] == 0 and counts == sorted(counts) and counts[-1] > 0
    assert chunks[-1]["usage"]["completion_tokens_details"]["reasoning_tokens"] == counts[-1]


def test_stream_interval_parses_the_held_steps_together(mock, script):
    script(f"<think>a b c d e f</think>{CALL}")
    chunks = streamed(mock.url, {"tools": TOOLS, "stream_interval": 4,
                                 "return_token_ids": True})
    sizes = [len(ch["token_ids"]) for c in chunks for ch in c["choices"] if ch.get("token_ids")]
    assert sizes[0] == 1 and all(s == 4 for s in sizes[1:-1]) and sizes[-1] <= 4
    got = assembled(chunks)[0]
    assert got["reasoning"] == "a b c d e f" and got["finish"] == "tool_calls"
    assert [(n, json.loads(a)) for n, a, _ in got["calls"].values()] == [
        ("get_weather", {"city": "Paris"})]


def test_tool_history_and_tools_reach_the_template(mock):
    """Assistant tool_calls and tool results render through the chat template;
    /tokenize renders the same prompt."""
    messages = [{"role": "user", "content": "Weather?"},
                {"role": "assistant", "content": None, "tool_calls": [
                    {"id": "c1", "type": "function",
                     "function": {"name": "get_weather", "arguments": '{"city": "Oslo"}'}}]},
                {"role": "tool", "tool_call_id": "c1", "content": "cold"}]
    res = chat(mock.url, {"messages": messages, "tools": TOOLS, "max_tokens": 2,
                          "return_token_ids": True, "return_prompt_text": True})
    prompt = res["prompt_text"]
    assert '"name": "get_weather"' in prompt and "<tools>" in prompt
    assert '{"name": "get_weather", "arguments": {"city": "Oslo"}}' in prompt
    assert "<|im_start|>tool\ncold" in prompt
    tok = post(mock.url, "/tokenize", {"model": MODEL, "messages": messages, "tools": TOOLS})
    assert tok.status == 200 and tok.json["tokens"] == res["prompt_token_ids"]


# ============================================================== mock: 400s before the engine

BAD = {
    "bad-schema": {"response_format": {"type": "json_schema", "json_schema": {
        "name": "s", "schema": {"type": "foo"}}}},
    "bad-regex": {"structured_outputs": {"regex": "[a-"}},
    "bad-grammar": {"structured_outputs": {"grammar": "root ::= undefined_rule"}},
    "bad-lark": {"structured_outputs": {"grammar": "start: ("}},
    "two-constraints": {"structured_outputs": {"json": SCHEMA, "regex": "a"}},
    "empty-choice": {"structured_outputs": {"choice": []}},
    "json-schema-missing": {"response_format": {"type": "json_schema"}},
    "bad-rf-type": {"response_format": {"type": "yaml"}},
    "bad-structural-tag": {"response_format": {"type": "structural_tag",
                                               "format": {"type": "nope"}}},
    "so-and-named-tool": {"tools": TOOLS, "structured_outputs": {"regex": "a"},
                          "tool_choice": {"type": "function", "function": {"name": "search"}}},
    "unknown-named-tool": {"tools": TOOLS, "tool_choice": {"type": "function",
                                                           "function": {"name": "nope"}}},
    "empty-tools": {"tools": []},
    "tool-without-name": {"tools": [{"type": "function", "function": {}}]},
    "tool-bad-parameters": {"tools": [{"type": "function", "function": {
        "name": "f", "parameters": "object"}}]},
    "choice-without-tools": {"tool_choice": "required"},
    "functions": {"functions": [{"name": "f"}]},
    "auto-strict-with-lark": {"tools": [{**WEATHER, "function": {**WEATHER["function"],
                                                                 "strict": True}}],
                              "structured_outputs": {"grammar": 'start: "a"'}},
}


@pytest.mark.parametrize("name", BAD)
def test_bad_chat_requests_never_reach_the_engine(mock, name):
    control = mock.control()
    before = control.stats()["adds"]
    for stream_it in (False, True):
        err = chat(mock.url, {**BAD[name], "stream": stream_it}, 400)
        assert err["type"] in ("BadRequestError", "Bad Request"), err
    assert control.stats()["adds"] == before


@pytest.mark.parametrize("fields", [
    {"structured_outputs": {"regex": "("}},
    {"structured_outputs": {"choice": ["a"], "regex": "a"}},
    {"response_format": {"type": "json_schema", "json_schema": {"name": "s",
                                                                "schema": {"type": 7}}}},
    {"response_format": {"type": "json_schema"}},
], ids=["bad-regex", "two-constraints", "bad-schema", "json-schema-missing"])
def test_bad_completion_requests_never_reach_the_engine(mock, fields):
    control = mock.control()
    before = control.stats()["adds"]
    reply = post(mock.url, "/v1/completions", {"model": MODEL, "prompt": ["a", "b"],
                                               "max_tokens": 4, **fields})
    assert reply.status == 400 and reply.error["type"] in ("BadRequestError", "Bad Request")
    assert control.stats()["adds"] == before


def test_without_parsers_tool_choice_needs_them(tiny_model_dir, tmp_path):
    """No --tool-call-parser: vLLM's 400s; tool_choice="none" renders the tools."""
    stack = launch_mock_stack(tiny_model_dir, tmp_path, "--reasoning-parser", "deepseek_r1")
    try:
        err = chat(stack.url, {"tools": TOOLS}, 400)
        assert err["message"] == ('"auto" tool choice requires --enable-auto-tool-choice and '
                                  "--tool-call-parser to be set")
        err = chat(stack.url, {"tools": TOOLS, "tool_choice": "required"}, 400)
        assert err["message"] == 'tool_choice="required" requires --tool-call-parser to be set'
        res = chat(stack.url, {"tools": TOOLS, "tool_choice": "none", "max_tokens": 2,
                               "return_prompt_text": True})
        assert "<tools>" in res["prompt_text"]
        assert res["usage"]["completion_tokens_details"] == {"reasoning_tokens": 0}
    finally:
        stack.stop()


@pytest.mark.parametrize("flags, message", [
    (["--enable-auto-tool-choice"], "--enable-auto-tool-choice requires --tool-call-parser"),
    (["--enable-auto-tool-choice", "--tool-call-parser", "nope"], "unknown tool call parser"),
    (["--reasoning-parser", "nope"], "unknown reasoning parser"),
    (["--structured-outputs-config", '{"backend": "outlines"}'], "not supported"),
])
def test_bad_flags_stop_the_start(tiny_model_dir, tmp_path, flags, message):
    import subprocess

    from harness.procs import BIN_DIR
    proc = subprocess.run([str(BIN_DIR / "frontend"), "--engine-addr", "tcp://127.0.0.1:1",
                           "--model", str(tiny_model_dir), *flags],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and message in proc.stderr, proc.stderr


# ============================================================== real engine

@pytest.mark.real_engine
def test_constrained_streams_from_the_openai_client(real):
    """n > 1 streamed with a JSON schema: every choice's text is valid."""
    texts: dict[int, str] = {}
    finish: dict[int, str] = {}
    for chunk in client(real.url).chat.completions.create(
            model=MODEL, messages=HI, max_tokens=48, n=3, temperature=1.0, seed=11,
            stream=True, response_format={"type": "json_schema", "json_schema": {
                "name": "s", "schema": SCHEMA}}):
        for ch in chunk.choices:
            texts[ch.index] = texts.get(ch.index, "") + (ch.delta.content or "")
            finish[ch.index] = ch.finish_reason or finish.get(ch.index)
    assert sorted(texts) == [0, 1, 2] and set(finish.values()) == {"stop"}
    for text in texts.values():
        value = json.loads(text)
        assert value["a"] in range(10) and value["b"] in ("x", "y"), text


@pytest.mark.real_engine
def test_constrained_batch_completions(real):
    res = client(real.url).completions.create(
        model=MODEL, prompt=["Hi", "The weather", "1 2 3"], max_tokens=16, n=2,
        temperature=1.0, seed=5, extra_body={"structured_outputs": {"regex": "[a-z]{2}[0-9]"}})
    assert len(res.choices) == 6
    for c in res.choices:
        assert c.finish_reason == "stop" and re.fullmatch("[a-z]{2}[0-9]", c.text), c
