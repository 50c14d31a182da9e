"""The byte-level fast decoder must equal tokenizers' DecodeStream exactly."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tokenizers import decoders

from frontend.bytelevel import ByteLevelStream, is_byte_level
from frontend.model import load_model_info
from frontend.text import IncrementalDetokenizer


@pytest.fixture(scope="module")
def model(tiny_model_dir):
    return load_model_info(str(tiny_model_dir))


def test_tiny_model_uses_the_fast_path(model):
    assert is_byte_level(model.tokenizer) and model.byte_level is not None


def token_ids(model_size: int = 1200):
    # Mostly ordinary tokens, some special ones (ids 0-5), as engines produce.
    return st.lists(st.one_of(st.integers(6, model_size - 1), st.integers(0, 5)),
                    min_size=1, max_size=40)


PROMPTS = ["Hello", "Zürich café 你好世界 🚀🎉👍🏽 日本語", "The quick brown fox", "x"]


@settings(max_examples=400, deadline=None)
@given(prompt=st.sampled_from(PROMPTS), seq=token_ids(), skip=st.booleans())
def test_stream_steps_equal_decodestream(model, prompt, seq, skip):
    ids = model.encode(prompt)
    ref = decoders.DecodeStream(ids=ids, skip_special_tokens=skip)
    fast = ByteLevelStream(model.byte_level, skip)
    for token_id in seq:
        assert (fast.step(None, token_id) or None) == (ref.step(model.tokenizer, token_id) or None)


@settings(max_examples=300, deadline=None)
@given(prompt=st.lists(st.integers(0, 1199), min_size=1, max_size=12), seq=token_ids(),
       skip=st.booleans(), stop=st.sampled_from([[], ["a"], ["the ", "é"]]),
       steps=st.integers(1, 3))
def test_detokenizer_equals_the_decodestream_one(model, prompt, seq, skip, stop, steps):
    """Token prompts may end mid-character: then the detokenizer must fall back
    to DecodeStream; either way its text equals the reference's, step by step."""
    slow_model = dataclasses.replace(model, byte_level=None)
    kwargs = dict(skip_special_tokens=skip, stop=stop)
    fast = IncrementalDetokenizer(model, prompt, **kwargs)
    slow = IncrementalDetokenizer(slow_model, prompt, **kwargs)
    for i in range(0, len(seq), steps):
        chunk = seq[i:i + steps]
        assert fast.update(chunk, False) == slow.update(chunk, False)
        assert fast.next_text(False) == slow.next_text(False)
    assert fast.output_text == slow.output_text and fast.token_ids == slow.token_ids
