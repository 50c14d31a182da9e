"""``hy_v3``: Hunyuan's ``<think>...</think>`` (DeepSeek-R1 style), only when
the chat template kwargs' ``reasoning_effort`` is given and not
``"no_think"``; otherwise no reasoning parsing (but the markers are still
required, and the reasoning token count still counts between them).

The markers carry the tokenizer config's ``token_suffix``
(``<think{suffix}>``).
"""

from __future__ import annotations

from collections.abc import Sequence

from frontend.parsers.reasoning.deepseek_r1 import DeepSeekR1ReasoningParser
from frontend.parsers.tokenizer import ParserTokenizer


class HYV3ReasoningParser(DeepSeekR1ReasoningParser):
    markers_always = True

    def __init__(
        self, tokenizer: ParserTokenizer, chat_template_kwargs: dict | None = None
    ) -> None:
        suffix = tokenizer.init_kwargs.get("token_suffix") or ""
        self.start_token = f"<think{suffix}>"
        self.end_token = f"</think{suffix}>"
        super().__init__(tokenizer, chat_template_kwargs)

    @classmethod
    def check_tokenizer(cls, tokenizer: ParserTokenizer) -> None:
        suffix = tokenizer.init_kwargs.get("token_suffix") or ""
        for token in (f"<think{suffix}>", f"</think{suffix}>"):
            if token not in tokenizer.vocab:
                raise ValueError(f"the hy_v3 reasoning parser needs the {token} token")

    def count_reasoning_tokens(self, token_ids: Sequence[int]) -> int:
        # vLLM counts between the markers even when thinking is off.
        return self.count_between_markers(token_ids)

    def reasoning_on(self, chat_template_kwargs: dict) -> bool:
        return (chat_template_kwargs.get("reasoning_effort") or "no_think") != "no_think"
