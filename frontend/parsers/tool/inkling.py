"""``inkling``: Inkling tool blocks, on the Inkling grammar
(:mod:`frontend.parsers.grammar.inkling`).

vLLM wires no structural tag for Inkling yet: tool_choice "required"/named
are parsed as "auto".
"""

from __future__ import annotations

from typing import ClassVar

from frontend.parsers.grammar.inkling import InklingParser
from frontend.parsers.grammar.parser import GrammarParser
from frontend.parsers.tool.grammar_based import GrammarToolParser


class InklingEngineToolParser(GrammarToolParser):
    supports_required_and_named: ClassVar[bool] = False

    def make_grammar_parser(self, chat_template_kwargs: dict | None) -> GrammarParser:
        return InklingParser(self.tokenizer, self.tools, self.tool_choice)
