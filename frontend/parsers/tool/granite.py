"""``granite``: Granite 3.0/3.1 JSON-array tool calls, on the Granite grammar
(:mod:`frontend.parsers.grammar.granite`).  (``granite4`` and
``granite-20b-fc`` are other formats, in their own modules.)"""

from __future__ import annotations

from typing import ClassVar

from frontend.parsers.grammar.granite import GraniteParser
from frontend.parsers.grammar.parser import GrammarParser
from frontend.parsers.tool.grammar_based import GrammarToolParser


class GraniteEngineToolParser(GrammarToolParser):
    structural_tag_model: ClassVar[str | None] = None

    def make_grammar_parser(self, chat_template_kwargs: dict | None) -> GrammarParser:
        return GraniteParser(self.tokenizer, self.tools, self.tool_choice)
