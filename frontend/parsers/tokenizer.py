"""The few tokenizer facts the parsers use, behind one small object.

vLLM's parsers ask a Hugging Face tokenizer for ``get_vocab()`` (to find their
marker tokens' ids), ``decode([id])`` (to know a single token's text) and
``all_special_tokens``/``all_special_ids`` (tokens the declarative parsers drop
from content).  :class:`ParserTokenizer` gives the same answers from the
frontend's ``tokenizers``-based :class:`~frontend.model.ModelInfo`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from frontend.model import ModelInfo

# transformers' named special tokens, in its order (SPECIAL_TOKENS_ATTRIBUTES).
_NAMED_SPECIAL = (
    "bos_token",
    "eos_token",
    "unk_token",
    "sep_token",
    "pad_token",
    "cls_token",
    "mask_token",
)


class ParserTokenizer:
    """Vocabulary, special tokens and single-token texts of the served model."""

    def __init__(
        self,
        vocab: dict[str, int],
        special_tokens: dict[str, int],
        decode: Callable[[list[int]], str],
        init_kwargs: dict[str, Any] | None = None,
        encode: Callable[[str], list[int]] | None = None,
    ) -> None:
        self.vocab = vocab
        # text -> id, as transformers' all_special_tokens / all_special_ids.
        self.special_tokens = special_tokens
        self._decode = decode
        # tokenizer_config.json (transformers' init_kwargs), for the few
        # parsers that read a setting there (hy_v3's token_suffix).
        self.init_kwargs = init_kwargs or {}
        self._encode = encode
        self._texts: dict[int, str] = {}
        # What parsers derive from the tokenizer once (grammar tables).
        self.cache: dict = {}

    def token_text(self, token_id: int) -> str:
        """``decode([token_id])`` without skipping special tokens, cached."""
        text = self._texts.get(token_id)
        if text is None:
            text = self._texts[token_id] = self._decode([token_id])
        return text

    def decode(self, token_ids: list[int]) -> str:
        return self._decode(token_ids)

    def encode(self, text: str) -> list[int]:
        """``encode(text, add_special_tokens=False)``."""
        if self._encode is None:
            raise NotImplementedError("this tokenizer cannot encode")
        return self._encode(text)

    @classmethod
    def from_model(cls, model: ModelInfo) -> ParserTokenizer:
        vocab = model.tokenizer.get_vocab(with_added_tokens=True)
        special: dict[str, int] = {}
        for text in _special_token_texts(model.tokenizer_config):
            token_id = vocab.get(text)
            if token_id is not None:
                special.setdefault(text, token_id)
        return cls(
            vocab,
            special,
            model.decode,
            model.tokenizer_config,
            lambda text: model.encode(text, add_special_tokens=False),
        )


def _special_token_texts(config: dict[str, Any]) -> list[str]:
    """transformers 5's ``all_special_tokens``: named tokens, then the extra ones."""
    texts: list[str] = []
    for key in _NAMED_SPECIAL:
        text = _content(config.get(key))
        if text:
            texts.append(text)
    extra = config.get("extra_special_tokens") or config.get("additional_special_tokens")
    if isinstance(extra, dict):
        extra = list(extra.values())
    for item in extra or ():
        text = _content(item)
        if text:
            texts.append(text)
    return texts


def _content(value: Any) -> str | None:
    if isinstance(value, dict):
        return value.get("content")
    return value if isinstance(value, str) else None
