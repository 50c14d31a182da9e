"""The g2 group's tool parsers under their families' reasoning parsers,
against vLLM's pair (tests/support/tool_cases_g2.py PAIRS), whole and
delta by delta, on the marker tokenizer (tests/support/marker_model.py)."""

from __future__ import annotations

import pytest

from frontend.model import load_model_info
from tests.support.marker_model import marker_tokenizer_dir
from tests.support.parser_diff import CHUNKINGS, Differ, assemble
from tests.support.tool_cases_g2 import PAIRS


@pytest.fixture(scope="module")
def marker_differ(tiny_model_dir, tmp_path_factory):
    from vllm.tokenizers import get_tokenizer

    path = marker_tokenizer_dir(tiny_model_dir, tmp_path_factory.mktemp("markers"))
    return Differ(load_model_info(str(path)), get_tokenizer(str(path)))


@pytest.mark.parametrize("tool, reasoning, case", PAIRS, ids=[c.id for _, _, c in PAIRS])
def test_with_reasoning_matches_vllm(marker_differ, tool, reasoning, case):
    marker_differ.compare_whole(tool, reasoning, case)
    for chunking in CHUNKINGS:
        marker_differ.compare_stream(tool, reasoning, case, chunking)


@pytest.mark.parametrize("tool, reasoning, case", [p for p in PAIRS if p[2].id.endswith("call")],
                         ids=lambda v: getattr(v, "id", v))
def test_pairs_find_reasoning_and_calls(marker_differ, tool, reasoning, case):
    """Not vacuous: the reasoning and the call are found, whole and streamed."""
    parsed = marker_differ.our_parser(tool, reasoning, case).parse(case.text)
    assert parsed.reasoning == "plan" and [c.name for c in parsed.tool_calls] == ["get_weather"]
    streamed = assemble(marker_differ.compare_stream(tool, reasoning, case, "token"))
    assert streamed["reasoning"] == "plan"
    assert [c["name"] for c in streamed["calls"].values()] == ["get_weather"]
