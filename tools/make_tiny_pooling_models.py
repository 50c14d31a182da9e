"""Build the tiny, deterministic pooling models of the test suite.

Usage::

    python -m tools.make_tiny_pooling_models TINY_MODEL_DIR EMBED_OUTDIR CROSS_ENCODER_OUTDIR

or, from Python, ``build_embedder(tiny_dir, outdir)`` and ``build_cross_encoder(outdir)``.

The pooling tests serve two models on real engines:

* **the embedder**: the tiny Llama of ``harness/tiny_model.py`` itself (its
  weights, tokenizer and chat template, linked), run as an embedding model
  with ``vllm serve DIR --runner pooling --convert embed``. Its ``config.json``
  adds two keys real embedding models have: ``matryoshka_dimensions`` (so
  ``dimensions`` is served, as for nomic or Qwen3-Embedding) and
  ``task_instructions`` (the prefixes Cohere's ``input_type`` selects).
* **the cross-encoder**: a ``BertForSequenceClassification`` with one label,
  like bge-reranker or ms-marco-MiniLM. It answers ``/classify``, ``/score``
  and ``/rerank``, and its tokenizer gives a query and a document different
  ``token_type_ids`` (``[CLS] query [SEP] document [SEP]``), which the
  frontend must send to the engine (vLLM's ``compressed_token_type_ids``) for
  the scores to be right. Files:

  * ``tokenizer.json`` -- a lower-casing WordPiece tokenizer (BERT's normalizer
    and pre-tokenizer, ``##`` continuations) trained on the tiny Llama's
    corpus, with BERT's single and pair templates;
  * ``model.safetensors`` -- 2 encoder layers, hidden size 64 (2 heads of 32:
    vLLM's CPU attention needs head sizes >= 32), random float32 weights in
    Hugging Face's tensor names, written by the tiny Llama's writer;
  * ``config.json`` (``id2label`` names the single label),
    ``tokenizer_config.json`` and ``special_tokens_map.json``.

Standard library, numpy and ``tokenizers`` only; fixed seeds, so two builds
write the same bytes.
"""

from __future__ import annotations

import json
import os
import pathlib
import shutil
import sys

import numpy as np
from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

from harness.tiny_model import make_corpus, write_safetensors

WEIGHTS_SEED = 2468
VOCAB_SIZE = 1000
SPECIAL_TOKENS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
PAD_ID, UNK_ID, CLS_ID, SEP_ID, MASK_ID = range(len(SPECIAL_TOKENS))

HIDDEN_SIZE = 64
INTERMEDIATE_SIZE = 128
NUM_LAYERS = 2
NUM_HEADS = 2
MAX_POSITIONS = 1024  # the test engines run with --max-model-len 1024
TYPE_VOCAB_SIZE = 2
LAYER_NORM_EPS = 1e-12
# Larger than BERT's 0.02 so that different pairs get clearly different scores.
WEIGHT_STD = 0.2
LABEL = "relevant"


def train_tokenizer(corpus: list[str]) -> Tokenizer:
    tokenizer = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tokenizer.normalizer = normalizers.BertNormalizer(lowercase=True)
    tokenizer.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tokenizer.decoder = decoders.WordPiece(prefix="##")
    trainer = trainers.WordPieceTrainer(vocab_size=VOCAB_SIZE, special_tokens=SPECIAL_TOKENS,
                                        show_progress=False)
    tokenizer.train_from_iterator(corpus, trainer=trainer)
    tokenizer.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]",
        pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", CLS_ID), ("[SEP]", SEP_ID)],
    )
    for expected_id, token in enumerate(SPECIAL_TOKENS):
        if tokenizer.token_to_id(token) != expected_id:
            raise RuntimeError(f"{token!r} is not at id {expected_id}")
    return tokenizer


def tensor_shapes(vocab_size: int) -> dict[str, tuple[int, ...]]:
    """Hugging Face BertForSequenceClassification names ([out, in] for linears)."""
    h, i = HIDDEN_SIZE, INTERMEDIATE_SIZE
    shapes: dict[str, tuple[int, ...]] = {
        "bert.embeddings.word_embeddings.weight": (vocab_size, h),
        "bert.embeddings.position_embeddings.weight": (MAX_POSITIONS, h),
        "bert.embeddings.token_type_embeddings.weight": (TYPE_VOCAB_SIZE, h),
        "bert.embeddings.LayerNorm.weight": (h,),
        "bert.embeddings.LayerNorm.bias": (h,),
        "bert.pooler.dense.weight": (h, h),
        "bert.pooler.dense.bias": (h,),
        "classifier.weight": (1, h),
        "classifier.bias": (1,),
    }
    for n in range(NUM_LAYERS):
        p = f"bert.encoder.layer.{n}."
        for name in ("attention.self.query", "attention.self.key", "attention.self.value",
                     "attention.output.dense"):
            shapes[p + name + ".weight"] = (h, h)
            shapes[p + name + ".bias"] = (h,)
        shapes.update({
            p + "attention.output.LayerNorm.weight": (h,),
            p + "attention.output.LayerNorm.bias": (h,),
            p + "intermediate.dense.weight": (i, h),
            p + "intermediate.dense.bias": (i,),
            p + "output.dense.weight": (h, i),
            p + "output.dense.bias": (h,),
            p + "output.LayerNorm.weight": (h,),
            p + "output.LayerNorm.bias": (h,),
        })
    return shapes


