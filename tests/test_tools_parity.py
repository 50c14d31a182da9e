"""Structured outputs, tool calls and reasoning on the real engine: valid, and vLLM's.

Every shape goes to vLLM 0.32's own API server and to ours, one at a time in
the same order, on real engines running the tiny model greedily (or seeded).
The answers must be equal, and where a shape has a ``check`` our output must
obey its constraint: the random tiny model writes gibberish, the grammar makes
it valid JSON, a regex match, a listed choice, a tool call with arguments that
fit the tool's schema.

Two pairs of servers:

* ``plain``: the session's engines (``frontend`` and ``vllm_frontend``), no
  parser flags: response_format / structured_outputs on /v1/completions and
  /v1/chat/completions (batch, n > 1, streaming), and the 400s both give
  before anything reaches the engine.
* ``hermes`` / ``pythonic``: a pair of engines started with
  ``--reasoning-parser qwen3`` (the engine holds a grammar back until the
  reasoning ends), ours and vLLM's server with ``--enable-auto-tool-choice
  --tool-call-parser hermes|pythonic --reasoning-parser qwen3``. Hermes forces
  "required"/named calls with a structural tag, pythonic with a JSON schema.
  ``enable_thinking: false`` makes the prompt end the reasoning (the grammar
  applies from the first token); with thinking on, a logit bias on
  ``</think>`` ends it at once, so the grammar takes over after it.

Streams are compared as a client assembles them (content, reasoning, tool
call names and arguments per index, token ids, finish chunk, usage, [DONE]):
vLLM's server merges engine steps it falls behind on, which moves chunk
boundaries (tests/test_parsers_e2e.py compares chunks exactly, on the mock).
Completion streams use test_parity_completions.py's comparison.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import pytest

from harness.frontend import FrontendProcess
from tests.support.parser_diff import masked
from tests.support.vllm_parsers import VllmMultiServer, parser_flags
from tests.test_parity_completions import Shape as CompletionShape
from tests.test_parity_completions import assert_same as assert_same_completion
from tests.test_parity_completions import send

pytestmark = [pytest.mark.real_engine, pytest.mark.vllm_frontend, pytest.mark.timeout(900)]

CHAT = "/v1/chat/completions"
COMPLETIONS = "/v1/completions"
THINK_END = 1201  # </think> in the tiny model
# The random model loves whitespace, which JSON allows anywhere (and a tool
# call's structural tag does not limit): the tab, newline, CR and space
# tokens are held back so that calls end within max_tokens (where the grammar
# needs one of them, it is still the only choice).
WHITESPACE = {str(t): -100 for t in (203, 204, 207, 226)}
END_THINKING = {"logit_bias": {str(THINK_END): 100, **WHITESPACE}}
NO_THINKING = {"chat_template_kwargs": {"enable_thinking": False}, "logit_bias": WHITESPACE}
# The reasoning engines and both frontends on them: compact JSON.
SO_CONFIG = ["--structured-outputs-config",
             '{"backend": "xgrammar", "disable_any_whitespace": true}']
HI = [{"role": "user", "content": "Hi"}]

SCHEMA = {"type": "object", "properties": {"a": {"type": "integer", "minimum": 0, "maximum": 9},
                                           "b": {"enum": ["x", "y"]}},
          "required": ["a", "b"], "additionalProperties": False}
WEATHER_PARAMS = {"type": "object",
                  "properties": {"city": {"enum": ["Paris", "Oslo"]},
                                 "days": {"type": "integer", "minimum": 1, "maximum": 7}},
                  "required": ["city", "days"], "additionalProperties": False}
SEARCH_PARAMS = {"type": "object", "properties": {"q": {"enum": ["rain", "sun"]}},
                 "required": ["q"], "additionalProperties": False}
TOOLS = [
    {"type": "function", "function": {"name": "get_weather", "description": "Weather",
                                      "parameters": WEATHER_PARAMS, "strict": True}},
    {"type": "function", "function": {"name": "search", "parameters": SEARCH_PARAMS,
                                      "strict": True}},
]
NAMED = {"type": "function", "function": {"name": "search"}}
PARAMS = {"get_weather": WEATHER_PARAMS, "search": SEARCH_PARAMS}
HISTORY = [
    {"role": "user", "content": "Weather in Paris?"},
    {"role": "assistant", "content": None, "tool_calls": [
        {"id": "call_1", "type": "function",
         "function": {"name": "get_weather", "arguments": '{"city": "Paris", "days": 1}'}}]},
    {"role": "tool", "tool_call_id": "call_1", "content": "sunny"},
    {"role": "user", "content": "And search for rain."},
]


# ------------------------------------------------------------------ checks

def fits(value: Any, schema: dict) -> bool:
    """The few JSON schema rules the shapes use."""
    if "enum" in schema:
        return value in schema["enum"]
    if schema.get("type") == "integer":
        return (isinstance(value, int) and not isinstance(value, bool)
                and schema.get("minimum", value) <= value <= schema.get("maximum", value))
    if schema.get("type") == "object":
        props = schema.get("properties", {})
        return (isinstance(value, dict) and set(schema.get("required", ())) <= set(value)
                and set(value) <= set(props)
                and all(fits(v, props[k]) for k, v in value.items()))
    return True


def json_fits(text: str | None, schema: dict) -> bool:
    try:
        return fits(json.loads(text or ""), schema)
    except ValueError:
        return False


def calls_fit(message: dict, names: tuple[str, ...]) -> bool:
    calls = message.get("tool_calls") or []
    return bool(calls) and all(
        c["function"]["name"] in names
        and json_fits(c["function"]["arguments"], PARAMS[c["function"]["name"]])
        for c in calls)


Check = Callable[[dict], bool]  # of a folded answer: {"choices": {index: message}}


def content(check: Callable[[str], bool]) -> Check:
    return lambda a: all(m["finish_reason"] == "stop" and check(m["content"])
                         for m in a["choices"].values())


def texts(check: Callable[[str], bool]) -> Check:
    """Completions: every choice's text."""
    return lambda a: all(m["finish_reason"] == "stop" and check(m["text"])
                         for m in a["choices"].values())


