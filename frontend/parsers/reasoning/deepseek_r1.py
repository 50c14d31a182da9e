"""``deepseek_r1``: reasoning in ``<think>...</think>``, DeepSeek-R1 style.

The ``<think>`` may be missing (R1's template puts it in the prompt): until
``</think>`` everything is reasoning.  Markers are found by token id while
streaming (``<think>``/``</think>`` must be single tokens).
"""

from __future__ import annotations

from collections.abc import Sequence

from frontend.parsers.text_so_far import TextSoFarReasoningParser
from frontend.parsers.tokenizer import ParserTokenizer
from frontend.parsers.types import ParsedDelta


class ThinkTagsReasoningParser(TextSoFarReasoningParser):
    """Reasoning between two marker tokens (vLLM's BaseThinkingReasoningParser).

    A subclass whose request turns thinking off (``reasoning_on`` false) is
    vLLM's IdentityReasoningParser for it: no markers needed, the whole
    output is content, reasoning is over from the prompt on.
    """

    start_token = "<think>"
    end_token = "</think>"
    # The markers are looked up (and required) even when thinking is off.
    markers_always = False

    def __init__(
        self, tokenizer: ParserTokenizer, chat_template_kwargs: dict | None = None
    ) -> None:
        super().__init__(tokenizer, chat_template_kwargs)
        self.identity = not self.reasoning_on(chat_template_kwargs or {})
        if self.identity and not self.markers_always:
            return
        if self.start_token not in tokenizer.vocab or self.end_token not in tokenizer.vocab:
            raise ValueError(
                f"the reasoning parser needs the {self.start_token} and {self.end_token} tokens"
            )
        self.start_id = tokenizer.vocab[self.start_token]
        self.end_id = tokenizer.vocab[self.end_token]

    def reasoning_on(self, chat_template_kwargs: dict) -> bool:
        """Whether this request parses reasoning at all (else: identity)."""
        return True

    # -- the identity parser (thinking off) -------------------------------------------

    def feed(self, delta_text: str, delta_ids: list[int]) -> ParsedDelta | None:
        if self.identity:
            return ParsedDelta(content=delta_text) if delta_text else None
        return super().feed(delta_text, delta_ids)

    def ended(self) -> bool:
        return self.identity or super().ended()

    @classmethod
    def check_tokenizer(cls, tokenizer: ParserTokenizer) -> None:
        if cls.start_token not in tokenizer.vocab or cls.end_token not in tokenizer.vocab:
            raise ValueError(
                f"the reasoning parser needs the {cls.start_token} and {cls.end_token} tokens"
            )

    def is_reasoning_end(self, token_ids: Sequence[int]) -> bool:
        if self.identity:
            return True
        for token_id in reversed(token_ids):
            if token_id == self.start_id:
                return False
            if token_id == self.end_id:
                return True
        return False

    def is_reasoning_end_streaming(
        self, token_ids: Sequence[int], delta_ids: Sequence[int]
    ) -> bool:
        return self.end_id in delta_ids

    def extract_content_ids(self, token_ids: list[int]) -> list[int]:
        if self.identity:
            return token_ids
        if self.end_id not in token_ids[:-1]:
            return []
        return token_ids[token_ids.index(self.end_id) + 1 :]

    def extract(self, text: str) -> tuple[str | None, str | None]:
        if self.identity:
            return None, text
        before, start, after = text.partition(self.start_token)
        text = after if start else before
        if self.end_token not in text:
            return text, None
        reasoning, _, content = text.partition(self.end_token)
        return reasoning, content or None

    def extract_streaming(
        self,
        previous_text: str,
        current_text: str,
        delta_text: str,
        previous_ids: Sequence[int],
        current_ids: Sequence[int],
        delta_ids: Sequence[int],
    ) -> ParsedDelta | None:
        if len(delta_ids) == 1 and delta_ids[0] in (self.start_id, self.end_id):
            return None  # a lone marker token
        if self.start_id in previous_ids:
            return self._after_start(delta_text, previous_ids, delta_ids)
        if self.start_id in delta_ids:
            if self.end_id in delta_ids:
                start = delta_text.find(self.start_token)
                end = delta_text.find(self.end_token)
                content = delta_text[end + len(self.end_token) :]
                return ParsedDelta(
                    reasoning=delta_text[start + len(self.start_token) : end],
                    content=content or None,
                )
            return ParsedDelta(reasoning=delta_text)
        return ParsedDelta(content=delta_text)

    def _after_start(
        self, delta_text: str, previous_ids: Sequence[int], delta_ids: Sequence[int]
    ) -> ParsedDelta:
        if self.end_id in delta_ids:
            end = delta_text.find(self.end_token)
            content = delta_text[end + len(self.end_token) :]
            return ParsedDelta(reasoning=delta_text[:end], content=content or None)
        if self.end_id in previous_ids:
            return ParsedDelta(content=delta_text)
        return ParsedDelta(reasoning=delta_text)

    def count_reasoning_tokens(self, token_ids: Sequence[int]) -> int:
        if self.identity:
            return 0
        return self.count_between_markers(token_ids)

    def count_between_markers(self, token_ids: Sequence[int]) -> int:
        count = depth = 0
        for token_id in token_ids:
            if token_id == self.start_id:
                depth += 1
            elif token_id == self.end_id:
                depth = max(0, depth - 1)
            elif depth > 0:
                count += 1
        return count


class DeepSeekR1ReasoningParser(ThinkTagsReasoningParser):
    def extract_streaming(
        self,
        previous_text: str,
        current_text: str,
        delta_text: str,
        previous_ids: Sequence[int],
        current_ids: Sequence[int],
        delta_ids: Sequence[int],
    ) -> ParsedDelta | None:
        delta = super().extract_streaming(
            previous_text, current_text, delta_text, previous_ids, current_ids, delta_ids
        )
        if delta is None or self.start_id in previous_ids or self.start_id in delta_ids:
            return delta
        # No <think> in the output: it was in the prompt, reasoning is on.
        return self._after_start(delta_text, previous_ids, delta_ids)
