"""The argument converters of the Gemma 4, Inkling and Granite grammars against
vLLM 0.32's own functions, on generated (mostly malformed) argument text,
complete and partial."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from frontend.parsers.grammar import gemma4, granite, inkling, json_member
from tests.support.requirements import require_vllm

GEMMA_PIECES = ['<|"|>', "<|", '"|>', "key", "city", ":", ",", "{", "}", "[", "]", "(", ")",
                " ", "\n", "Paris", "3", "108.", "2", "true", "tr", "-", "é", "}}"]
JSON_PIECES = ['"name"', '"args"', '"arguments"', ":", ",", "{", "}", "[", "]", '"', "\\",
               '"x"', "1", " ", "\n", "null", '"a\\"b"', "東"]


@pytest.fixture(scope="module")
def vllm_gemma4():
    require_vllm()
    from vllm.parser import gemma4 as theirs

    return theirs


@pytest.fixture(scope="module")
def vllm_utils():
    require_vllm()
    from vllm.parser import utils

    return utils


@pytest.fixture(scope="module")
def vllm_granite():
    require_vllm()
    from vllm.parser import granite as theirs

    return theirs


def _outcome(fn, *args):
    try:
        return fn(*args)
    except ValueError as e:
        return type(e)


@settings(max_examples=400, deadline=None)
@given(st.lists(st.sampled_from(GEMMA_PIECES), max_size=24), st.booleans())
def test_gemma4_arguments_match_vllm(vllm_gemma4, pieces, partial):
    raw = "".join(pieces)
    assert gemma4.arguments_to_json(raw, partial) == vllm_gemma4._gemma4_arg_converter(
        raw, partial)


@settings(max_examples=400, deadline=None)
@given(st.lists(st.sampled_from(JSON_PIECES), max_size=24), st.booleans())
def test_inkling_args_member_matches_vllm(vllm_utils, pieces, partial):
    raw = "{" + "".join(pieces)
    assert _outcome(json_member.member_object, raw, "args") == _outcome(
        vllm_utils.extract_json_member_object, raw, "args")
    theirs = vllm_utils.extract_json_member_object
    expected = _outcome(lambda r, p: (theirs(r, "args") or ("" if p else "{}")), raw, partial)
    assert _outcome(inkling.args_of_call, raw, partial) == expected


@settings(max_examples=400, deadline=None)
@given(st.lists(st.sampled_from(JSON_PIECES), max_size=24), st.booleans())
def test_granite_arguments_member_matches_vllm(vllm_granite, pieces, partial):
    raw = "{" + "".join(pieces)
    assert _outcome(granite.granite_arguments, raw, partial) == _outcome(
        vllm_granite._granite_arg_converter, raw, partial)
