"""Every tool-call and reasoning parser, end to end: our frontend against vLLM's.

The parser modules are compared with vLLM's parser classes in process
(test_tool_parsers.py, test_reasoning_parsers.py); here the same outputs go
through both HTTP servers: vLLM 0.32's own API server (one process serving
every parser flag set, tests/support/vllm_multi_server.py) and ours, each on a
mock engine that plays the same script (the case's text as token ids, then
EOS), so both parse identical token streams. Per case, a non-streaming and a
streaming request (with usage) go to both; the answers must be equal as parsed
JSON, chunk by chunk for streams: reasoning, content, tool calls (ids
masked), finish_reason, usage with reasoning tokens. Malformed and partial
tool calls included: they come back as content, never as an error.

For vLLM's streams the mock steps every few milliseconds, so that vLLM's
server keeps up with the engine: when it falls behind it merges steps into one
chunk and parses them together, which changes the chunks; such a stream of
vLLM's is asked for again. Everything else runs on unpaced steps: a
non-streamed answer is the whole output however it was stepped, and ours never
merges a parsed choice's steps (each stream of ours is checked for that).
"""

from __future__ import annotations

import concurrent.futures
import json
import sys
from typing import Any

import pytest
from tokenizers import Tokenizer

from harness.frontend import launch_mock_stack
from tests.support import reasoning_cases_g3
from tests.support.http_client import post
from frontend.parsers import registry
from tests.support.marker_model import MARKERS
from tests.support.more_tool_cases import MORE_CASES
from tests.support.parser_diff import Case, masked, tokenizer_dir
from tests.support.vllm_parsers import on_scripted_mock, parser_flags
from tests.test_reasoning_parsers import COMMON, FAMILY, FAMILY_TOKENS, IN_PROCESS_ONLY, MISTRAL
from tests.test_tool_parsers import CASES, WITH_REASONING

pytestmark = [pytest.mark.vllm_frontend, pytest.mark.timeout(900)]

# The mocks' step time but for vLLM's streams: none.
UNPACED = 0.0
# vLLM's mock's step time for each attempt at a stream it does not merge.
STREAM_STEP_TIMES = (0.008, 0.03, 0.08, 0.2)

# A selection of the in-process cases (they run there in full, in every
# chunking): per parser the calls, text around them, malformed and partial
# calls, forced choices; per reasoning parser the markers, hidden reasoning and
# prompts that already end the reasoning.
TOOL_CASES = {
    "hermes": ["plain", "two-calls", "text-after", "truncated", "malformed-json",
               "second-malformed", "partial-tag-at-end", "unicode-args", "required", "named",
               "choice-none", "no-eos"],
    "llama3_json": ["one-call", "python-tag", "two-calls", "truncated", "malformed",
                    "brace-in-text", "unicode", "named", "required"],
    "pythonic": ["one-call", "two-calls", "literals", "truncated", "mismatched", "text-after",
                 "required", "required-malformed", "named"],
    "qwen3_coder": ["one-call", "typed", "two-calls", "truncated", "no-param-close", "unicode",
                    "think-as-content", "required"],
    "mistral": ["one-call", "text-before", "two-calls", "truncated", "nested-strings",
                "skipped-special", "required"],
}
REASONING_CASES = ["tags", "no-start", "no-end", "twice", "unicode", "hidden", "no-eos",
                   "prompt-opened", "prompt-closed", "partial-end-tag"]
COMBINED = ["qwen3-hermes", "qwen3-hermes-implicit", "r1-hermes-no-start",
            "qwen3-hermes-no-thinking", "qwen3-hermes-hidden", "qwen3-coder",
            "qwen3-coder-implicit", "r1-pythonic", "r1-llama", "qwen3-mistral", "r1-mistral"]

# One parser per grammar (frontend/parsers/grammar/<model>.py, vLLM's
# declarative parsers): a tool parser on its MORE_CASES, else a reasoning
# parser on its own and the common reasoning cases. The tokenizer has every
# family's marker tokens.
GRAMMAR_TOOL_CASES = ["one-call", "two-calls", "text-before", "text-around", "truncated",
                      "malformed", "unicode", "required"]
