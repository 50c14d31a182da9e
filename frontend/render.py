"""Prompts -> token ids, with vLLM's length and vocabulary checks.

Long prompts are tokenized in a worker thread (``tokenizers`` releases the
GIL) so a 100k-character prompt never stalls the streams on the event loop.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from frontend.errors import ApiError, from_validation
from protocol.errors import ValidationError

if TYPE_CHECKING:
    from frontend.model import ModelInfo

OFFLOAD_CHARS = 8192  # total prompt characters above which tokenization leaves the loop


class Renderer:
    def __init__(self, model: "ModelInfo", max_model_len: int) -> None:
        self.model = model
        self.max_model_len = max_model_len

    async def render_prompts(self, prompts: list[str | list[int]], *,
                             add_special_tokens: bool = True,
                             truncate: int | None = None,
                             truncation_side: str | None = None,
                             detokenize: bool = False) -> list[tuple[list[int], str | None]]:
        """``[(token_ids, prompt text)]``, all validated, as vLLM's renderer does it.

        The text of a token prompt is None, or with ``detokenize`` (echo) its
        decoding, taken before truncation as vLLM does. ``truncate``
        (``truncate_prompt_tokens``) keeps that many tokens: for text prompts
        the tokenizer truncates (from the left, keeping BOS) unless the request
        names a ``truncation_side``; token prompts, and text prompts with an
        explicit side, are sliced afterwards.
        """
        if truncate is not None and truncate > self.max_model_len:
            raise from_validation(ValidationError(
                f"truncate_prompt_tokens={truncate} cannot be greater than max_model_len "
                f"= {self.max_model_len}. Please request a smaller truncation size.",
                parameter="truncate_prompt_tokens", value=truncate))
        texts = [self._check_text_length(p, truncate, truncation_side)
                 for p in prompts if isinstance(p, str)]
        max_length = None  # HF truncation in the tokenizer
        if truncate is not None and truncation_side is None:
            max_length = self.max_model_len - 1 if truncate == -1 else truncate
        encoded = iter(await self.encode_texts(texts, add_special_tokens, max_length)
                       if texts else ())
        rendered = []
        for prompt in prompts:
            if isinstance(prompt, str):
                ids, text = next(encoded), prompt
                if truncate is None and len(ids) > self.max_model_len + 1:
                    # vLLM's tokenizer call stops at max_model_len + 1 tokens
                    # (only the error message shows it).
                    ids = ids[:self.max_model_len + 1]
            else:
                ids = prompt
                text = self.model.decode(ids) if detokenize else None
            ids = self._truncate(ids, truncate, truncation_side)
            self.check_tokens(ids)
            rendered.append((ids, text))
        return rendered

    async def encode_texts(self, texts: list[str], add_special_tokens: bool,
                           max_length: int | None = None) -> list[list[int]]:
        if sum(map(len, texts)) < OFFLOAD_CHARS:
            return self._encode(texts, add_special_tokens, max_length)
        return await asyncio.get_running_loop().run_in_executor(
            None, self._encode, texts, add_special_tokens, max_length)

    def _encode(self, texts: list[str], add_special_tokens: bool,
                max_length: int | None) -> list[list[int]]:
        if max_length is None:
            return self.model.encode_batch(texts, add_special_tokens)
        return [self._encode_truncated(t, add_special_tokens, max_length) for t in texts]

    def _encode_truncated(self, text: str, add_special_tokens: bool, max_length: int) -> list[int]:
        """HF ``tokenizer(text, truncation=True, max_length=N)`` with vLLM's
        ``truncation_side="left"``: special tokens stay, text tokens are cut."""
        tokenizer = self.model.tokenizer
        encoding = tokenizer.encode(text, add_special_tokens=False)
        processor = tokenizer.post_processor
        num_special = (processor.num_special_tokens_to_add(False)
                       if add_special_tokens and processor is not None else 0)
        keep = max(max_length - num_special, 0)
        if len(encoding.ids) > keep:
            encoding.truncate(keep, direction="left")
        if add_special_tokens:
            encoding = tokenizer.post_process(encoding, None, True)
        return encoding.ids

    def _check_text_length(self, text: str, truncate: int | None,
                           side: str | None = None) -> str:
        """The text to tokenize: a cheap bound first, as no token is longer than
        ``max_chars_per_token``; with an explicit truncation side, an over-long
        text is cut to that bound instead (vLLM's ``_text_len_check``)."""
        max_chars = self.max_model_len * self.model.max_chars_per_token
        if len(text) <= max_chars:
            return text
        if truncate is not None:
            if side is None:
                return text
            return text[-max_chars:] if side == "left" else text[:max_chars]
        raise from_validation(ValidationError(
            f"This model's maximum context length is {self.max_model_len} tokens. "
            f"However, your prompt contains {len(text)} characters (more than "
            f"{max_chars} characters, which is the upper bound for "
            f"{self.max_model_len} input tokens). Please reduce the length of the "
            "input prompt.", parameter="input_text", value=len(text)))

    def _truncate(self, ids: list[int], truncate: int | None,
                  side: str | None = None) -> list[int]:
        """vLLM's ``_token_truncation``: keep ``truncate`` tokens (-1: the context
        less one), from the left unless the request asks for ``right``; the
        tokenizer's side is always left for generative models."""
        if truncate is None:
            return ids
        keep = self.max_model_len - 1 if truncate == -1 else truncate
        if keep >= len(ids):
            return ids
        if keep == 0:
            return []
        return ids[:keep] if side == "right" else ids[-keep:]

    def check_tokens(self, ids: list[int]) -> None:
        """Empty, over-long and out-of-vocabulary prompts never reach the engine."""
        n = len(ids)
        if n == 0:
            raise ApiError("The decoder prompt cannot be empty")
        if n > self.max_model_len:
            # A text prompt was cut at max_model_len + 1 tokens, hence vLLM's
            # "at least" (also said of a token prompt of exactly that length).
            at_least = "at least " if n == self.max_model_len + 1 else ""
            raise from_validation(ValidationError(
                f"This model's maximum context length is {self.max_model_len} tokens. "
                f"However, your prompt contains {at_least}{n} input tokens, which exceeds "
                "this limit even without any output tokens. Please reduce the length of "
                "the input prompt.", parameter="input_tokens", value=n))
        self.check_vocab(ids)

    def check_vocab(self, ids: list[int]) -> None:
        """vLLM's ``validate_token_ids`` (no parameter: a plain BadRequestError)."""
        if not ids:
            return
        lo, hi = min(ids), max(ids)
        if lo < 0:
            raise ApiError(f"Token id {lo} is out of vocabulary")
        if hi >= self.model.vocab_size:
            raise ApiError(f"Token id {hi} is out of vocabulary")
