"""``gemma4``: Gemma 4 tool calls, on the Gemma 4 grammar
(:mod:`frontend.parsers.grammar.gemma4`).

No structural tag, and tool_choice "required"/named are parsed as "auto":
the model writes its own ``<|tool_call>call:...`` format, which a forced JSON
grammar would break (vLLM's ``Gemma4EngineToolParser.adjust_request``).
"""

from __future__ import annotations

from typing import ClassVar

from frontend.parsers.grammar.gemma4 import Gemma4Parser
from frontend.parsers.grammar.parser import GrammarParser
from frontend.parsers.tool.grammar_based import GrammarToolParser


class Gemma4EngineToolParser(GrammarToolParser):
    supports_required_and_named: ClassVar[bool] = False

    def make_grammar_parser(self, chat_template_kwargs: dict | None) -> GrammarParser:
        return Gemma4Parser(self.tokenizer, self.tools, self.tool_choice, chat_template_kwargs)
