"""Long outputs: a choice's text is built in linear time and stays exact.

The detokenizer appends each token's text to a short tail and settles older
text into a list of pieces, so a multi-thousand-token output never re-copies
the whole string per token. These tests check the result (text, stop strings,
streamed deltas) on long outputs and that the tail stays bounded, which is
what makes the work per token constant.
"""

from __future__ import annotations

import pytest

from frontend.model import load_model_info
from frontend.text import TAIL_SLACK, IncrementalDetokenizer

WORDS = "the river runs to the sea and the sea is wide "


@pytest.fixture(scope="module")
def model(tiny_model_dir):
    return load_model_info(str(tiny_model_dir))


def feed(detok: IncrementalDetokenizer, ids: list[int], step: int, streaming: bool,
         max_tail: list[int]) -> tuple[str | None, list[str]]:
    deltas = []
    for i in range(0, len(ids), step):
        matched = detok.update(ids[i:i + step], False)
        max_tail[0] = max(max_tail[0], len(detok._tail))
        if streaming:
            deltas.append(detok.next_text(matched is not None))
        if matched is not None:
            return matched, deltas
    if streaming:
        deltas.append(detok.next_text(True))
    return None, deltas


@pytest.mark.parametrize("streaming", [False, True])
@pytest.mark.parametrize("step", [1, 3])
def test_long_output_is_exact_and_the_tail_stays_short(model, streaming, step):
    text = WORDS * 400  # ~18k characters, thousands of tokens
    prompt = model.encode("Hello")
    ids = model.encode(text, add_special_tokens=False)
    assert len(ids) > 3000
    detok = IncrementalDetokenizer(model, prompt)
    max_tail = [0]
    matched, deltas = feed(detok, ids, step, streaming, max_tail)
    assert matched is None
    assert detok.output_text == model.decode(ids)
    if streaming:
        assert "".join(deltas) == detok.output_text
    longest_step = max(len(model.decode(ids[i:i + step])) for i in range(0, len(ids), step))
    assert max_tail[0] <= 2 * TAIL_SLACK + longest_step, max_tail


@pytest.mark.parametrize("include", [False, True])
@pytest.mark.parametrize("streaming", [False, True])
def test_stop_string_far_into_a_long_output(model, include, streaming):
    before = WORDS * 300
    ids = model.encode(before + "STOPHERE and more after", add_special_tokens=False)
    detok = IncrementalDetokenizer(model, model.encode("Hi"), stop=["STOPHERE", "never"],
                                   include_stop_str_in_output=include)
    max_tail = [0]
    matched, deltas = feed(detok, ids, 2, streaming, max_tail)
    assert matched == "STOPHERE"
    expected = before + ("STOPHERE" if include else "")
    assert detok.output_text == expected
    if streaming:
        assert "".join(deltas) == expected
    # Tokens past the one that completed the match are dropped.
    assert model.decode(detok.token_ids).startswith(before)
    assert len(detok.token_ids) < len(ids)
    assert max_tail[0] <= 2 * (TAIL_SLACK + len("STOPHERE")) + 64


def test_streaming_holds_back_a_partial_stop_string(model):
    ids = model.encode(WORDS * 50 + "ST", add_special_tokens=False)
    detok = IncrementalDetokenizer(model, model.encode("Hi"), stop=["STOP"])
    sent = []
    for token in ids:
        assert detok.update([token], False) is None
        sent.append(detok.next_text(False))
    # "ST" could start "STOP": the last 3 characters are held until the end.
    assert "".join(sent) == (WORDS * 50 + "ST")[:-3]
    assert "".join(sent) + detok.next_text(True) == WORDS * 50 + "ST"
