"""The reasoning parser protocol, per delta: what the composite ``OutputParser`` calls.

One instance per choice.  ``extract`` splits a complete output into
(reasoning, content); ``feed`` classifies one engine step's new text and
token ids, after which ``ended`` tells whether reasoning is over;
``finish`` returns what the parser still holds back (at the end of
reasoning, or of the output).  ``is_reasoning_end`` tells whether a token
sequence (the prompt) has already left reasoning.

Written on a grammar (subclass
:class:`~frontend.parsers.reasoning.grammar_based.GrammarReasoningParser`) or
on the text so far (subclass
:class:`~frontend.parsers.text_so_far.TextSoFarReasoningParser`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, ClassVar

from frontend.parsers.tokenizer import ParserTokenizer
from frontend.parsers.types import ParsedDelta


class ReasoningParser:
    # vLLM's adjust_request sets skip_special_tokens=False for this parser.
    keeps_special_tokens: ClassVar[bool] = False
    # And spaces_between_special_tokens=False; see ToolParser.joins_special_tokens.
    joins_special_tokens: ClassVar[bool] = False
    # For "required"/named, Mistral's parsers force a bare [{"name", "arguments"}] array.
    mistral_guided_schema: ClassVar[bool] = False
    # A grammar parser (vLLM's "engine-based"); see ToolParser.grammar_based.
    grammar_based: ClassVar[bool] = False
    # See ToolParser.cohere_structural_tags.
    cohere_structural_tags: ClassVar[bool] = False
    # Rewrites the choice's parsed output (vLLM's MiniCPM-V parser recovers
    # escaped newlines): a class whose instances have ``parsed(reasoning,
    # content)`` and ``delta(delta, finished=...)``; one per choice.
    output_rewriter: ClassVar[type | None] = None
    # One parser of the whole output; see ToolParser.output_parser.
    output_parser: ClassVar[Callable[..., Any] | None] = None
    # The model-specific composite vLLM picks for this parser; see ToolParser.vllm_composite.
    vllm_composite: ClassVar[str | None] = None

    def __init__(
        self, tokenizer: ParserTokenizer, chat_template_kwargs: dict | None = None
    ) -> None:
        self.tokenizer = tokenizer

    def set_request(self, tools: list[dict] | None, tool_choice: object) -> None:
        """The request's tools and resolved tool_choice, for the parsers whose
        output depends on them (vLLM passes them the request)."""

    @classmethod
    def check_tokenizer(cls, tokenizer: ParserTokenizer) -> None:
        """Raise ValueError if the model's tokenizer lacks the parser's tokens."""

    def is_reasoning_end(self, token_ids: Sequence[int]) -> bool:
        raise NotImplementedError

    def extract_content_ids(self, token_ids: list[int]) -> list[int]:
        raise NotImplementedError

    def adjust_initial_state_from_prompt(self, prompt_ids: Sequence[int]) -> None:
        """Called before the first ``feed`` when the prompt leaves reasoning
        open: a parser may start where the prompt left off."""

    def extract(self, text: str) -> tuple[str | None, str | None]:
        raise NotImplementedError

    def feed(self, delta_text: str, delta_ids: list[int]) -> ParsedDelta | None:
        """One engine step's new text and token ids -> what to send for it."""
        raise NotImplementedError

    def ended(self) -> bool:
        """Whether reasoning is over, as of the last ``feed``."""
        raise NotImplementedError

    def finish(self) -> ParsedDelta | None:
        """Text still held back (after the end of reasoning, or of the output)."""
        return None

    def strip_content_streaming(self, previous_content: str, content: str) -> str | None:
        """For ``vllm_composite`` "kimi_k3" without a tool parser: what the
        content after reasoning so far (``content``; ``previous_content`` a
        step before) adds, as vLLM's KimiK3Parser sends it."""
        raise NotImplementedError

    def fallback_content(self) -> str | None:
        """At the end of a stream whose reasoning never ended: text to send as
        content (vLLM's ``get_streaming_fallback_content``), or None."""
        return None

    def count_reasoning_tokens(self, token_ids: Sequence[int]) -> int:
        return 0