MACHINERY = {"lexer", "machine", "parser"}


def grammar_of(cls: type) -> str | None:
    """The grammar module a grammar parser's module builds its parser from."""
    if not cls.grammar_based:
        return None
    used = {getattr(value, "__module__", "") for value in vars(sys.modules[cls.__module__]).values()}
    grammars = {m.rsplit(".", 1)[1] for m in used if m.startswith("frontend.parsers.grammar.")}
    [grammar] = grammars - MACHINERY or {None}
    return grammar


def grammar_runs() -> dict[str, list[Case]]:
    """config name -> cases, one parser per grammar not run by the sets above."""
    runs: dict[str, list[Case]] = {}
    seen = {"mistral", "qwen3"}  # run above (mistral's tool parser, qwen3's reasoning)
    for name in sorted(MORE_CASES):
        grammar = grammar_of(registry.tool_parser_class(name))
        if grammar and grammar not in seen:
            seen.add(grammar)
            runs[name] = [c for c in MORE_CASES[name] if c.id in GRAMMAR_TOOL_CASES]
    for name in sorted(FAMILY):
        grammar = grammar_of(registry.reasoning_parser_class(name))
        if grammar and grammar not in seen:
            seen.add(grammar)
            runs[f"reasoning-{name}"] = [c for c in COMMON if c.id in REASONING_CASES[:6]] \
                + FAMILY[name][1][:3]
    runs.update(reasoning_cases_g3.E2E_RUNS)
    return runs


GRAMMAR_RUNS = grammar_runs()

RUNS: list[tuple[str, Case]] = [
    *((tool, case) for tool, cases in CASES.items() for case in cases
      if case.id in TOOL_CASES[tool]),
    *((f"{tool}+{reasoning}", case) for tool, reasoning, case in WITH_REASONING
      if case.id in COMBINED),
    *((name, case) for name in ("deepseek_r1", "qwen3") for case in COMMON
      if case.id in REASONING_CASES),
    *(("mistral+mistral", case) for case in MISTRAL[:2]),
    *((name, case) for name, cases in GRAMMAR_RUNS.items() for case in cases),
]
# name -> (tool parser, reasoning parser)
PARSERS = {**{tool: (tool, None) for tool in CASES},
           **{f"{tool}+{reasoning}": (tool, reasoning) for tool, reasoning, _ in WITH_REASONING},
           "deepseek_r1": (None, "deepseek_r1"), "qwen3": (None, "qwen3"),
           "mistral+mistral": ("mistral", "mistral"),
           **{name: (None, name.removeprefix("reasoning-")) if name.startswith("reasoning-")
              else (name, None) for name in GRAMMAR_RUNS}}
CONFIGS = {name: PARSERS[name] for name in dict.fromkeys(name for name, _ in RUNS)}


@pytest.fixture(scope="module")
def model_dir(tiny_model_dir, tmp_path_factory):
    """The tiny model's files, its tokenizer with every family's marker tokens
    (in its vocabulary: the mock plays only ids below ``vocab_size``)."""
    path = tokenizer_dir(tiny_model_dir, tmp_path_factory.mktemp("markers"),
                         {**dict(MARKERS), **FAMILY_TOKENS})
    config = json.loads((path / "config.json").read_text())
    config["vocab_size"] = Tokenizer.from_file(str(path / "tokenizer.json")).get_vocab_size()
    (path / "config.json").write_text(json.dumps(config))
    return path


@pytest.fixture(scope="module")
def tokenizer(model_dir) -> Tokenizer:
    return Tokenizer.from_file(str(model_dir / "tokenizer.json"))


@pytest.fixture(scope="module")
def vllm_servers(model_dir, tmp_path_factory):
    """vLLM's API server with every parser flag set, on one scripted mock."""
    configs = {name: parser_flags(*flags) for name, flags in CONFIGS.items()}
    with on_scripted_mock(model_dir, configs, tmp_path_factory.mktemp("vllm-parsers"),
                          str(UNPACED)) as pair:
        yield pair