def make_weights(vocab_size: int) -> dict[str, np.ndarray]:
    """Random normal weights; LayerNorms start as identity (weight 1, bias 0)."""
    rng = np.random.default_rng(WEIGHTS_SEED)
    weights: dict[str, np.ndarray] = {}
    for name, shape in sorted(tensor_shapes(vocab_size).items()):
        if "LayerNorm" in name:
            value = np.ones(shape) if name.endswith("weight") else np.zeros(shape)
        else:
            value = rng.standard_normal(shape) * WEIGHT_STD
        weights[name] = value.astype(np.float32)
    return weights


def model_config(vocab_size: int) -> dict[str, object]:
    return {
        "architectures": ["BertForSequenceClassification"],
        "model_type": "bert",
        "vocab_size": vocab_size,
        "hidden_size": HIDDEN_SIZE,
        "intermediate_size": INTERMEDIATE_SIZE,
        "num_hidden_layers": NUM_LAYERS,
        "num_attention_heads": NUM_HEADS,
        "hidden_act": "gelu",
        "hidden_dropout_prob": 0.0,
        "attention_probs_dropout_prob": 0.0,
        "max_position_embeddings": MAX_POSITIONS,
        "type_vocab_size": TYPE_VOCAB_SIZE,
        "layer_norm_eps": LAYER_NORM_EPS,
        "position_embedding_type": "absolute",
        "pad_token_id": PAD_ID,
        "id2label": {"0": LABEL},
        "label2id": {LABEL: 0},
        "torch_dtype": "float32",
    }


def tokenizer_config() -> dict[str, object]:
    return {
        "tokenizer_class": "BertTokenizerFast",
        "do_lower_case": True,
        "cls_token": "[CLS]",
        "sep_token": "[SEP]",
        "pad_token": "[PAD]",
        "unk_token": "[UNK]",
        "mask_token": "[MASK]",
        "model_max_length": MAX_POSITIONS,
        "clean_up_tokenization_spaces": True,
        "added_tokens_decoder": {
            str(i): {"content": token, "lstrip": False, "normalized": False,
                     "rstrip": False, "single_word": False, "special": True}
            for i, token in enumerate(SPECIAL_TOKENS)
        },
    }


def special_tokens_map() -> dict[str, object]:
    return {"cls_token": "[CLS]", "sep_token": "[SEP]", "pad_token": "[PAD]",
            "unk_token": "[UNK]", "mask_token": "[MASK]"}


def _write_json(path: pathlib.Path, data: object) -> None:
    path.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


MATRYOSHKA_DIMENSIONS = [16, 32, 64]
TASK_INSTRUCTIONS = {"query": "query: ", "document": "passage: "}


def build_embedder(tiny_dir: pathlib.Path, outdir: pathlib.Path) -> None:
    """The tiny Llama's files (hard links; copies across file systems), with a
    config.json that declares Matryoshka dimensions and task instructions."""
    tiny_dir, outdir = pathlib.Path(tiny_dir), pathlib.Path(outdir)
    outdir.mkdir(parents=True, exist_ok=True)
    for source in sorted(tiny_dir.iterdir()):
        if source.name == "config.json" or not source.is_file():
            continue
        target = outdir / source.name
        try:
            os.link(source, target)
        except OSError:
            shutil.copyfile(source, target)
    config = json.loads((tiny_dir / "config.json").read_text(encoding="utf-8"))
    config["matryoshka_dimensions"] = MATRYOSHKA_DIMENSIONS
    config["task_instructions"] = TASK_INSTRUCTIONS
    _write_json(outdir / "config.json", config)


def build_cross_encoder(outdir: pathlib.Path) -> None:
    """Write the complete cross-encoder directory into ``outdir`` (created if needed)."""
    outdir = pathlib.Path(outdir)
    outdir.mkdir(parents=True, exist_ok=True)
    tokenizer = train_tokenizer(make_corpus())
    vocab_size = tokenizer.get_vocab_size(with_added_tokens=True)
    tokenizer.save(str(outdir / "tokenizer.json"), pretty=False)
    write_safetensors(outdir / "model.safetensors", make_weights(vocab_size))
    _write_json(outdir / "config.json", model_config(vocab_size))
    _write_json(outdir / "tokenizer_config.json", tokenizer_config())
    _write_json(outdir / "special_tokens_map.json", special_tokens_map())


def main(argv: list[str]) -> int:
    if len(argv) != 4:
        print(f"usage: {argv[0]} TINY_MODEL_DIR EMBED_OUTDIR CROSS_ENCODER_OUTDIR",
              file=sys.stderr)
        return 2
    build_embedder(pathlib.Path(argv[1]), pathlib.Path(argv[2]))
    build_cross_encoder(pathlib.Path(argv[3]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