def tool_calls(*names: str, finish: str = "tool_calls") -> Check:
    return lambda a: all(m["finish_reason"] == finish and calls_fit(m, names)
                         for m in a["choices"].values())


def regex(pattern: str) -> Callable[[str], bool]:
    return lambda t: re.fullmatch(pattern, t or "") is not None


SCHEMA_OK = content(lambda t: json_fits(t, SCHEMA))


def json_object(text: str | None) -> bool:
    try:
        return isinstance(json.loads(text or ""), dict)
    except ValueError:
        return False


# ------------------------------------------------------------------ shapes

@dataclass
class Case:
    id: str
    servers: str  # "plain", "hermes" or "pythonic"
    path: str
    body: dict
    check: Check | None = None
    status: int = 200

    @property
    def stream(self) -> bool:
        return bool(self.body.get("stream"))


def cmpl(id: str, check: Check | None = None, **body: Any) -> Case:
    payload = {"model": "tiny", "prompt": "Hi", "temperature": 0, "max_tokens": 48, **body}
    return Case(f"completions-{id}", "plain", COMPLETIONS, payload, check)


def chat(id: str, servers: str = "plain", check: Check | None = None,
         messages: list | None = None, **body: Any) -> Case:
    payload = {"model": "tiny", "messages": messages or HI, "temperature": 0,
               "max_tokens": 64 if servers == "plain" else 96, "return_token_ids": True,
               **body}
    return Case(f"chat-{servers}-{id}", servers, CHAT, payload, check)


def error(id: str, servers: str = "plain", path: str = CHAT, **body: Any) -> Case:
    payload = {"model": "tiny", "max_tokens": 8, **body}
    if path == CHAT:
        payload.setdefault("messages", HI)
    else:
        payload.setdefault("prompt", "Hi")
    return Case(f"error-{servers}-{id}", servers, path, payload, status=400)


def js(schema: Any = SCHEMA, strict: bool | None = True) -> dict:
    spec = {"name": "s", "schema": schema}
    if strict is not None:
        spec["strict"] = strict
    return {"type": "json_schema", "json_schema": spec}


def so(**fields: Any) -> dict:
    return fields


USAGE = {"include_usage": True}
TAG = {"type": "structural_tag", "format": {"type": "const_string", "value": "hello"}}
TAG_SEQUENCE = {"type": "structural_tag", "format": {"type": "sequence", "elements": [
    {"type": "const_string", "value": "n="}, {"type": "regex", "pattern": "[0-9]{2}"}]}}
TAG_LEGACY = {"type": "structural_tag", "triggers": ["<f"], "structures": [
    {"begin": "<f>", "schema": SCHEMA, "end": "</f>"}]}
