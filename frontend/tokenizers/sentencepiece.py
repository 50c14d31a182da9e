"""A sentencepiece ``tokenizer.model`` (no ``tokenizer.json``) as a fast tokenizer.

vLLM 0.32 loads such a directory with transformers 5, which converts the
sentencepiece model once into a ``tokenizers`` pipeline built by the
tokenizer class that ``tokenizer_config.json`` names. This module does the
same conversion for the Llama family (``LlamaTokenizer``: Llama 1/2, Mistral
v1, CodeLlama, and what ``model_type`` llama/mistral maps to), reading the
model file's protobuf itself (no sentencepiece or protobuf package needed):
a byte-fallback BPE over the model's pieces, with merges derived from them
as transformers derives them, a Metaspace pre-tokenizer, and the BOS/EOS
template of ``add_bos_token``/``add_eos_token``.
"""

from __future__ import annotations

import pathlib
import struct
from dataclasses import dataclass, field
from typing import Any

from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, processors

# Tokenizer classes converted as transformers' LlamaTokenizer converts them.
LLAMA_CLASSES = {
    "LlamaTokenizer",
    "LlamaTokenizerFast",
    "CodeLlamaTokenizer",
    "CodeLlamaTokenizerFast",
}
LLAMA_MODEL_TYPES = {"llama", "mistral"}

# sentencepiece_model.proto piece types
_CONTROL, _USER_DEFINED = 3, 4


@dataclass
class SpmModel:
    """The parts of a sentencepiece ModelProto a conversion needs."""

    pieces: list[tuple[str, float, int]] = field(default_factory=list)  # piece, score, type
    model_type: int = 1  # 1 unigram, 2 bpe
    unk_id: int = 0
    bos_id: int = 1
    eos_id: int = 2
    byte_fallback: bool = False


def is_sentencepiece(path: pathlib.Path) -> bool:
    """Whether ``path`` parses as a sentencepiece model (a tiktoken file does not)."""
    try:
        return bool(read_model(path.read_bytes()).pieces)
    except (ValueError, IndexError, struct.error, UnicodeDecodeError):
        return False


def read_model(data: bytes) -> SpmModel:
    """Decode the ModelProto fields used here (protobuf wire format)."""
    model = SpmModel()
    for number, value in _fields(data):
        if number == 1:  # repeated SentencePiece pieces
            piece, score, kind = "", 0.0, 1
            for n, v in _fields(value):
                if n == 1:
                    piece = v.decode("utf-8")
                elif n == 2:
                    score = struct.unpack("<f", v)[0]
                elif n == 3:
                    kind = v
            model.pieces.append((piece, score, kind))
        elif number == 2:  # TrainerSpec
            for n, v in _fields(value):
                if n == 3:
                    model.model_type = v
                elif n == 35:
                    model.byte_fallback = bool(v)
                elif n in (40, 41, 42):
                    setattr(model, {40: "unk_id", 41: "bos_id", 42: "eos_id"}[n], _signed32(v))
    return model


def convert(
    path: pathlib.Path, tokenizer_config: dict[str, Any], model_type: str | None
) -> Tokenizer:
    """``tokenizer.model`` -> the fast tokenizer transformers would build.
    Raises ValueError for a tokenizer class this frontend cannot convert."""
    cls = tokenizer_config.get("tokenizer_class")
    if cls not in LLAMA_CLASSES and not (cls is None and model_type in LLAMA_MODEL_TYPES):
        raise ValueError(
            f"{path}: a sentencepiece tokenizer of class {cls or model_type!r} without a "
            "tokenizer.json; this frontend converts Llama-family sentencepiece tokenizers "
            f"({', '.join(sorted(LLAMA_CLASSES))}): add the model's tokenizer.json"
        )
    spm = read_model(path.read_bytes())
    vocab = {piece: i for i, (piece, _, _) in enumerate(spm.pieces)}
    tokenizer = Tokenizer(
        models.BPE(
            vocab=vocab, merges=_merges(vocab), fuse_unk=True, byte_fallback=True, dropout=None
        )
    )
    legacy = tokenizer_config.get("legacy", False)
    add_prefix_space = tokenizer_config.get("add_prefix_space")
    add_prefix_space = True if add_prefix_space is None else add_prefix_space
    scheme = ("first" if not legacy else "always") if add_prefix_space else "never"
    tokenizer.pre_tokenizer = pre_tokenizers.Metaspace(
        replacement="▁", prepend_scheme=scheme, split=False
    )
    steps = [decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse()]
    if add_prefix_space:
        steps.append(decoders.Strip(content=" ", left=1))
    tokenizer.decoder = decoders.Sequence(steps)
    _add_tokens(tokenizer, spm, tokenizer_config)
    _post_processor(tokenizer, spm, tokenizer_config)
    return tokenizer


