"""Reasoning parsers that run a declarative grammar (see :mod:`frontend.parsers.grammar`).

The grammar sees each delta once; tool markup is left in the content for the
tool parser.  Streaming keeps the reasoning token count; for a complete
output it is counted on a fresh parse.  A subclass says which grammar parser
to build (:meth:`GrammarReasoningParser.make_grammar_parser`).
"""

from __future__ import annotations

from collections.abc import Sequence

from frontend.parsers.grammar.parser import GrammarParser
from frontend.parsers.reasoning.base import ReasoningParser
from frontend.parsers.tokenizer import ParserTokenizer
from frontend.parsers.types import ParsedDelta


class GrammarReasoningParser(ReasoningParser):
    grammar_based = True
    keeps_special_tokens = True

    def __init__(
        self, tokenizer: ParserTokenizer, chat_template_kwargs: dict | None = None
    ) -> None:
        super().__init__(tokenizer, chat_template_kwargs)
        self.chat_template_kwargs = chat_template_kwargs
        self.grammar_parser = self.make_grammar_parser()
        self.grammar_parser.skip_tool_parsing = True
        self._streamed = False  # the streaming state holds the token count

    def make_grammar_parser(self) -> GrammarParser:
        raise NotImplementedError

    def is_reasoning_end(self, token_ids: Sequence[int]) -> bool:
        return self.grammar_parser.is_reasoning_end(token_ids)

    def extract_content_ids(self, token_ids: list[int]) -> list[int]:
        return self.grammar_parser.extract_content_ids(token_ids)

    def adjust_initial_state_from_prompt(self, prompt_ids: Sequence[int]) -> None:
        self.grammar_parser.adjust_initial_state_from_prompt(prompt_ids)

    def extract(self, text: str) -> tuple[str | None, str | None]:
        self._streamed = False
        return self.grammar_parser.extract_reasoning(text)

    def feed(self, delta_text: str, delta_ids: list[int]) -> ParsedDelta | None:
        self._streamed = True
        return self.grammar_parser.extract_reasoning_streaming(delta_text, delta_ids)

    def ended(self) -> bool:
        """Whether the grammar has processed the end of reasoning."""
        return self.grammar_parser.reasoning_ended

    def finish(self) -> ParsedDelta | None:
        return self.grammar_parser.finish_streaming()

    def fallback_content(self) -> str | None:
        return self.grammar_parser.streaming_fallback_content()

    def count_reasoning_tokens(self, token_ids: Sequence[int]) -> int:
        if self._streamed:
            return self.grammar_parser.reasoning_tokens
        if not token_ids:
            return 0
        return self.make_grammar_parser().count_reasoning_tokens_once(token_ids)
