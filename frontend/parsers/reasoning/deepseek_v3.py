"""``deepseek_v3`` and ``holo2``: DeepSeek-R1's ``<think>`` parsing when the
request asks for thinking, else none (vLLM's IdentityReasoningParser).

``deepseek_v3`` thinks only with ``thinking`` or ``enable_thinking`` true in
the chat template kwargs; ``holo2`` (Holo2) thinks unless one of the two is
given.
"""

from __future__ import annotations

from frontend.parsers.reasoning.deepseek_r1 import DeepSeekR1ReasoningParser
from frontend.parsers.tokenizer import ParserTokenizer


class DeepSeekV3ReasoningParser(DeepSeekR1ReasoningParser):
    @classmethod
    def check_tokenizer(cls, tokenizer: ParserTokenizer) -> None:
        """The markers are needed only by a request that thinks."""

    def reasoning_on(self, chat_template_kwargs: dict) -> bool:
        return bool(chat_template_kwargs.get("thinking", False)) or bool(
            chat_template_kwargs.get("enable_thinking", False)
        )


class DeepSeekV3ReasoningWithThinkingParser(DeepSeekV3ReasoningParser):
    def __init__(
        self, tokenizer: ParserTokenizer, chat_template_kwargs: dict | None = None
    ) -> None:
        kwargs = chat_template_kwargs or {}
        if kwargs.get("thinking") is None and kwargs.get("enable_thinking") is None:
            # As vLLM's: set in the request's (non-empty) kwargs themselves,
            # which then go to the engine as its reasoning_parser_kwargs.
            kwargs["thinking"] = kwargs["enable_thinking"] = True
        super().__init__(tokenizer, kwargs)
