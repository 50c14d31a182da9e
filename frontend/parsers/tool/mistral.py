"""``mistral``: ``[TOOL_CALLS]name[ARGS]{json}`` (Mistral tokenizers v11+).

Models: Mistral Small 3.x, Magistral, Devstral, Ministral 3 in Hugging Face
format.  The pre-v11 format (a JSON list after ``[TOOL_CALLS]``) is not
supported: the parser refuses a tokenizer without ``[ARGS]``.
"""

from __future__ import annotations

from frontend.parsers.grammar.mistral import TOOL_CALLS, MistralParser, is_supported_tokenizer
from frontend.parsers.grammar.parser import GrammarParser
from frontend.parsers.tokenizer import ParserTokenizer
from frontend.parsers.tool.grammar_based import GrammarToolParser


class MistralToolParser(GrammarToolParser):
    # The [TOOL_CALLS] format is parsed for "required"/named too.
    supports_required_and_named = False
    mistral_guided_schema = True

    @classmethod
    def check_tokenizer(cls, tokenizer: ParserTokenizer) -> None:
        if not is_supported_tokenizer(tokenizer):
            raise ValueError(
                f"the mistral tool parser needs a v11+ Mistral tokenizer (with "
                f"the {TOOL_CALLS} and [ARGS] tokens)"
            )

    def make_grammar_parser(self, chat_template_kwargs: dict | None) -> GrammarParser:
        return MistralParser(self.tokenizer, self.tools, self.tool_choice)
