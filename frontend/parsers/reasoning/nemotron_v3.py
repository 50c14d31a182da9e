"""``nemotron_v3``: NVIDIA Nemotron 3 reasoning, on the Qwen3 grammar; with
``enable_thinking=False`` or ``force_nonempty_content=True``, an output with
no content has its reasoning as content."""

from __future__ import annotations

from frontend.parsers.grammar.nemotron_v3 import NemotronV3Parser
from frontend.parsers.grammar.parser import GrammarParser
from frontend.parsers.reasoning.grammar_based import GrammarReasoningParser


class NemotronV3ReasoningParser(GrammarReasoningParser):
    def make_grammar_parser(self) -> GrammarParser:
        return NemotronV3Parser(self.tokenizer, chat_template_kwargs=self.chat_template_kwargs)
