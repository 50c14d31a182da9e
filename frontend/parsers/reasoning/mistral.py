"""``mistral``: ``[THINK]...[/THINK]`` reasoning of Magistral-style models
(tokenizers with the ``[THINK]`` token); without it, no reasoning at all.

A ``[TOOL_CALLS]`` ends reasoning too.
"""

from __future__ import annotations

from frontend.parsers.engine.mistral import MistralParser, is_supported_tokenizer
from frontend.parsers.engine.parser import EngineParser
from frontend.parsers.reasoning.engine_based import EngineReasoningParser
from frontend.parsers.tokenizer import ParserTokenizer


class MistralReasoningParser(EngineReasoningParser):
    mistral_guided_schema = True

    @classmethod
    def check_tokenizer(cls, tokenizer: ParserTokenizer) -> None:
        if not is_supported_tokenizer(tokenizer):
            raise ValueError("the mistral reasoning parser needs a v11+ Mistral tokenizer "
                             "(with the [TOOL_CALLS] and [ARGS] tokens)")

    def _make_engine(self) -> EngineParser:
        return MistralParser(self.tokenizer)
