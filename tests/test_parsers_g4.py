"""Group g4's families as vLLM pairs them: each tool parser with its reasoning
parser (kimi_k3, k2_horizon, muse_glimmer), and kimi_k3's reasoning parser with
another tool parser, compared with vLLM's composite whole and delta by delta,
on the tiny tokenizer with the families' marker tokens."""

from __future__ import annotations

import pytest

from frontend.model import load_model_info
from tests.support.marker_model import marker_tokenizer_dir
from tests.support.parser_diff import CHUNKINGS, TOOLS, Differ
from tests.support.tool_cases_g4 import WITH_REASONING


@pytest.fixture(scope="module")
def marker_differ(tiny_model_dir, tmp_path_factory):
    from vllm.tokenizers import get_tokenizer

    path = marker_tokenizer_dir(tiny_model_dir, tmp_path_factory.mktemp("markers"))
    return Differ(load_model_info(str(path)), get_tokenizer(str(path)))


@pytest.mark.parametrize("tool, reasoning, case", WITH_REASONING,
                         ids=[c.id for _, _, c in WITH_REASONING])
def test_pair_matches_vllm(marker_differ, tool, reasoning, case):
    marker_differ.compare_whole(tool, reasoning, case)
    for chunking in CHUNKINGS:
        marker_differ.compare_stream(tool, reasoning, case, chunking)


# Kimi K3's XTML structural tag over the schema shapes its builder tells apart.
K3_TOOLS = [
    {"type": "function", "function": {"name": 'say "hi" & go', "strict": True, "parameters": {
        "type": "object", "required": ["mode"], "$defs": {"pt": {"type": "integer"}},
        "properties": {
            "mode": {"type": "string", "enum": ["fast", "slow"]},
            "fixed": {"type": "string", "const": "x"},
            "marker": {"type": "string", "enum": ["a<|b"]},
            "short": {"type": "string", "maxLength": 8, "minLength": 2},
            "bad_bounds": {"type": "string", "maxLength": 4, "minLength": 9},
            "huge": {"type": "string", "maxLength": 5000},
            "point": {"$ref": "#/$defs/pt", "type": "object"},
            "count": {"type": "integer"},
            "union": {"type": ["string", "null"]},
            "untyped": {},
        }}}},
    {"type": "function", "function": {"name": "empty", "strict": True,
                                      "parameters": {"type": "object", "properties": {}}}},
    {"type": "function", "function": {"name": "loose", "parameters": {
        "type": "object", "properties": {"q": {"type": "string"}}}}},
]


@pytest.mark.parametrize("parallel", [True, False])
@pytest.mark.parametrize("tool_choice", ["auto", "required",
                                         {"type": "function", "function": {"name": "empty"}}],
                         ids=str)
def test_kimi_k3_structural_tag_matches_vllm(marker_differ, tool_choice, parallel):
    import json

    from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionRequest

    from frontend.parsers.registry import tool_parser_class
    from frontend.structured.tool_choice import adjust_request

    tools = json.loads(json.dumps(K3_TOOLS))
    vrequest = ChatCompletionRequest(model="m", messages=[{"role": "user", "content": "x"}],
                                     tools=tools, tool_choice=tool_choice,
                                     parallel_tool_calls=parallel)
    cls = marker_differ._manager.get_parser(tool_parser_name="kimi_k3", enable_auto_tools=True,
                                            tokenizer=marker_differ.vtok)
    vrequest = cls(marker_differ.vtok, vrequest.tools).adjust_request(vrequest)
    ours = adjust_request(tool_parser_class("kimi_k3"), None, tools=tools,
                          tool_choice=tool_choice, parallel_tool_calls=parallel)
    assert ours.structural_tag is not None
    assert ours.structural_tag == vrequest.structured_outputs.structural_tag
    assert vrequest.skip_special_tokens is False and ours.skip_special_tokens is False


@pytest.mark.parametrize("tool, reasoning", [("kimi_k3", None), (None, "kimi_k3"),
                                             ("kimi_k3", "kimi_k3"), ("hermes", "kimi_k3"),
                                             ("kimi_k3", "qwen3"), ("hermes", None)])
@pytest.mark.parametrize("tool_choice", ["auto", "none", "required",
                                         {"type": "function", "function": {"name": "search"}}],
                         ids=str)
def test_special_token_flags_match_vllm(marker_differ, tool, reasoning, tool_choice):
    """Kimi K3 keeps its markers and joins them: skip_special_tokens and
    spaces_between_special_tokens off, as vLLM's adjust_request sets them."""
    from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionRequest

    from frontend.parsers.registry import reasoning_parser_class, tool_parser_class
    from frontend.structured.tool_choice import adjust_request

    vrequest = ChatCompletionRequest(model="m", messages=[{"role": "user", "content": "x"}],
                                     tools=TOOLS, tool_choice=tool_choice)
    cls = marker_differ._manager.get_parser(tool_parser_name=tool, reasoning_parser_name=reasoning,
                                            enable_auto_tools=True, tokenizer=marker_differ.vtok)
    if cls.reasoning_parser_cls is not None or tool_choice != "none":  # the renderer's condition
        vrequest = cls(marker_differ.vtok, vrequest.tools).adjust_request(vrequest)
    ours = adjust_request(tool_parser_class(tool) if tool else None,
                          reasoning_parser_class(reasoning) if reasoning else None,
                          tools=TOOLS, tool_choice=tool_choice, parallel_tool_calls=True)
    assert (ours.skip_special_tokens is False) == (vrequest.skip_special_tokens is False)
    assert (ours.spaces_between_special_tokens is False) == (
        vrequest.spaces_between_special_tokens is False)