class OurStacks:
    """Our frontend with one parser flag set at a time, each on its own mock
    (the runs come grouped by flag set)."""

    def __init__(self, model_dir, workdir) -> None:
        self.model_dir, self.workdir = model_dir, workdir
        self.name: str | None = None
        self.stack = None

    def get(self, name: str):
        if name != self.name:
            self.close()
            self.stack = launch_mock_stack(self.model_dir, self.workdir,
                                           *parser_flags(*CONFIGS[name]))
            self.name = name
        return self.stack

    def close(self) -> None:
        if self.stack is not None:
            self.stack.stop()
            self.stack = self.name = None


@pytest.fixture(scope="module")
def ours(model_dir, tmp_path_factory):
    stacks = OurStacks(model_dir, tmp_path_factory.mktemp("our-parsers"))
    yield stacks
    stacks.close()


def body_of(case: Case, max_tokens: int, stream: bool) -> dict[str, Any]:
    messages: list[dict] = [{"role": "user", "content": "hi"}]
    body: dict[str, Any] = {"model": "tiny", "max_tokens": max_tokens, "temperature": 0,
                            "return_token_ids": True,
                            "skip_special_tokens": case.skip_special,
                            "include_reasoning": case.include_reasoning}
    if case.prompt_suffix:  # the prompt ends inside the assistant turn, as the parsers expect
        messages.append({"role": "assistant", "content": case.prompt_suffix})
        body.update(add_generation_prompt=False, continue_final_message=True)
    if case.tools is not None:
        body.update(tools=case.tools, tool_choice=case.tool_choice)
    if case.chat_template_kwargs is not None:
        body["chat_template_kwargs"] = case.chat_template_kwargs
    if stream:
        body.update(stream=True, stream_options={"include_usage": True})
    return {**body, "messages": messages}


def events(body: bytes) -> list[Any]:
    out = []
    for block in body.decode().split("\n\n"):
        if block.startswith("data: "):
            data = block[6:]
            out.append(data if data == "[DONE]" else masked(json.loads(data)))
    return out


def merged_steps(events: list[Any]) -> bool:
    """Whether a stream has a chunk of several engine steps (one token each
    here): vLLM's server merges the steps it falls behind on."""
    return any(isinstance(e, dict) and e["choices"]
               and len(e["choices"][0].get("token_ids") or ()) > 1 for e in events)


def vllm_merged(ours: list[Any], theirs: list[Any]) -> bool:
    """vLLM parsed some steps together (so its chunks differ by design). With
    token ids hidden (include_reasoning=false) merging shows as fewer chunks."""
    hidden = not any(isinstance(e, dict) and e["choices"] and e["choices"][0].get("token_ids")
                     for e in theirs)
    return merged_steps(theirs) or (hidden and len(theirs) != len(ours))


def ask(url: str, body: dict) -> tuple[int, Any]:
    reply = post(url, "/v1/chat/completions", body, timeout=120)
    if body.get("stream") and reply.status == 200:
        return reply.status, events(reply.body)
    return reply.status, masked(reply.json)


@pytest.mark.parametrize("config, case", RUNS, ids=[f"{n}-{c}" for n, c in RUNS])
def test_parser_end_to_end_matches_vllm(vllm_servers, ours, tokenizer, config, case):
    server, their_control = vllm_servers
    their_url = server.url(config)  # (the mock answers control calls once attached)
    stack = ours.get(config)
    ids = tokenizer.encode(case.text, add_special_tokens=False).ids
    script = {"output_token_ids": ids, "finish": "stop" if case.eos else "length"}
    their_control.script(script)
    stack.control().script(script)
    max_tokens = len(ids) + 1 if case.eos else len(ids)
    body = body_of(case, max_tokens, stream=False)
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        theirs = pool.submit(ask, their_url, body)
        status, answer = ask(stack.url, body)
        their_status, their_answer = theirs.result()
    assert (status, their_status) == (200, 200), (answer, their_answer)
    assert answer == their_answer, f"ours: {answer}\nvLLM: {their_answer}"

    # Streams one at a time: vLLM's server falls behind less.
    body = body_of(case, max_tokens, stream=True)
    answer = our_stream(stack.url, body)
    try:
        for step_time in STREAM_STEP_TIMES:
            # Slower after a merged stream, so that vLLM's server keeps up.
            their_answer = their_stream(their_url, their_control, body, step_time)
            if not vllm_merged(answer, their_answer):
                break
        else:
            pytest.fail(f"vLLM's server merged steps in {len(STREAM_STEP_TIMES)} streams: "
                        "nothing to compare with")
    finally:
        their_control.configure(step_time=UNPACED)
    assert answer == their_answer, f"ours: {answer}\nvLLM: {their_answer}"
    stack.frontend.wait_idle()


