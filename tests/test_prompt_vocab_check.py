"""Text prompts skip the vocabulary scan only where the tokenizer cannot leave it."""

from __future__ import annotations

import asyncio
import dataclasses

import pytest

from frontend.errors import ApiError
from frontend.model import load_model_info
from frontend.render import Renderer


def render(model, prompt):
    renderer = Renderer(model)
    renderer.max_model_len = 2048
    return asyncio.run(renderer.render_prompts([prompt]))


def test_tokenizer_ids_beyond_the_models_vocabulary_are_refused(tiny_model_dir):
    model = load_model_info(str(tiny_model_dir))
    assert model.max_token_id == 1206 < model.vocab_size
    assert render(model, "a <think> b")[0][0][-2:] == [1200, 271]
    # A config whose vocabulary ends before the tokenizer's added tokens (ids 1200-1206).
    smaller = dataclasses.replace(model, vocab_size=1200)
    with pytest.raises(ApiError, match="Token id 1200 is out of vocabulary"):
        render(smaller, "a <think> b")
    unknown = dataclasses.replace(model, max_token_id=None, vocab_size=1200)
    with pytest.raises(ApiError, match="Token id 1200 is out of vocabulary"):
        render(unknown, "a <think> b")