EBNF = 'root ::= "a" [0-9] [0-9]'
LARK = 'start: "x" /[0-9]{2}/'
CHOICES = ["yes", "no", "maybe"]
SEEDED = {"temperature": 1.0, "seed": 7}

CASES: list[Case] = [
    # ------------------------------------------------ completions (plain servers)
    # The first constrained request fixes each engine's grammar backend: xgrammar.
    cmpl("json-schema", texts(lambda t: json_fits(t, SCHEMA)), response_format=js()),
    cmpl("json-object", texts(json_object), response_format={"type": "json_object"}),
    cmpl("so-json", texts(lambda t: json_fits(t, SCHEMA)), structured_outputs=so(json=SCHEMA)),
    cmpl("so-json-text", texts(lambda t: json_fits(t, SCHEMA)),
         structured_outputs=so(json=json.dumps(SCHEMA))),
    cmpl("regex", texts(regex("[a-z]{3}-[0-9]{2}")),
         structured_outputs=so(regex="[a-z]{3}-[0-9]{2}")),
    cmpl("choice", texts(lambda t: t in CHOICES), structured_outputs=so(choice=CHOICES)),
    cmpl("grammar-ebnf", texts(regex("a[0-9]{2}")), structured_outputs=so(grammar=EBNF)),
    cmpl("grammar-lark", texts(regex("x[0-9]{2}")), structured_outputs=so(grammar=LARK)),
    cmpl("structural-tag", texts(lambda t: t == "hello"), response_format=TAG),
    cmpl("structural-tag-sequence", texts(regex("n=[0-9]{2}")), response_format=TAG_SEQUENCE),
    cmpl("structural-tag-legacy", None, response_format=TAG_LEGACY),
    cmpl("response-format-over-so", texts(regex("[a-z]{3}-[0-9]{2}")),
         response_format={"type": "text"}, structured_outputs=so(regex="[a-z]{3}-[0-9]{2}")),
    cmpl("batch-json", texts(lambda t: json_fits(t, SCHEMA)), prompt=["Hi", "Hello there"],
         response_format=js()),
    cmpl("n2-choice", texts(lambda t: t in CHOICES), n=2, **SEEDED,
         structured_outputs=so(choice=CHOICES)),
    cmpl("stream-json", texts(lambda t: json_fits(t, SCHEMA)), stream=True,
         stream_options=USAGE, response_format=js()),
    cmpl("stream-regex", texts(regex("[a-z]{3}-[0-9]{2}")), stream=True,
         structured_outputs=so(regex="[a-z]{3}-[0-9]{2}")),
    cmpl("stream-batch-n2-grammar", texts(regex("a[0-9]{2}")), stream=True,
         prompt=["Hi", "Hello"], n=2, **SEEDED, structured_outputs=so(grammar=EBNF)),
    cmpl("logprobs-choice", texts(lambda t: t in CHOICES), logprobs=2, echo=True,
         structured_outputs=so(choice=CHOICES)),
    # ------------------------------------------------ chat (plain servers)
    chat("json-schema", check=SCHEMA_OK, response_format=js()),
    chat("json-schema-not-strict", check=SCHEMA_OK, response_format=js(strict=None)),
    # (the model writes one long key: cut at max_tokens, no check)
    chat("json-object", response_format={"type": "json_object"}),
    chat("regex", check=content(regex("[a-z]{3}-[0-9]{2}")),
         structured_outputs=so(regex="[a-z]{3}-[0-9]{2}")),
    chat("choice", check=content(lambda t: t in CHOICES), structured_outputs=so(choice=CHOICES)),
    chat("grammar-lark", check=content(regex("x[0-9]{2}")), structured_outputs=so(grammar=LARK)),
    chat("structural-tag", check=content(regex("n=[0-9]{2}")), response_format=TAG_SEQUENCE),
    chat("n2-json", check=SCHEMA_OK, n=2, **SEEDED, response_format=js()),
    chat("stream-json", check=SCHEMA_OK, stream=True, stream_options=USAGE,
         response_format=js()),
    chat("stream-n2-choice", check=content(lambda t: t in CHOICES), stream=True, n=2, **SEEDED,
         structured_outputs=so(choice=CHOICES)),
    chat("tools-none-json", check=SCHEMA_OK, tools=TOOLS, tool_choice="none",
         response_format=js()),
    chat("logprobs-regex", check=content(regex("[a-z]{3}-[0-9]{2}")), logprobs=True,
         top_logprobs=2, structured_outputs=so(regex="[a-z]{3}-[0-9]{2}")),
    chat("stream-grammar-logprobs", check=content(regex("a[0-9]{2}")), stream=True,
         logprobs=True, structured_outputs=so(grammar=EBNF)),
    # ------------------------------------------------ 400s before the engine
    error("bad-schema", response_format=js({"type": "foo"})),
    error("bad-regex", structured_outputs=so(regex="[a-")),
    error("bad-ebnf", structured_outputs=so(grammar="root ::= undefined_rule")),
    error("bad-lark", structured_outputs=so(grammar="start: (")),
    error("json-schema-missing", response_format={"type": "json_schema"}),
    error("two-constraints", structured_outputs=so(json=SCHEMA, regex="a")),
    error("empty-choice", structured_outputs=so(choice=[])),
    error("bad-response-format-type", response_format={"type": "yaml"}),
    error("bad-structural-tag", response_format={"type": "structural_tag", "format": {
        "type": "nope"}}),
    error("so-with-named-tool", tools=TOOLS, tool_choice=NAMED,
          structured_outputs=so(json=SCHEMA)),
    error("required-without-parser", tools=TOOLS, tool_choice="required"),
    error("completions-bad-regex", path=COMPLETIONS, structured_outputs=so(regex="(")),
    error("completions-two-constraints", path=COMPLETIONS,
          structured_outputs=so(regex="a", choice=["a"])),
    # ------------------------------------------------ hermes + qwen3 (reasoning engines)
    chat("required", "hermes", tool_calls("get_weather", "search"), tools=TOOLS,
         tool_choice="required", parallel_tool_calls=False, **NO_THINKING),
    chat("named", "hermes", tool_calls("search", finish="stop"), tools=TOOLS,
         tool_choice=NAMED, **NO_THINKING),
    chat("stream-required", "hermes", tool_calls("get_weather", "search"), tools=TOOLS,
         tool_choice="required", parallel_tool_calls=False, stream=True, stream_options=USAGE,
         **NO_THINKING),
    chat("stream-named", "hermes", tool_calls("search", finish="stop"), tools=TOOLS,
         tool_choice=NAMED, stream=True, **NO_THINKING),
    chat("required-after-thinking", "hermes", tool_calls("get_weather", "search"), tools=TOOLS,
         tool_choice="required", parallel_tool_calls=False, **END_THINKING),
    chat("stream-named-after-thinking", "hermes", tool_calls("search", finish="stop"),
         tools=TOOLS, tool_choice=NAMED, stream=True, stream_options=USAGE, **END_THINKING),
    chat("auto", "hermes", None, tools=TOOLS, **NO_THINKING),
    chat("auto-single-call", "hermes", None, tools=TOOLS, parallel_tool_calls=False,
         **NO_THINKING),
    chat("stream-auto-thinking", "hermes", None, tools=TOOLS, stream=True,
         stream_options=USAGE),
    chat("json-no-thinking", "hermes", SCHEMA_OK, response_format=js(), **NO_THINKING),
    chat("json-after-thinking", "hermes", SCHEMA_OK, response_format=js(), **END_THINKING),
    chat("stream-json-after-thinking", "hermes", SCHEMA_OK, response_format=js(), stream=True,
         stream_options=USAGE, **END_THINKING),
    chat("json-while-thinking", "hermes", None, response_format=js()),
    # include_reasoning=false: the grammar starts at once (no </think> then),
    # and qwen3 reads the whole output as (hidden) reasoning, as in vLLM.
    chat("json-hidden-reasoning", "hermes",
         lambda a: all(m["content"] is None and m["reasoning"] is None
                       for m in a["choices"].values()),
         response_format=js(), include_reasoning=False, **END_THINKING),
    chat("choice-tools-auto", "hermes", None, tools=TOOLS, structured_outputs=so(choice=CHOICES),
         **NO_THINKING),
    chat("required-n2", "hermes", tool_calls("get_weather", "search"), tools=TOOLS,
         tool_choice="required", parallel_tool_calls=False, n=2, **SEEDED, **NO_THINKING),
    chat("history-named", "hermes", tool_calls("search", finish="stop"), messages=HISTORY,
         tools=TOOLS, tool_choice=NAMED, **NO_THINKING),
    error("unknown-named-tool", "hermes", tools=TOOLS,
          tool_choice={"type": "function", "function": {"name": "nope"}}),
    error("so-with-named-tool", "hermes", tools=TOOLS, tool_choice=NAMED,
          structured_outputs=so(regex="a")),
    # ------------------------------------------------ pythonic + qwen3: JSON-schema calls
    chat("required", "pythonic", tool_calls("get_weather", "search"), tools=TOOLS,
         tool_choice="required", parallel_tool_calls=False, **NO_THINKING),
    chat("named", "pythonic", tool_calls("search", finish="stop"), tools=TOOLS,
         tool_choice=NAMED, **NO_THINKING),
    chat("stream-required", "pythonic", tool_calls("get_weather", "search"), tools=TOOLS,
         tool_choice="required", parallel_tool_calls=False, stream=True, **NO_THINKING),
    chat("stream-named", "pythonic", tool_calls("search", finish="stop"), tools=TOOLS,
         tool_choice=NAMED, stream=True, stream_options=USAGE, **NO_THINKING),
    chat("named-after-thinking", "pythonic", tool_calls("search", finish="stop"), tools=TOOLS,
         tool_choice=NAMED, **END_THINKING),
    chat("history-required", "pythonic", tool_calls("get_weather", "search"),
         messages=HISTORY, tools=TOOLS, tool_choice="required", parallel_tool_calls=False,
         **NO_THINKING),
    chat("stream-required-after-thinking", "pythonic", tool_calls("get_weather", "search"),
         tools=TOOLS, tool_choice="required", parallel_tool_calls=False, stream=True,
         **END_THINKING),
]
SERVERS = {"hermes": parser_flags("hermes", "qwen3") + SO_CONFIG,
           "pythonic": parser_flags("pythonic", "qwen3") + SO_CONFIG}


