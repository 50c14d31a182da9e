"""Model layouts built on the spot from the tiny model, for ``--model``/``--tokenizer-mode``.

Each layout is a model directory with the tiny model's weights and configs
(linked, so the same engine can serve it) and another kind of tokenizer:

* :func:`hub_cache`: the tiny model as a Hub id in a Hugging Face cache tree
  (``HF_HOME/hub/models--ORG--NAME/{blobs,snapshots/SHA,refs/main}``), as
  ``huggingface_hub`` lays out what it downloads;
* :func:`sentencepiece_layout`: a sentencepiece BPE ``tokenizer.model``
  (trained here, 1207 pieces like the model's vocabulary) and a Llama
  ``tokenizer_config.json``, no ``tokenizer.json``;
* :func:`tiktoken_layout`: the tiny tokenizer's byte-level BPE as a tiktoken
  ``tokenizer.model`` (base64 token, rank), its special tokens as added tokens;
* :func:`tekken_layout`: the same BPE as Mistral's ``tekken.json`` (v7, the
  control tokens first; served with ``--tokenizer-mode mistral``).
"""

from __future__ import annotations

import base64
import hashlib
import io
import json
import os
import pathlib
import shutil

from tokenizers import Tokenizer

from frontend.bytelevel import CHAR_BYTE

SHARED_FILES = ("config.json", "generation_config.json", "model.safetensors")
COMMIT = "0123456789abcdef0123456789abcdef01234567"


def _base(tiny: pathlib.Path, out: pathlib.Path) -> pathlib.Path:
    out.mkdir(parents=True, exist_ok=True)
    for name in SHARED_FILES:
        target = out / name
        if not target.exists():
            os.symlink(tiny / name, target)
    return out


def _chat_template(tiny: pathlib.Path) -> str:
    return json.loads((tiny / "tokenizer_config.json").read_text())["chat_template"]


def hub_cache(tiny: pathlib.Path, hf_home: pathlib.Path, repo_id: str,
              commit: str = COMMIT) -> pathlib.Path:
    """``repo_id`` in the cache under ``hf_home`` (its revision ``main``); returns
    the snapshot directory. Files are blobs named by their hash, linked from
    the snapshot, as huggingface_hub stores them."""
    repo = hf_home / "hub" / ("models--" + repo_id.replace("/", "--"))
    snapshot = repo / "snapshots" / commit
    (repo / "blobs").mkdir(parents=True, exist_ok=True)
    snapshot.mkdir(parents=True, exist_ok=True)
    for src in sorted(tiny.iterdir()):
        if not src.is_file():
            continue
        data = src.read_bytes()
        blob = repo / "blobs" / hashlib.sha256(data).hexdigest()
        if not blob.exists():
            blob.write_bytes(data)
        link = snapshot / src.name
        if not link.exists():
            os.symlink(os.path.relpath(blob, snapshot), link)
    (repo / "refs").mkdir(exist_ok=True)
    (repo / "refs" / "main").write_text(commit)
    return snapshot


def sentencepiece_layout(tiny: pathlib.Path, out: pathlib.Path) -> pathlib.Path:
    import sentencepiece as spm  # installed with vLLM (test-only here)

    from harness.tiny_model import make_corpus

    _base(tiny, out)
    if not (out / "tokenizer.model").exists():
        model = io.BytesIO()
        spm.SentencePieceTrainer.train(
            sentence_iterator=iter(make_corpus(200_000)), model_writer=model,
            vocab_size=1207, model_type="bpe", byte_fallback=True, character_coverage=0.9995,
            user_defined_symbols=["<|im_start|>", "<|im_end|>"], unk_id=0, bos_id=1, eos_id=2,
            pad_id=-1, num_threads=1, split_digits=True, allow_whitespace_only_pieces=True,
            remove_extra_whitespaces=False, normalization_rule_name="identity",
            minloglevel=2)
        (out / "tokenizer.model").write_bytes(model.getvalue())
    config = {"tokenizer_class": "LlamaTokenizer", "add_bos_token": True,
              "add_eos_token": False, "legacy": False, "bos_token": "<s>",
              "eos_token": "<|im_end|>", "unk_token": "<unk>",
              "clean_up_tokenization_spaces": False, "chat_template": _chat_template(tiny)}
    (out / "tokenizer_config.json").write_text(json.dumps(config, indent=1))
    return out


