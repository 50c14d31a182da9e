"""``gemma4``: Gemma 4 channel reasoning, on the Gemma 4 grammar.

``<|channel>thought\n...<channel|>`` is reasoning (without its ``thought\n``);
a ``<|tool_call>`` ends it too.  With ``enable_thinking`` the output waits for
reasoning; a prompt ending in an open channel continues it.
"""

from __future__ import annotations

from frontend.parsers.grammar.gemma4 import Gemma4Parser
from frontend.parsers.grammar.parser import GrammarParser
from frontend.parsers.reasoning.grammar_based import GrammarReasoningParser


class Gemma4ParserReasoningAdapter(GrammarReasoningParser):
    def make_grammar_parser(self) -> GrammarParser:
        return Gemma4Parser(self.tokenizer, chat_template_kwargs=self.chat_template_kwargs)
