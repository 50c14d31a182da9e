"""The chat request's tool, reasoning and structured-output plumbing against
vLLM 0.32's own code, in process (frontend/openai/tooling.py).

* ``check_tool_usage`` and the field validation of ``tools``: the same
  verdicts as vLLM's ``ChatCompletionRequest`` (message and param for the
  validator's errors; status and param for the field errors);
* the tools the chat template sees: vLLM's ``tool.model_dump()``;
* the chat template kwargs the parsers and the engine's reasoning parser get:
  vLLM's ``build_chat_params(...).chat_template_kwargs``;
* tool_choice="auto" with strict tools and the request's own constraint: the
  structural tag vLLM's ``adjust_request`` builds (tool call or output).
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from frontend import structured as so
from frontend.errors import ApiError
from frontend.openai import tooling
from protocol.wire import FinishReason

LENGTH = FinishReason.LENGTH

TOOL = {"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}
STRICT = [
    {"type": "function", "function": {"name": "get_weather", "strict": True, "parameters": {
        "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}},
    {"type": "function", "function": {"name": "search", "description": "Search"}},
]
NAMED = {"type": "function", "function": {"name": "f"}}


def vllm_request(body: dict) -> Any:
    from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionRequest

    return ChatCompletionRequest(**{"model": "m", "messages": [{"role": "user", "content": "x"}],
                                    **body})


def vllm_outcome(body: dict) -> tuple:
    """("ok", tool_choice, tools dump) or ("error", param, message) as vLLM's
    server would answer."""
    from pydantic import ValidationError
    from vllm.exceptions import VLLMValidationError

    try:
        req = vllm_request(body)
    except VLLMValidationError as e:  # a model validator's error, as the server says it
        return ("error", e.parameter, str(e))
    except ValidationError as e:
        first = e.errors()[0]
        if first["type"] == "value_error" and "ctx" in first:  # a model validator's error
            cause = first["ctx"]["error"]
            return ("error", getattr(cause, "parameter", None), str(cause))
        return ("schema", "body." + ".".join(str(p) for p in first["loc"]))
    choice = req.tool_choice
    if hasattr(choice, "model_dump"):
        choice = choice.model_dump()
    tools = None if req.tools is None else [t.model_dump() for t in req.tools]
    return ("ok", choice, tools)


def our_outcome(body: dict) -> tuple:
    try:
        choice = tooling.check_tool_usage(body.get("tools"), body.get("tool_choice"),
                                          tool_choice_set="tool_choice" in body)
        tools = tooling.normalize_tools(body.get("tools"))
        tooling.check_named_tool_choice(choice)
    except ApiError as e:
        if e.err_type == "Bad Request":  # a field (schema) error
            return ("schema", e.param)
        return ("error", e.param, e.message)
    return ("ok", choice, tools)


BODIES = {
    "no-tools": {},
    "tools-default-auto": {"tools": [TOOL]},
    "tools-none": {"tools": [TOOL], "tool_choice": "none"},
    "tools-required": {"tools": [TOOL], "tool_choice": "required"},
    "tools-null-choice": {"tools": [TOOL], "tool_choice": None},
    "named": {"tools": [TOOL], "tool_choice": NAMED},
    "named-unknown": {"tools": [TOOL], "tool_choice": {"type": "function",
                                                       "function": {"name": "g"}}},
    "named-no-function": {"tools": [TOOL], "tool_choice": {"type": "function"}},
    "named-function-not-object": {"tools": [TOOL], "tool_choice": {"function": "f"}},
    "named-no-name": {"tools": [TOOL], "tool_choice": {"function": {}}},
    "named-empty-name": {"tools": [TOOL], "tool_choice": {"function": {"name": ""}}},
    "named-number-name": {"tools": [TOOL], "tool_choice": {"function": {"name": 3}}},
    "choice-without-tools": {"tool_choice": "auto"},
    "choice-bad-string": {"tools": [TOOL], "tool_choice": "always"},
    "empty-tools": {"tools": []},
    "tools-full": {"tools": [STRICT[0], {**STRICT[1], "defer_loading": True},
                             {"function": {"name": "h", "description": None,
                                           "defer_loading": False}}]},
    "tool-missing-function": {"tools": [{"type": "function"}]},
    "tool-missing-name": {"tools": [{"type": "function", "function": {}}]},
    "tool-bad-type": {"tools": [{"type": "custom", "function": {"name": "f"}}]},
    "tool-parameters-not-object": {"tools": [{"function": {"name": "f", "parameters": [1]}}]},
    "tool-name-not-string": {"tools": [{"function": {"name": 1}}], "tool_choice": "none"},
}


@pytest.mark.parametrize("name", BODIES)
def test_tool_fields_match_vllm(name):
    body = BODIES[name]
    assert our_outcome(body) == vllm_outcome(body)


@pytest.mark.parametrize("kwargs", [
    {},
    {"chat_template_kwargs": {"enable_thinking": False, "x": None}},
    {"reasoning_effort": "low"},
    {"reasoning_effort": "none", "chat_template_kwargs": {"enable_thinking": True}},
    {"documents": [{"title": "t", "text": "x"}], "add_generation_prompt": False,
     "continue_final_message": True, "chat_template_kwargs": {"custom": "auto"}},
])
def test_parser_template_kwargs_match_vllm(kwargs):
    request = vllm_request(kwargs)
    theirs = request.build_chat_params(None, "auto").chat_template_kwargs
    ours = tooling.parser_template_kwargs(
        kwargs.get("chat_template_kwargs"),
        add_generation_prompt=kwargs.get("add_generation_prompt", True),
        continue_final_message=kwargs.get("continue_final_message", False),
        documents=kwargs.get("documents"), reasoning_effort=kwargs.get("reasoning_effort"))
    assert ours == theirs and list(ours) == list(theirs)


# ---------------------------------------------------------------- auto + strict + own constraint

OWN = {
    "json": {"structured_outputs": {"json": {"type": "object", "properties": {
        "a": {"type": "integer"}}}}},
    "json-text": {"structured_outputs": {"json": '{"type": "array"}'}},
    "json-object": {"response_format": {"type": "json_object"}},
    "json-schema": {"response_format": {"type": "json_schema", "json_schema": {
        "name": "s", "schema": {"type": "string"}}}},
    "regex": {"structured_outputs": {"regex": "[a-z]+"}},
    "choice": {"structured_outputs": {"choice": ["yes", "no"]}},
    "ebnf": {"structured_outputs": {"grammar": 'root ::= "a" "b"'}},
    "xgrammar-cannot": {"structured_outputs": {"regex": "\\p{L}+"}},
}


@pytest.fixture(scope="module")
def parsers(tiny_model_dir):
    from frontend.model import load_model_info
    from frontend.parsers import ChatParsers, ParserTokenizer

    tokenizer = ParserTokenizer.from_model(load_model_info(str(tiny_model_dir)))
    return {name: ChatParsers(tokenizer, tool_parser=name)
            for name in ("hermes", "llama3_json", "qwen3_coder")}


@pytest.fixture(scope="module")
def vtok(tiny_model_dir):
    from vllm.tokenizers import get_tokenizer

    return get_tokenizer(str(tiny_model_dir))


def vllm_adjusted(parser: str, body: dict, vtok) -> Any:
    from vllm.parser import ParserManager

    request = vllm_request(body)
    cls = ParserManager.get_parser(tool_parser_name=parser, enable_auto_tools=True,
                                   tokenizer=vtok)
    return cls(vtok, request.tools).adjust_request(request)


@pytest.mark.parametrize("parser", ["hermes", "llama3_json", "qwen3_coder"])
@pytest.mark.parametrize("parallel", [True, False])
@pytest.mark.parametrize("own", OWN)
def test_auto_strict_tools_with_own_constraint_match_vllm(parsers, vtok, parser, parallel, own):
    body = {"tools": STRICT, "tool_choice": "auto", "parallel_tool_calls": parallel, **OWN[own]}
    theirs = vllm_adjusted(parser, json.loads(json.dumps(body)), vtok)
    rf, sop = body.get("response_format"), body.get("structured_outputs")
    plan = tooling.plan(parsers[parser], tools=tooling.normalize_tools(STRICT),
                        tool_choice="auto", parallel_tool_calls=parallel,
                        include_reasoning=True, response_format=rf, structured_outputs=sop,
                        constraints=so.parse(rf, sop), template_kwargs={},
                        prompt_token_ids=[1, 2])
    if theirs.structured_outputs is not None and theirs.structured_outputs.structural_tag:
        assert plan.constraints.structured_outputs == {
            "structural_tag": theirs.structured_outputs.structural_tag}
        assert plan.constraints.override is None and theirs.response_format is None
    else:  # vLLM keeps the request's own constraint (xgrammar cannot compile it)
        assert own == "xgrammar-cannot"
        assert plan.constraints == so.parse(rf, sop)


def test_auto_strict_tools_with_a_lark_grammar_is_refused(parsers):
    sop = {"grammar": 'start: "a"'}
    with pytest.raises(ApiError, match="Lark grammar"):
        tooling.plan(parsers["hermes"], tools=tooling.normalize_tools(STRICT),
                     tool_choice="auto", parallel_tool_calls=True, include_reasoning=True,
                     response_format=None, structured_outputs=sop,
                     constraints=so.parse(None, sop), template_kwargs={},
                     prompt_token_ids=[1])


# ---------------------------------------------------------------- the fan-out table's hook

@pytest.fixture(scope="module")
def model(tiny_model_dir):
    from frontend.model import load_model_info

    return load_model_info(str(tiny_model_dir), served_names=["tiny"])


def parsed_choice(model, parser, **fields):
    from tests.test_fanout_merge import streaming_choice

    state, group, choice, _, _ = streaming_choice(model, **fields)
    choice.parser = parser
    return state, group, choice


def test_parsed_steps_are_never_merged(model):
    """vLLM parses each engine output on its own: steps that wait for a lagging
    client stay separate deltas, each parsed once, in order."""
    from tests.test_fanout_merge import step, tokens_of

    seen: list[tuple[str, list[int], bool]] = []

    def parser(delta):
        seen.append((delta.text, list(delta.token_ids), delta.finish_reason is not None))
        return f"parsed {len(seen)}"

    state, group, choice = parsed_choice(model, parser)
    toks = tokens_of(model, " the river and the ocean")
    state.table.on_outputs([step(choice.engine_id, t) for t in toks[:3]])
    state.table.on_outputs([step(choice.engine_id, toks[3], finish=LENGTH)])  # the client lags
    deltas = group.take()
    assert [d.token_ids for d in deltas] == [[t] for t in toks[:4]]
    assert [d.parsed for d in deltas] == ["parsed 1", "parsed 2", "parsed 3", "parsed 4"]
    assert [s[1] for s in seen] == [[t] for t in toks[:4]]
    assert [s[2] for s in seen] == [False, False, False, True]
    assert "".join(s[0] for s in seen) == model.decode(toks[:4])
    assert not state.table.entries


def test_stream_interval_steps_are_parsed_together(model):
    """With stream_interval vLLM's output processor joins the steps before its
    serving layer parses them: one parse per emitted delta."""
    from tests.test_fanout_merge import step, tokens_of

    seen: list[list[int]] = []
    state, group, choice = parsed_choice(
        model, lambda d: seen.append(list(d.token_ids)), stream_interval=3)
    toks = tokens_of(model, " the river and the ocean meets the sky at night")[:7]
    for i, t in enumerate(toks):
        state.table.on_outputs([step(choice.engine_id, t, finish=LENGTH if i == 6 else None)])
    assert seen == [toks[:1], toks[1:4], toks[4:7]]
    group.take()


def test_a_parser_error_fails_the_request_not_the_reader(model):
    from tests.test_fanout_merge import step, tokens_of

    def broken(delta):
        raise RuntimeError("parser bug")

    state, group, choice = parsed_choice(model, broken)
    other_state, other_group, other = parsed_choice(model, lambda d: d.text)
    toks = tokens_of(model, " the river")
    state.table.on_outputs([step(choice.engine_id, toks[0])])
    assert group.error is not None and group.error.status == 500
    assert not state.table.entries  # aborted and freed
    other_state.table.on_outputs([step(other.engine_id, toks[0], finish=LENGTH)])
    assert [d.parsed for d in other_group.take()] == [model.decode(toks[:1])]