@pytest.mark.parametrize("tool, reasoning", [("kimi_k3", None), (None, "kimi_k3")])
def test_chat_route_decodes_kimi_k3_markers_joined(marker_differ, tool, reasoning):
    """The chat route's sampling params carry both flags to the detokenizer."""
    import asyncio
    import json

    import msgspec

    from frontend.openai.chat import prepare
    from frontend.openai.chat_request import ChatCompletionRequest
    from frontend.parsers import ChatParsers
    from harness.state import make_state

    state = make_state(marker_differ.model)
    state.parsers = ChatParsers(marker_differ.tokenizer, tool_parser=tool,
                                reasoning_parser=reasoning)
    body = {"model": marker_differ.model.path, "messages": [{"role": "user", "content": "hi"}],
            **({"tools": TOOLS} if tool else {})}
    req = msgspec.json.decode(json.dumps(body).encode(), type=ChatCompletionRequest)
    params = asyncio.run(prepare(state, req, engine_checks=False)).params
    assert params.skip_special_tokens is False
    assert params.spaces_between_special_tokens is False
    state.parsers = ChatParsers(marker_differ.tokenizer, tool_parser="hermes",
                                reasoning_parser="qwen3")
    params = asyncio.run(prepare(state, req, engine_checks=False)).params
    assert params.spaces_between_special_tokens is True


@pytest.mark.parametrize("own", ["json", "structural_tag", "response_format"])
@pytest.mark.parametrize("tool_choice", ["auto", "required",
                                         {"type": "function", "function": {"name": "empty"}}],
                         ids=str)
def test_kimi_k3_tag_with_the_requests_own_constraint_matches_vllm(marker_differ, own,
                                                                     tool_choice):
    """With a strict tool, "auto" lets the model call a tool or write the
    request's own constraint ("or" of the two), as vLLM builds it."""
    import json

    from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionRequest

    from frontend.parsers.registry import tool_parser_class
    from frontend.structured.request import Constraints
    from frontend.structured.tool_choice import adjust_chat_request

    if own == "json" and isinstance(tool_choice, dict):
        pytest.skip("vLLM rejects structured outputs with a named tool")
    if own == "structural_tag" and tool_choice == "auto":
        pytest.skip("a structural tag or a strict tool: refused here (README)")
    tools = json.loads(json.dumps(K3_TOOLS))
    so = {"json": {"type": "object"}} if own == "json" else {"structural_tag": json.dumps(
        {"type": "structural_tag", "format": {"type": "any_text"}})}
    so = None if own == "response_format" else so
    rf = {"type": "json_object"} if own == "response_format" else None
    extra = {"structured_outputs": so} if so else {"response_format": rf}
    vrequest = ChatCompletionRequest(model="m", messages=[{"role": "user", "content": "x"}],
                                     tools=tools, tool_choice=tool_choice, **extra)
    cls = marker_differ._manager.get_parser(tool_parser_name="kimi_k3", enable_auto_tools=True,
                                            tokenizer=marker_differ.vtok)
    vrequest = cls(marker_differ.vtok, vrequest.tools).adjust_request(vrequest)
    constraints = Constraints(so, {"json_object": True} if rf else None)
    ours, _, _ = adjust_chat_request(tool_parser_class("kimi_k3"), None, tools=tools,
                                     tool_choice=tool_choice, parallel_tool_calls=True,
                                     response_format=rf, structured_outputs=so,
                                     constraints=constraints)
    assert ours.structured_outputs == {"structural_tag": vrequest.structured_outputs.structural_tag}


def test_k2_horizon_unknown_tool_call_format_is_vllms_400(marker_differ):
    import asyncio
    import json

    import msgspec
    from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionRequest as VReq

    from frontend.errors import ApiError
    from frontend.openai.chat import prepare
    from frontend.openai.chat_request import ChatCompletionRequest
    from frontend.parsers import ChatParsers
    from harness.state import make_state

    kwargs = {"tool_call_format": "yaml"}
    body = {"model": marker_differ.model.path, "messages": [{"role": "user", "content": "hi"}],
            "tools": TOOLS, "chat_template_kwargs": kwargs}
    cls = marker_differ._manager.get_parser(tool_parser_name="k2_horizon", enable_auto_tools=True,
                                            tokenizer=marker_differ.vtok)
    vrequest = VReq(**body)
    with pytest.raises(ValueError) as theirs:
        cls(marker_differ.vtok, vrequest.tools).adjust_request(vrequest)
    state = make_state(marker_differ.model)
    state.parsers = ChatParsers(marker_differ.tokenizer, tool_parser="k2_horizon")
    req = msgspec.json.decode(json.dumps(body).encode(), type=ChatCompletionRequest)
    with pytest.raises(ApiError) as ours:
        asyncio.run(prepare(state, req, engine_checks=False))
    assert (ours.value.status, ours.value.message) == (400, str(theirs.value))