# ------------------------------------------------------------------ servers

class ReasoningServers:
    """Two engines with ``--reasoning-parser qwen3`` and compact JSON: vLLM's
    server (every flag set of SERVERS) on one, ours on the other (restarted
    per flag set)."""

    def __init__(self, start_real_engine, model_dir: Path, workdir: Path) -> None:
        self.model_dir, self.workdir = model_dir, workdir
        self.our_engine = start_real_engine("--reasoning-parser", "qwen3", *SO_CONFIG)
        their_engine = start_real_engine("--reasoning-parser", "qwen3", *SO_CONFIG)
        port = int(their_engine.handshake_addr.rsplit(":", 1)[1])
        self.vllm = VllmMultiServer(model_dir, port, SERVERS, workdir / "vllm.log",
                                    watch=[their_engine])
        self.name: str | None = None
        self.ours: FrontendProcess | None = None

    def our_url(self, name: str) -> str:
        if name != self.name:
            if self.ours is not None:
                self.ours.stop()
            self.ours = FrontendProcess(self.our_engine.handshake_addr, self.model_dir,
                                        self.workdir, *SERVERS[name],
                                        state_file=self.workdir / "engine.state")
            self.ours.wait_healthy()
            self.name = name
        return self.ours.url

    def close(self) -> None:
        if self.ours is not None:
            self.ours.stop()
        self.vllm.stop()


