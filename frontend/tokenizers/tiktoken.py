"""A tiktoken BPE file (``tokenizer.model`` that is not sentencepiece, or
``tiktoken.model``) as a fast tokenizer, as transformers 5 converts it for vLLM.

The file is one ``<base64 token bytes> <rank>`` line per token. transformers'
TikTokenConverter turns the ranks into a byte-level BPE whose merges are every
split of a token into two tokens, in rank order, with tiktoken's default
pre-tokenizing regex; tokens of ``added_tokens_decoder`` beyond the file's
ranks become special tokens at their ids (``<|reserved_token_N|>`` filling any
gap), as transformers' ``_convert_from_tiktoken`` does.
"""

from __future__ import annotations

import base64
import pathlib
from typing import Any

from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers, processors

from frontend.bytelevel import BYTE_CHAR

# transformers' TikTokenConverter default pattern.
PATTERN = (
    r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}"""
    r"""\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"""
)
# transformers' name for a tiktoken file it never tries as sentencepiece.
LEGACY_NAME = "tiktoken.model"


def load_ranks(path: pathlib.Path) -> dict[bytes, int]:
    """tiktoken's load_tiktoken_bpe for a local file."""
    ranks: dict[bytes, int] = {}
    for line in path.read_bytes().splitlines():
        if line:
            token, rank = line.split()
            ranks[base64.b64decode(token)] = int(rank)
    return ranks


def convert(path: pathlib.Path, tokenizer_config: dict[str, Any]) -> Tokenizer:
    ranks = load_ranks(path)

    def text(token: bytes) -> str:
        return "".join(BYTE_CHAR[b] for b in token)

    vocab: dict[str, int] = {}
    merges: list[tuple[bytes, bytes, int]] = []
    for token, rank in ranks.items():
        vocab[text(token)] = rank
        local = [
            (token[:i], token[i:], rank)
            for i in range(1, len(token))
            if token[:i] in ranks and token[i:] in ranks
        ]
        local.sort(key=lambda m: (ranks[m[0]], ranks[m[1]]))
        merges.extend(local)
    merges.sort(key=lambda m: m[2])
    tokenizer = Tokenizer(
        models.BPE(vocab, [(text(a), text(b)) for a, b, _ in merges], fuse_unk=False)
    )
    tokenizer.model.ignore_merges = True
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(PATTERN), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.add_special_tokens(
        [
            AddedToken(t, normalized=False, special=True)
            for t in _extra_special_tokens(tokenizer_config, len(ranks))
        ]
    )
    tokenizer.post_processor = processors.ByteLevel(trim_offsets=False)
    return tokenizer


def _extra_special_tokens(config: dict[str, Any], base_size: int) -> list[str]:
    """transformers' _convert_from_tiktoken: added tokens past the file's ranks,
    contiguous from ``base_size`` (placeholders fill the gaps), then the config's
    ``extra_special_tokens``."""
    added = {
        int(i): (t["content"] if isinstance(t, dict) else str(t))
        for i, t in (config.get("added_tokens_decoder") or {}).items()
    }
    extra = config.get("extra_special_tokens") or []
    if isinstance(extra, dict):
        extra = list(extra)
    if added and max(added) >= base_size:
        filled = [added.get(i, f"<|reserved_token_{i}|>") for i in range(base_size, max(added) + 1)]
        return filled + [t for t in extra if t not in set(filled)]
    return list(extra)
