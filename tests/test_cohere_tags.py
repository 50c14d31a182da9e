"""Cohere Command's structural tags against vLLM's ``CohereCommandParser.adjust_request``.

The JSON-schema tags must be vLLM's, byte for byte; the tool-call tag (vLLM's
xgrammar EBNF, ours a JSON schema) must accept and refuse the same outputs
once xgrammar compiles both.
"""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from frontend.errors import ApiError
from frontend.model import load_model_info
from frontend.parsers.registry import reasoning_parser_class, tool_parser_class
from frontend.structured.request import parse
from frontend.structured.tool_choice import adjust_chat_request
from tests.support.marker_model import marker_tokenizer_dir
from tests.support.parser_diff import Differ

ARCHITECTURES = ["Cohere2ForCausalLM", "Cohere2MoeForCausalLM",
                 "Cohere2VisionForConditionalGeneration"]

WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Weather",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"},
                                                    "days": {"type": "integer"}},
                   "required": ["city"]}}}
SEARCH = {"type": "function", "function": {"name": "search", "parameters": {
    "type": "object", "properties": {"q": {"$ref": "#/$defs/Query"}},
    "$defs": {"Query": {"type": "string", "minLength": 1}}}}}
NO_PARAMS = {"type": "function", "function": {"name": "now"}}
TOOLS = [WEATHER, SEARCH, NO_PARAMS]
SCHEMA = {"type": "object", "properties": {"answer": {"type": "string"}}, "required": ["answer"]}
JSON_SCHEMA = {"type": "json_schema", "json_schema": {"name": "a", "schema": SCHEMA}}
NAMED = {"type": "function", "function": {"name": "search"}}

REQUESTS = {
    "tools": {"tools": TOOLS},
    "tools-required": {"tools": TOOLS, "tool_choice": "required"},
    "tools-named": {"tools": TOOLS, "tool_choice": NAMED},
    "tools-one-call": {"tools": TOOLS, "parallel_tool_calls": False},
    "json-schema": {"response_format": JSON_SCHEMA},
    "json-object": {"response_format": {"type": "json_object"}},
    "so-json": {"structured_outputs": {"json": SCHEMA}},
    "so-json-text": {"structured_outputs": {"json": json.dumps(SCHEMA)}},
    "so-json-object": {"structured_outputs": {"json_object": True}},
    "tools-and-json-schema": {"tools": [WEATHER], "response_format": JSON_SCHEMA},
    "tools-and-so-regex": {"tools": [WEATHER], "structured_outputs": {"regex": "a+"}},
    "so-regex": {"structured_outputs": {"regex": "a+"}},
    "own-structural-tag": {"tools": TOOLS, "structured_outputs": {"structural_tag": json.dumps(
        {"type": "structural_tag", "format": {"type": "any_text"}})}},
    "nothing": {},
}


@pytest.fixture(scope="module")
def marker_differ(tiny_model_dir, tmp_path_factory):
    """The tiny tokenizer with Command A's special tokens."""
    from vllm.tokenizers import get_tokenizer

    path = marker_tokenizer_dir(tiny_model_dir, tmp_path_factory.mktemp("markers"))
    return Differ(load_model_info(str(path)), get_tokenizer(str(path)))


def vllm_adjusted(differ, parser: str, architecture: str | None, body: dict):
    from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionRequest

    request = ChatCompletionRequest(model="m", messages=[{"role": "user", "content": "x"}],
                                    **json.loads(json.dumps(body)))
    cls = differ._manager.get_parser(tool_parser_name=parser, reasoning_parser_name=parser,
                                     enable_auto_tools=True, tokenizer=differ.vtok)
    config = SimpleNamespace(architecture=architecture)
    return cls(differ.vtok, request.tools, model_config=config).adjust_request(request)


def our_constraints(parser: str, architecture: str, body: dict):
    body = json.loads(json.dumps(body))
    rf, so = body.get("response_format"), body.get("structured_outputs")
    constraints, skip, _ = adjust_chat_request(
        tool_parser_class(parser), reasoning_parser_class(parser), tools=body.get("tools"),
        tool_choice=body.get("tool_choice", "auto" if body.get("tools") else "none"),
        parallel_tool_calls=body.get("parallel_tool_calls", True), response_format=rf,
        structured_outputs=so, constraints=parse(rf, so), architecture=architecture)
    return constraints, skip


