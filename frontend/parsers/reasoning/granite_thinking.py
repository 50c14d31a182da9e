"""``granite_thinking_parser``: IBM Granite 4.2 thinking, Nemotron 3's parsing
with the newlines before the content dropped; reasoning ends (for the tool
parser) once content has started."""

from __future__ import annotations

from frontend.parsers.grammar.nemotron_v3 import GraniteThinkingParser
from frontend.parsers.grammar.parser import GrammarParser
from frontend.parsers.reasoning.grammar_based import GrammarReasoningParser


class GraniteThinkingReasoningParser(GrammarReasoningParser):
    grammar_parser: GraniteThinkingParser

    def make_grammar_parser(self) -> GrammarParser:
        return GraniteThinkingParser(self.tokenizer, chat_template_kwargs=self.chat_template_kwargs)

    def ended(self) -> bool:
        return self.grammar_parser.reasoning_ended and self.grammar_parser.content_started
