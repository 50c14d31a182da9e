"""``poolside_v1`` (Laguna): ``deepseek_v3`` whose prompt check stops at the
current assistant turn's ``<assistant>`` token, so a ``</think>`` earlier in
the conversation does not end reasoning.
"""

from __future__ import annotations

from collections.abc import Sequence

from frontend.parsers.reasoning.deepseek_v3 import DeepSeekV3ReasoningParser
from frontend.parsers.tokenizer import ParserTokenizer

ASSISTANT = "<assistant>"


class PoolsideV1ReasoningParser(DeepSeekV3ReasoningParser):
    def __init__(
        self, tokenizer: ParserTokenizer, chat_template_kwargs: dict | None = None
    ) -> None:
        super().__init__(tokenizer, chat_template_kwargs)
        self.check_tokenizer(tokenizer)
        self.assistant_id = tokenizer.vocab[ASSISTANT]

    @classmethod
    def check_tokenizer(cls, tokenizer: ParserTokenizer) -> None:
        if ASSISTANT not in tokenizer.vocab:
            raise ValueError(f"Tokenizer must contain {ASSISTANT!r} token")

    def is_reasoning_end(self, token_ids: Sequence[int]) -> bool:
        if self.identity:
            return True
        for token_id in reversed(token_ids):
            if token_id == self.start_id:
                return False
            if token_id == self.end_id:
                return True
            if token_id == self.assistant_id:
                return False
        return False