def vllm_tag(request) -> str | None:
    so = request.structured_outputs
    return so.structural_tag if so is not None else None


def without_tool_tag(tag: str) -> tuple[dict, list]:
    """The tag with its <|START_ACTION|> tag's content taken out, and that content."""
    tag = json.loads(tag)
    contents = [t.pop("content") for t in tag["format"]["tags"]
                if t["begin"] == "<|START_ACTION|>"]
    return tag, contents


@pytest.mark.parametrize("parser", ["cohere_command3", "cohere_command4"])
@pytest.mark.parametrize("architecture", ARCHITECTURES)
@pytest.mark.parametrize("name", list(REQUESTS))
def test_tag_matches_vllms(marker_differ, parser, architecture, name):
    body = REQUESTS[name]
    theirs = vllm_adjusted(marker_differ, parser, architecture, body)
    ours, skip = our_constraints(parser, architecture, body)
    assert skip is False  # melody needs the markers
    tag = vllm_tag(theirs)
    if name in ("nothing", "so-regex", "own-structural-tag"):
        assert ours == parse(body.get("response_format"), body.get("structured_outputs"))
        assert (ours.structured_outputs or {}).get("structural_tag") == tag
        return
    assert ours.override is None and theirs.response_format is None
    assert list(ours.structured_outputs) == ["structural_tag"]
    mine = ours.structured_outputs["structural_tag"]
    if "tools" not in body:
        assert mine == tag  # byte for byte
        return
    (their_rest, their_tools), (our_rest, our_tools) = without_tool_tag(tag), without_tool_tag(mine)
    assert our_rest == their_rest
    assert [c["type"] for c in their_tools] == ["grammar"]
    assert [c["type"] for c in our_tools] == ["json_schema"]


def test_unsupported_architecture_is_vllms_error(marker_differ):
    with pytest.raises(ValueError) as theirs:
        vllm_adjusted(marker_differ, "cohere_command3", "LlamaForCausalLM", {"tools": TOOLS})
    with pytest.raises(ApiError) as ours:
        our_constraints("cohere_command3", "LlamaForCausalLM", {"tools": TOOLS})
    assert str(theirs.value) == ours.value.message
    # Nothing to constrain: no error, as in vLLM.
    assert vllm_tag(vllm_adjusted(marker_differ, "cohere_command3", "LlamaForCausalLM", {})) is None
    assert our_constraints("cohere_command3", "LlamaForCausalLM", {})[0].structured_outputs is None


A, E = "<|START_ACTION|>", "<|END_ACTION|>"
W = '{"tool_call_id": "0", "tool_name": "get_weather", "parameters": {"city": "Paris"}}'
S = '{"tool_call_id": "1", "tool_name": "search", "parameters": {"q": "cafe"}}'
N = '{"tool_call_id": "2", "tool_name": "now", "parameters": {"anything": [1, {"x": null}]}}'
# (id, output, accepted): a few outputs after the trigger, for the tool tag.
SAMPLES = [
    ("one-call", f"{A}[{W}]{E}", True),
    ("several-calls", f"{A}[{W}, {S}, {N}]{E}", True),
    ("text-then-call", f"Sure. {A}[{S}]{E}", True),
    ("no-call", "Just text, no action.", True),
    ("newlines-tabs", f'{A}[\n\t{W} ,\n{S}\n]{E}', True),
    ("compact", f'{A}[{W.replace(", ", ",").replace(": ", ":")}]{E}', True),
    ("inner-whitespace", f'{A}[{{ "tool_call_id" : "7" ,\n"tool_name":"now","parameters":{{}} }}]{E}',
     True),
    ("missing-fields", f'{A}[{{"tool_name": "now"}}]{E}', True),
    ("empty-object", f"{A}[{{}}]{E}", True),
    ("empty-array", f"{A}[]{E}", False),
    ("wrong-tool-name", f'{A}[{W.replace("get_weather", "get_time")}]{E}', False),
    ("bad-id", f'{A}[{W.replace(chr(34) + "0" + chr(34), chr(34) + "x1" + chr(34))}]{E}', False),
    ("empty-id", f'{A}[{W.replace(chr(34) + "0" + chr(34), chr(34) * 2)}]{E}', False),
    ("numeric-id", f'{A}[{W.replace(chr(34) + "0" + chr(34), "0")}]{E}', False),
    ("wrong-order", f'{A}[{{"tool_name": "now", "tool_call_id": "1"}}]{E}', False),
    ("extra-field", f'{A}[{{"tool_call_id": "1", "tool_name": "now", "x": 1}}]{E}', False),
    ("bad-parameters", f'{A}[{W.replace(chr(34) + "Paris" + chr(34), "3")}]{E}', False),
    ("missing-required-param", f'{A}[{W.replace(chr(34) + "city" + chr(34), chr(34) + "town" + chr(34))}]{E}', False),
    ("defs-ref-violated", f'{A}[{S.replace(chr(34) + "cafe" + chr(34), chr(34) * 2)}]{E}', False),
    ("malformed-json", f'{A}[{W[:-1]}]{E}', False),
    ("trailing-comma", f"{A}[{W},]{E}", False),
    ("bare-object", f"{A}{W}{E}", False),
    ("no-end-marker", f"{A}[{W}]", False),
]
# Residual difference (module docstring): vLLM's grammar allows whitespace
# around the array, inside the action markers; the engine's JSON schema does not.
AROUND = [("space-before-array", f"{A} [{W}]{E}"), ("newline-after-array", f"{A}[{W}]\n{E}")]