@pytest.fixture(scope="module")
def reasoning_servers(start_real_engine, tiny_model_dir, tmp_path_factory):
    servers = ReasoningServers(start_real_engine, tiny_model_dir,
                               tmp_path_factory.mktemp("reasoning-servers"))
    yield servers
    servers.close()


def urls(case: Case, request) -> tuple[str, str]:
    if case.servers == "plain":
        return (request.getfixturevalue("frontend").url,
                request.getfixturevalue("vllm_frontend").url)
    servers = request.getfixturevalue("reasoning_servers")
    return servers.our_url(case.servers), servers.vllm.url(case.servers)


# ------------------------------------------------------------------ comparison

def fold_chat(events: list[Any]) -> dict:
    """A chat stream as the client assembles it, per choice: role, content,
    reasoning, tool calls (names, arguments), token ids, finish fields; and
    the other events (usage, [DONE])."""
    choices: dict[int, dict] = {}
    other = []
    for event in events:
        if not isinstance(event, dict) or len(event.get("choices") or ()) != 1:
            other.append(masked(event))
            continue
        ch = event["choices"][0]
        c = choices.setdefault(ch["index"], {"role": None, "content": None, "reasoning": None,
                                             "tool_calls": [], "token_ids": [],
                                             "finish_reason": None, "stop_reason": None})
        delta = ch["delta"]
        if "role" in delta:
            c["role"] = delta["role"]
            continue
        for key in ("content", "reasoning"):
            if delta.get(key):
                c[key] = (c[key] or "") + delta[key]
        for call in delta.get("tool_calls", []):
            while len(c["tool_calls"]) <= call["index"]:
                c["tool_calls"].append({"id": None, "type": None,
                                        "function": {"name": None, "arguments": ""}})
            slot = c["tool_calls"][call["index"]]
            if call.get("id"):
                slot["id"] = "<id>"
            slot["type"] = call.get("type") or slot["type"]
            function = call.get("function") or {}
            slot["function"]["name"] = function.get("name") or slot["function"]["name"]
            slot["function"]["arguments"] += function.get("arguments") or ""
        c["token_ids"] += ch.get("token_ids") or []
        if ch["finish_reason"] is not None:
            c["finish_reason"], c["stop_reason"] = ch["finish_reason"], ch.get("stop_reason")
    return {"choices": choices, "other": other}


