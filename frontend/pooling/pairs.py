"""Query/document tokenization for scores, as vLLM's scoring io_processor does it.

* ``truncate_text``: ``max_tokens_per_query``/``_doc`` cut a text at the
  character where its N-th token ends (``truncate_text_to_tokens``);
* ``encode_pair``: a cross-encoder's ``tokenizer(text=query, text_pair=doc,
  truncation=..., max_length=...)`` with its ``token_type_ids``; truncation is
  the tokenizer's own (``longest_first``, or ``only_second`` for a per-document
  limit), so this uses a private copy of the tokenizer whose truncation can be
  switched per call under a lock (the shared one is used from worker threads);
* ``compress_token_type_ids``: what the engine gets instead of the type ids.
"""

from __future__ import annotations

import threading

from tokenizers import Tokenizer

from frontend.errors import ApiError
from frontend.model import ModelInfo


class PairTokenizer:
    def __init__(self, model: ModelInfo) -> None:
        self._main = model.tokenizer
        self._tok = Tokenizer.from_str(model.tokenizer.to_str())
        self._tok.no_truncation()
        self._tok.no_padding()
        self._lock = threading.Lock()
        processor = model.tokenizer.post_processor
        self.num_special_pair = processor.num_special_tokens_to_add(True) if processor else 0

    def truncate_text(self, text: str, max_tokens: int) -> str:
        """vLLM's truncate_text_to_tokens (offsets, no special tokens)."""
        if max_tokens <= 0:
            return ""
        while text:
            encoding = self._main.encode(text, add_special_tokens=False)
            if len(encoding.ids) <= max_tokens:
                break
            offsets = encoding.offsets
            char_end = min(offsets[max_tokens - 1][1], offsets[max_tokens][0])
            if char_end >= len(text):
                char_end = len(text) - 1
            text = text[:char_end]
        return text

    def encode(
        self,
        text: str,
        pair: str | None,
        *,
        max_length: int | None,
        strategy: str = "longest_first",
        side: str = "right",
        add_special_tokens: bool = True,
    ) -> tuple[list[int], list[int]]:
        """(input_ids, token_type_ids) of ``tokenizer(text, pair, truncation=...)``
        (transformers encodes an empty ``pair`` as no pair)."""
        pair = pair or None
        with self._lock:
            try:
                if max_length is not None:
                    self._tok.enable_truncation(max_length, strategy=strategy, direction=side)
                encoding = self._tok.encode(text, pair, add_special_tokens=add_special_tokens)
            except Exception as e:  # "Truncation error: ...": vLLM's 500 for it
                raise ApiError(str(e), 500, "InternalServerError") from None
            finally:
                self._tok.no_truncation()
        return encoding.ids, encoding.type_ids


def compress_token_type_ids(token_type_ids: list[int]) -> int:
    """The position of the first 1 (the document's start), or the length."""
    first_one = len(token_type_ids)
    for i, type_id in enumerate(token_type_ids):
        if (type_id == 0 and first_one < i) or type_id > 1:
            raise ApiError(
                "Token type ids are expected to be a sequence of zeros followed "
                "by a sequence of ones"
            )
        if type_id == 1 and first_one > i:
            first_one = i
    return first_one