def _ranked_bpe(tiny: pathlib.Path) -> tuple[list[bytes], list[str]]:
    """The tiny tokenizer's byte-level BPE as tiktoken ranks (the 256 bytes in
    byte order, then the merged tokens in the order they were learned), and its
    added tokens in id order."""
    tok = Tokenizer.from_file(str(tiny / "tokenizer.json"))
    added = tok.get_added_tokens_decoder()
    vocab = tok.get_vocab(with_added_tokens=False)
    merged = [bytes(CHAR_BYTE[c] for c in text)
              for text, i in sorted(vocab.items(), key=lambda kv: kv[1]) if i not in added]
    ranked = [bytes([b]) for b in range(256)] + [t for t in merged if len(t) > 1]
    return ranked, [t.content for _, t in sorted(added.items())]


def tiktoken_layout(tiny: pathlib.Path, out: pathlib.Path) -> pathlib.Path:
    _base(tiny, out)
    ranked, specials = _ranked_bpe(tiny)
    lines = [f"{base64.b64encode(token).decode()} {rank}" for rank, token in enumerate(ranked)]
    (out / "tokenizer.model").write_text("\n".join(lines) + "\n")
    decoder = {str(len(ranked) + k): {"content": text, "special": True, "normalized": False,
                                      "lstrip": False, "rstrip": False, "single_word": False}
               for k, text in enumerate(specials)}
    config = {"tokenizer_class": "PreTrainedTokenizerFast", "bos_token": "<s>",
              "eos_token": "<|im_end|>", "added_tokens_decoder": decoder,
              "chat_template": _chat_template(tiny)}
    (out / "tokenizer_config.json").write_text(json.dumps(config, indent=1))
    return out


# mistral_common's v7 control tokens, in order (a tekken file lists them first).
TEKKEN_SPECIALS = ["<unk>", "<s>", "</s>", "[INST]", "[/INST]", "[AVAILABLE_TOOLS]",
                   "[/AVAILABLE_TOOLS]", "[TOOL_RESULTS]", "[/TOOL_RESULTS]", "[TOOL_CALLS]",
                   "[IMG]", "<pad>", "[IMG_BREAK]", "[IMG_END]", "[PREFIX]", "[MIDDLE]",
                   "[SUFFIX]", "[SYSTEM_PROMPT]", "[/SYSTEM_PROMPT]", "[TOOL_CONTENT]"]
TEKKEN_PATTERN = (r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+|"
                  r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*|"
                  r"\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+")


def tekken_layout(tiny: pathlib.Path, out: pathlib.Path) -> pathlib.Path:
    """tekken.json over the tiny BPE: ids 0..19 the control tokens, then the
    byte-level tokens by rank, 1207 in all like the model's vocabulary."""
    _base(tiny, out)
    ranked, _ = _ranked_bpe(tiny)
    num_special = len(TEKKEN_SPECIALS)
    ranked = ranked[:1207 - num_special]
    tekken = {
        "config": {"pattern": TEKKEN_PATTERN, "num_vocab_tokens": len(ranked),
                   "default_vocab_size": 1207, "default_num_special_tokens": num_special,
                   "version": "v7"},
        "vocab": [{"rank": rank, "token_bytes": base64.b64encode(token).decode(),
                   "token_str": token.decode("utf-8", "replace")}
                  for rank, token in enumerate(ranked)],
        "special_tokens": [{"rank": i, "token_str": text, "is_control": True}
                           for i, text in enumerate(TEKKEN_SPECIALS)],
    }
    (out / "tekken.json").write_text(json.dumps(tekken))
    return out


def copy_layout(src: pathlib.Path, out: pathlib.Path) -> pathlib.Path:
    shutil.copytree(src, out, symlinks=True, dirs_exist_ok=True)
    return out
