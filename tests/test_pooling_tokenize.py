"""Pooling tokenization against the code vLLM runs: transformers' tokenizers
(loaded as vLLM loads them for a pooling model: ``truncation_side="right"``)
and vLLM's scoring helpers, on the tiny BERT cross-encoder and the tiny Llama.

* query/document pairs: ids and ``token_type_ids`` with no truncation,
  ``longest_first`` at every length and ``only_second``;
* ``max_tokens_per_query``/``_doc``: vLLM's ``truncate_text_to_tokens``;
* a single text truncated by the tokenizer (the renderer's pooling side);
* ``compress_token_type_ids``.

Skipped without vLLM, except under CI=true.
"""

from __future__ import annotations

import os

import pytest

try:
    from transformers import AutoTokenizer
    from vllm.entrypoints.pooling.scoring.utils import compress_token_type_ids as v_compress
    from vllm.entrypoints.pooling.scoring.utils import truncate_text_to_tokens
except Exception as exc:
    _why = f"vLLM 0.32 is not importable ({type(exc).__name__}: {exc})"
    if os.environ.get("CI") == "true":
        pytest.fail(_why, pytrace=False)
    pytest.skip(_why, allow_module_level=True)

from frontend.errors import ApiError
from frontend.model import load_model_info
from frontend.pooling.pairs import PairTokenizer, compress_token_type_ids
from frontend.render import Renderer

TEXTS = ["what is this", "A cat sees the big dog near the house, and more.",
         "Hello world, how are you?", "x", "Zürich 你好 🚀 emoji", ""]


@pytest.fixture(scope="module")
def cross(tiny_cross_encoder_dir):
    hf = AutoTokenizer.from_pretrained(str(tiny_cross_encoder_dir), truncation_side="right")
    return hf, PairTokenizer(load_model_info(str(tiny_cross_encoder_dir)))


@pytest.mark.parametrize("query", TEXTS[:4])
@pytest.mark.parametrize("doc", TEXTS[1:])
def test_pairs_equal_transformers(cross, query, doc):
    hf, ours = cross
    want = hf(text=query, text_pair=doc)
    assert ours.encode(query, doc, max_length=None) == \
        (want["input_ids"], want["token_type_ids"])
    total = len(want["input_ids"])
    for max_length in range(3, total + 2):
        for strategy in ("longest_first", "only_second"):
            try:
                want = hf(text=query, text_pair=doc, max_length=max_length,
                          truncation=True if strategy == "longest_first" else strategy)
            except Exception as e:  # a query longer than max_length: vLLM's 500
                with pytest.raises(ApiError) as raised:
                    ours.encode(query, doc, max_length=max_length, strategy=strategy)
                assert (raised.value.status, raised.value.message) == (500, str(e))
                continue
            assert ours.encode(query, doc, max_length=max_length, strategy=strategy) == \
                (want["input_ids"], want["token_type_ids"]), (max_length, strategy)


@pytest.mark.parametrize("text", TEXTS)
@pytest.mark.parametrize("limit", [1, 2, 3, 5, 50])
def test_text_limits_equal_vllms(cross, text, limit):
    hf, ours = cross
    assert ours.truncate_text(text, limit) == truncate_text_to_tokens(text, hf, limit)


def test_compressed_token_types_equal_vllms():
    for types in ([0, 0, 1, 1], [0, 0, 0], [1, 1], [], [0, 1]):
        assert compress_token_type_ids(types) == v_compress(types)
    for bad in ([0, 1, 0], [0, 2]):
        with pytest.raises(ValueError):
            v_compress(bad)
        with pytest.raises(ApiError):
            compress_token_type_ids(bad)


@pytest.mark.parametrize("model", ["tiny_model_dir", "tiny_cross_encoder_dir"])
def test_pooling_truncation_keeps_the_start(request, model):
    """truncate_prompt_tokens without a side: the tokenizer truncates on the right."""
    model_dir = request.getfixturevalue(model)
    hf = AutoTokenizer.from_pretrained(str(model_dir), truncation_side="right")
    renderer = Renderer(load_model_info(str(model_dir)))
    renderer.max_model_len, renderer.truncation_side = 1024, "right"
    text = TEXTS[1] * 3
    for keep in (1, 2, 3, 7, 20, 1000):
        for special in (True, False):
            # vLLM: the tokenizer truncates (not below its special tokens), then
            # TokenizeParams slices what is left to the first ``keep``.
            want = hf(text, truncation=True, max_length=keep,
                      add_special_tokens=special)["input_ids"][:keep]
            assert renderer.encode(text, special, keep) == want, (keep, special)


SCORE_TEMPLATE = ("{%- if instruction %}<Instruct>: {{ instruction }}\n{% endif %}"
                  "<Query>: {{ messages[0]['content'] }}\n"
                  "<Document>: {{ messages[1]['content'] }}")


def test_score_template_renders_as_transformers(tiny_cross_encoder_dir, tmp_path):
    """``--chat-template`` on a cross-encoder is vLLM's score template: the pair
    as a "query" and a "document" message, rendered, then tokenized whole."""
    from types import SimpleNamespace

    from frontend.pooling.model import load_pooling_model
    from frontend.pooling.schemas import ScoreRequest
    from frontend.pooling.score import Scorer

    path = tmp_path / "score.jinja"
    path.write_text(SCORE_TEMPLATE)
    info = load_pooling_model(load_model_info(str(tiny_cross_encoder_dir)), ["classify"])
    assert not info.score_template  # the model's own (absent) template is not one
    model = load_model_info(str(tiny_cross_encoder_dir), chat_template_path=str(path))
    pooling = load_pooling_model(model, ["token_classify", "classify"])
    assert pooling.score_template
    renderer = Renderer(model)
    renderer.max_model_len = 1024
    scorer = Scorer(SimpleNamespace(model=model, renderer=renderer, max_model_len=1024),
                    pooling)
    hf = AutoTokenizer.from_pretrained(str(tiny_cross_encoder_dir), truncation_side="right")
    for instruction in (None, "Find cats"):
        req = ScoreRequest(instruction=instruction)
        messages = [{"role": "query", "content": "what is this"},
                    {"role": "document", "content": "A cat sees the dog."}]
        text = hf.apply_chat_template(messages, chat_template=SCORE_TEMPLATE, tokenize=False,
                                      **({"instruction": instruction} if instruction else {}))
        assert scorer._score_prompt(req, "what is this", "A cat sees the dog.") == text
        want = hf(text, truncation=True, max_length=1025)
        assert scorer._encode_pair(req, "what is this", "A cat sees the dog.") == \
            (want["input_ids"], want["token_type_ids"])
    with pytest.raises(ApiError, match="reserved keys"):
        scorer._score_prompt(ScoreRequest(chat_template_kwargs={"tools": []}), "a", "b")