@pytest.fixture(scope="module")
def tool_grammars(marker_differ):
    import xgrammar as xgr

    body = {"tools": TOOLS}
    theirs = vllm_tag(vllm_adjusted(marker_differ, "cohere_command4", ARCHITECTURES[0], body))
    ours = our_constraints("cohere_command4", ARCHITECTURES[0], body)[0]
    return (xgr.Grammar.from_structural_tag(theirs),
            xgr.Grammar.from_structural_tag(ours.structured_outputs["structural_tag"]))


@pytest.mark.parametrize("case, text, accepted", SAMPLES, ids=[s[0] for s in SAMPLES])
def test_tool_tag_accepts_what_vllms_accepts(tool_grammars, case, text, accepted):
    from xgrammar.testing import _is_grammar_accept_string

    theirs, ours = tool_grammars
    assert _is_grammar_accept_string(theirs, text) is accepted
    assert _is_grammar_accept_string(ours, text) is accepted


@pytest.mark.parametrize("case, text", AROUND, ids=[s[0] for s in AROUND])
def test_tool_tag_whitespace_around_the_array_differs(tool_grammars, case, text):
    from xgrammar.testing import _is_grammar_accept_string

    theirs, ours = tool_grammars
    assert _is_grammar_accept_string(theirs, text)
    assert not _is_grammar_accept_string(ours, text)


def test_engine_compiles_the_tag_on_the_tiny_tokenizer(marker_differ):
    """The tag as the engine gets it: compiled for the tokenizer, then a call
    fed token by token is accepted to the end marker."""
    import xgrammar as xgr

    tag = our_constraints("cohere_command3", ARCHITECTURES[1],
                          {"tools": TOOLS, "response_format": JSON_SCHEMA})[0]
    info = xgr.TokenizerInfo.from_huggingface(marker_differ.vtok, vocab_size=None)
    compiled = xgr.GrammarCompiler(info).compile_structural_tag(
        tag.structured_outputs["structural_tag"])
    matcher = xgr.GrammarMatcher(compiled, terminate_without_stop_token=True)
    ids = marker_differ.model.encode(f"Ok {A}[{W}]{E} done", add_special_tokens=False)
    assert all(matcher.accept_token(i) for i in ids)


def test_no_tag_where_vllm_does_not_adjust_the_request():
    """tool_choice "none" without a reasoning parser: vLLM skips adjust_request."""
    rf = {"type": "json_object"}
    constraints, _, _ = adjust_chat_request(
        tool_parser_class("cohere_command3"), None, tools=TOOLS, tool_choice="none",
        parallel_tool_calls=True, response_format=rf, structured_outputs=None,
        constraints=parse(rf, None), architecture=ARCHITECTURES[0])
    assert constraints == parse(rf, None)


def test_model_info_reads_the_architecture(marker_differ, tiny_model_dir):
    config = json.loads((tiny_model_dir / "config.json").read_text())
    assert marker_differ.model.architecture == config["architectures"][0]
