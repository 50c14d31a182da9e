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
                             truncate: int | None = None) -> list[tuple[list[int], str | None]]:
        """``[(token_ids, prompt text or None for token prompts)]``, all validated."""
        texts = [p for p in prompts if isinstance(p, str)]
        for text in texts:
            self._check_text_length(text, truncate)
        encoded = iter(await self.encode_texts(texts, add_special_tokens) if texts else ())
        rendered = []
        for prompt in prompts:
            if isinstance(prompt, str):
                ids, text = next(encoded), prompt
            else:
                ids, text = prompt, None
            ids = self._truncate(ids, truncate)
            self.check_tokens(ids)
            rendered.append((ids, text))
        return rendered

    async def encode_texts(self, texts: list[str], add_special_tokens: bool) -> list[list[int]]:
        if sum(map(len, texts)) < OFFLOAD_CHARS:
            return self.model.encode_batch(texts, add_special_tokens)
        return await asyncio.get_running_loop().run_in_executor(
            None, self.model.encode_batch, texts, add_special_tokens)

    def _check_text_length(self, text: str, truncate: int | None) -> None:
        # A cheap bound before tokenizing: no token is longer than this.
        max_chars = self.max_model_len * self.model.max_chars_per_token
        if truncate is None and len(text) > max_chars:
            raise from_validation(ValidationError(
                f"This model's maximum context length is {self.max_model_len} tokens. "
                f"However, your prompt contains {len(text)} characters (more than "
                f"{max_chars} characters, which is the upper bound for "
                f"{self.max_model_len} input tokens). Please reduce the length of the "
                "input prompt.", parameter="input_text", value=len(text)))

    def _truncate(self, ids: list[int], truncate: int | None) -> list[int]:
        if truncate is None:
            return ids
        if truncate > self.max_model_len:
            raise from_validation(ValidationError(
                f"truncate_prompt_tokens={truncate} cannot be greater than max_model_len "
                f"= {self.max_model_len}. Please request a smaller truncation size.",
                parameter="truncate_prompt_tokens", value=truncate))
        keep = self.max_model_len - 1 if truncate == -1 else truncate
        if keep >= len(ids):
            return ids
        if keep == 0:
            return []
        side = self.model.tokenizer_config.get("truncation_side", "right")
        return ids[-keep:] if side == "left" else ids[:keep]

    def check_tokens(self, ids: list[int]) -> None:
        """Empty, over-long and out-of-vocabulary prompts never reach the engine."""
        n = len(ids)
        if n == 0:
            raise ApiError("The decoder prompt cannot be empty")
        if n > self.max_model_len:
            raise from_validation(ValidationError(
                f"This model's maximum context length is {self.max_model_len} tokens. "
                f"However, your prompt contains {n} input tokens, which exceeds this limit "
                "even without any output tokens. Please reduce the length of the input "
                "prompt.", parameter="input_tokens", value=n))
        lo, hi = min(ids), max(ids)
        if lo < 0:
            raise ApiError(f"Token id {lo} is out of vocabulary")
        if hi >= self.model.vocab_size:
            raise ApiError(f"Token id {hi} is out of vocabulary")