def special_tokens(spm_path: pathlib.Path) -> dict[str, str]:
    """bos/eos/unk token texts of the model (for a config that names none)."""
    spm = read_model(spm_path.read_bytes())
    out = {}
    for key, index in (
        ("bos_token", spm.bos_id),
        ("eos_token", spm.eos_id),
        ("unk_token", spm.unk_id),
    ):
        if 0 <= index < len(spm.pieces):
            out[key] = spm.pieces[index][0]
    return out


def _merges(vocab: dict[str, int]) -> list[tuple[str, str]]:
    """transformers' generate_merges(vocab): every split of a piece into two
    pieces, ordered by the merged piece's id, then the parts' lengths."""
    merges: list[tuple[str, str, int]] = []
    for merged, merged_id in vocab.items():
        local = [
            (merged[:i], merged[i:])
            for i in range(1, len(merged))
            if merged[:i] in vocab and merged[i:] in vocab
        ]
        local.sort(key=lambda lr: (vocab[lr[0]], vocab[lr[1]]))
        merges.extend((left, right, merged_id) for left, right in local)
    merges.sort(key=lambda m: (m[2], len(m[0]), len(m[1])))
    return [(left, right) for left, right, _ in merges]


def _add_tokens(tokenizer: Tokenizer, spm: SpmModel, config: dict[str, Any]) -> None:
    """The model's control and user-defined pieces, then tokenizer_config's
    added_tokens_decoder (ids already in the vocabulary keep their id). The
    tokens the config names (bos, eos, unk, pad ...) are special, as in
    transformers."""
    named = {
        _content(config.get(key))
        for key in (
            "bos_token",
            "eos_token",
            "unk_token",
            "pad_token",
            "sep_token",
            "cls_token",
            "mask_token",
        )
    }
    named |= {_content(t) for t in config.get("additional_special_tokens") or []}
    tokens = [
        AddedToken(piece, normalized=False, special=kind == _CONTROL or piece in named)
        for piece, _, kind in spm.pieces
        if kind in (_CONTROL, _USER_DEFINED)
    ]
    for _, spec in sorted(
        (config.get("added_tokens_decoder") or {}).items(), key=lambda item: int(item[0])
    ):
        if isinstance(spec, dict):
            tokens.append(
                AddedToken(
                    spec["content"],
                    special=spec.get("special", False),
                    normalized=spec.get("normalized", False),
                    lstrip=spec.get("lstrip", False),
                    rstrip=spec.get("rstrip", False),
                    single_word=spec.get("single_word", False),
                )
            )
    tokenizer.add_tokens(tokens)


def _post_processor(tokenizer: Tokenizer, spm: SpmModel, config: dict[str, Any]) -> None:
    bos = _content(config.get("bos_token")) or _piece(spm, spm.bos_id)
    eos = _content(config.get("eos_token")) or _piece(spm, spm.eos_id)
    add_bos = bool(config.get("add_bos_token", False)) and bos is not None
    add_eos = bool(config.get("add_eos_token", False)) and eos is not None
    single = " ".join(
        [*([f"{bos}:0"] if add_bos else []), "$A:0", *([f"{eos}:0"] if add_eos else [])]
    )
    pair = " ".join(
        [single, *([f"{bos}:1"] if add_bos else []), "$B:1", *([f"{eos}:1"] if add_eos else [])]
    )
    # add_bos / add_eos already imply the token is not None.
    special = [
        (t, tokenizer.token_to_id(t))
        for t, on in ((bos, add_bos), (eos, add_eos))
        if on and t is not None
    ]
    tokenizer.post_processor = processors.TemplateProcessing(
        single=single, pair=pair, special_tokens=special
    )


def _content(value: Any) -> str | None:
    return value.get("content") if isinstance(value, dict) else value


def _piece(spm: SpmModel, index: int) -> str | None:
    return spm.pieces[index][0] if 0 <= index < len(spm.pieces) else None


# ------------------------------------------------------------ protobuf wire format
def _varint(data: bytes, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        byte = data[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, pos
        shift += 7


def _signed32(value: int) -> int:
    value &= (1 << 64) - 1
    return value - (1 << 64) if value >= 1 << 63 else value


def _fields(data: bytes):
    """(field number, value): ints for varints, bytes for the others."""
    pos = 0
    while pos < len(data):
        key, pos = _varint(data, pos)
        number, wire = key >> 3, key & 7
        value: int | bytes
        if wire == 0:
            value, pos = _varint(data, pos)
        elif wire == 1:
            value, pos = data[pos : pos + 8], pos + 8
        elif wire == 2:
            length, pos = _varint(data, pos)
            value, pos = data[pos : pos + length], pos + length
        elif wire == 5:
            value, pos = data[pos : pos + 4], pos + 4
        else:
            raise ValueError(f"protobuf wire type {wire} not expected")
        yield number, value
