"""``--tool-strict-level``: the server's floor for structural tags, against vLLM's
``adjust_request`` under the same level (``ParserManager.get_parser(...,
tool_strict_level=...)``), for every parser with a structural tag model."""

from __future__ import annotations

import json

import pytest

from frontend.parsers.registry import TOOL_PARSERS, tool_parser_class
from frontend.structured.tool_choice import adjust_request
from tests.support.parser_diff import TOOLS
from tests.test_tool_parsers import differ, differ_for, marker_differ, model  # noqa: F401

NAMED = {"type": "function", "function": {"name": "get_weather"}}
TAGGED = sorted(name for name in TOOL_PARSERS
                if tool_parser_class(name).structural_tag_model is not None)


@pytest.mark.parametrize("level", ["auto", "function", "parameter"])
@pytest.mark.parametrize("parallel", [True, False])
@pytest.mark.parametrize("tool_choice", ["auto", "required", NAMED], ids=str)
@pytest.mark.parametrize("parser", TAGGED)
def test_strict_level_matches_vllm(request, parser, tool_choice, parallel, level):
    from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionRequest

    d = differ_for(request, parser)
    tools = json.loads(json.dumps(TOOLS))
    vrequest = ChatCompletionRequest(model="m", messages=[{"role": "user", "content": "x"}],
                                     tools=tools, tool_choice=tool_choice,
                                     parallel_tool_calls=parallel)
    parser_cls = d._manager.get_parser(tool_parser_name=parser, enable_auto_tools=True,
                                       tool_strict_level=level, tokenizer=d.vtok)
    vrequest = parser_cls(d.vtok, vrequest.tools).adjust_request(vrequest)
    ours = adjust_request(tool_parser_class(parser), None, tools=tools,
                          tool_choice=tool_choice, parallel_tool_calls=parallel,
                          strict_level=level)
    so = vrequest.structured_outputs
    theirs = so.structural_tag if so is not None else None
    assert ours.structural_tag == theirs
    assert tools == TOOLS  # the request's own tools are left as sent


def test_the_levels_change_the_tag():
    """parameter pins a non-strict tool's arguments; function tags "auto" at all."""
    parser = tool_parser_class("hermes")
    tags = {level: adjust_request(parser, None, tools=TOOLS, tool_choice="auto",
                                  parallel_tool_calls=True, strict_level=level).structural_tag
            for level in ("auto", "function", "parameter")}
    assert tags["auto"] is None
    assert tags["function"] is not None and tags["parameter"] is not None
    assert tags["function"] != tags["parameter"]
    assert '"city"' in tags["parameter"] and '"city"' not in tags["function"]