def merged_steps(events: list[Any]) -> bool:
    """A chunk of several engine steps (vLLM's server fell behind)."""
    return any(isinstance(e, dict) and len(e.get("choices") or ()) == 1
               and len(e["choices"][0].get("token_ids") or ()) > 1 for e in events)


def answer_of(case: Case, reply) -> dict:
    """The answer as the checks read it: {"choices": {index: message-like}}."""
    if case.stream:
        if case.path == CHAT:
            return fold_chat(reply.events)
        folded: dict[int, dict] = {}
        for event in reply.events:
            if isinstance(event, dict) and len(event.get("choices") or ()) == 1:
                ch = event["choices"][0]
                c = folded.setdefault(ch["index"], {"text": "", "finish_reason": None})
                c["text"] += ch["text"]
                c["finish_reason"] = ch["finish_reason"] or c["finish_reason"]
        return {"choices": folded}
    body = reply.json()
    if case.path == CHAT:
        return {"choices": {c["index"]: {**c["message"], "finish_reason": c["finish_reason"]}
                            for c in body["choices"]}}
    texts_of = {c["index"]: {"text": c["text"], "finish_reason": c["finish_reason"]}
                for c in body["choices"]}
    if case.body.get("echo"):
        prompt = case.body["prompt"]
        for c in texts_of.values():
            c["text"] = c["text"][len(prompt):]
    return {"choices": texts_of}


def assert_same_chat(ours, theirs) -> None:
    assert ours.status == theirs.status, (ours.body[:2000], theirs.body[:2000])
    if theirs.status >= 400:
        mine, other = ours.json()["error"], theirs.json()["error"]
        assert mine == other, f"ours: {mine}\nvLLM: {other}"
        return
    if theirs.events is not None:
        assert ours.events is not None and ours.events[-1] == "[DONE]"
        mine, other = fold_chat(ours.events), fold_chat(theirs.events)
        if merged_steps(theirs.events):
            # vLLM's engine-based reasoning parsers count reasoning tokens from
            # what they were fed; fed merged steps, the count moves.
            for folded in (mine, other):
                for event in folded["other"]:
                    if isinstance(event, dict) and "usage" in event:
                        event["usage"].pop("completion_tokens_details", None)
        assert mine == other, f"ours: {ours.events}\nvLLM: {theirs.events}"
        return
    assert masked(ours.json()) == masked(theirs.json()), (
        f"ours: {ours.json()}\nvLLM: {theirs.json()}")


def test_enough_shapes() -> None:
    ids = [c.id for c in CASES]
    assert len(ids) == len(set(ids))
    generation = [c for c in CASES if c.status == 200]
    assert len(generation) >= 40 and len(CASES) >= 60
    assert sum(c.stream for c in generation) >= 12
    assert sum(c.check is not None for c in generation) >= 35


# (the plain cases get the session's servers by name, in urls())
PLAIN_SERVERS = pytest.mark.session_engines("real_stack", "vllm_frontend")


@pytest.mark.parametrize(
    "case",
    [pytest.param(c, id=c.id, marks=PLAIN_SERVERS if c.servers == "plain" else ()) for c in CASES],
)
def test_parity(case: Case, request) -> None:
    our_url, their_url = urls(case, request)
    shape = CompletionShape(case.id, case.path, case.body)
    theirs = send(their_url, shape)
    ours = send(our_url, shape)
    if case.path == COMPLETIONS:
        assert_same_completion(shape, ours, theirs)
    else:
        assert_same_chat(ours, theirs)
    assert ours.status == case.status, ours.body[:2000]
    if case.check is not None:
        answer = answer_of(case, ours)
        assert case.check(answer), answer
    if case.servers != "plain":  # (the frontend fixture checks the plain one)
        request.getfixturevalue("reasoning_servers").ours.wait_idle()