def our_stream(url: str, body: dict) -> list[Any]:
    status, answer = ask(url, body)
    assert status == 200 and not merged_steps(answer), answer  # ours: every step parsed
    return answer


def their_stream(url: str, control, body: dict, step_time: float) -> list[Any]:
    control.configure(step_time=step_time)
    status, answer = ask(url, body)
    assert status == 200, answer
    return answer


SLOW_CHECK_CONFIGS = ("hermes", "qwen3")


def test_vllm_merges_no_steps_when_it_keeps_up(vllm_servers, ours, tokenizer):
    """What the retries above rely on: vLLM's server merges steps only when it
    falls behind, so at the slowest step time its stream is every step, as
    ours is. On its own: a tool-call case and a reasoning case."""
    server, their_control = vllm_servers
    for config in SLOW_CHECK_CONFIGS:
        their_url = server.url(config)  # (the mock answers control calls once attached)
        case = next(case for name, case in RUNS if name == config and case.eos)
        ids = tokenizer.encode(case.text, add_special_tokens=False).ids
        script = {"output_token_ids": ids, "finish": "stop"}
        their_control.script(script)
        stack = ours.get(config)
        stack.control().script(script)
        body = body_of(case, len(ids) + 1, stream=True)
        answer = our_stream(stack.url, body)
        try:
            theirs = their_stream(their_url, their_control, body, STREAM_STEP_TIMES[-1])
        finally:
            their_control.configure(step_time=UNPACED)
        assert not vllm_merged(answer, theirs), theirs
        assert answer == theirs, f"ours: {answer}\nvLLM: {theirs}"
        stack.frontend.wait_idle()


def test_runs_cover_every_parser():
    from frontend.parsers import REASONING_PARSERS, TOOL_PARSERS

    used = {flags for flags in CONFIGS.values()}
    tools = {tool for tool, _ in used if tool}
    reasoning = {r for _, r in used if r}
    # The five first formats, and one parser per grammar; aliases (qwen3_json,
    # llama4_json, qwen3_xml) are the same classes.
    assert tools - set(GRAMMAR_RUNS) == {"hermes", "llama3_json", "mistral", "pythonic",
                                         "qwen3_coder"}
    # Every other parser is compared with vLLM's in process (test_tool_parsers.py's
    # MORE_CASES, test_reasoning_parsers.py's IN_PROCESS_ONLY).
    run_here = {TOOL_PARSERS[t] for t in tools}
    in_process = {TOOL_PARSERS[t] for t in MORE_CASES}
    assert {TOOL_PARSERS[t] for t in TOOL_PARSERS} == run_here | in_process
    assert reasoning | IN_PROCESS_ONLY == set(REASONING_PARSERS)
    # Every grammar some parser runs is run here by one of them.
    grammars = {grammar_of(cls) for cls in
                [*map(registry.tool_parser_class, TOOL_PARSERS),
                 *map(registry.reasoning_parser_class, REASONING_PARSERS)]} - {None}
    run = {grammar_of(registry.tool_parser_class(t)) for t in tools} | {
        grammar_of(registry.reasoning_parser_class(r)) for r in reasoning}
    assert grammars <= run, sorted(grammars - run)
    assert all(GRAMMAR_RUNS.values()), GRAMMAR_RUNS  # (a renamed case would drop out silently)
    selected = sum(len(ids) for ids in TOOL_CASES.values()) + len(COMBINED) \
        + 2 * len(REASONING_CASES) + 2 + sum(map(len, GRAMMAR_RUNS.values()))
    assert len(RUNS) == selected >= 100
