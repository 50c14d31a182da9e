"""``--reasoning-parser hf``: reasoning as the checkpoint's ``response_template`` says.

vLLM's ``ResponseTemplateReasoningParser`` tells where reasoning ends (the
prompt's state for the engine's ``reasoning_ended``); its
``ResponseTemplateParser`` parses the output (see
:mod:`frontend.parsers.response_template.serving`).
"""

from __future__ import annotations

from frontend.parsers.reasoning.base import ReasoningParser
from frontend.parsers.response_template.serving import (
    ResponseTemplateOutputParser,
    check_tokenizer_template,
)
from frontend.parsers.tokenizer import ParserTokenizer


class ResponseTemplateReasoningParser(ReasoningParser):
    output_parser = ResponseTemplateOutputParser
    keeps_special_tokens = True

    @classmethod
    def check_tokenizer(cls, tokenizer: ParserTokenizer) -> None:
        check_tokenizer_template(tokenizer, reasoning=True, tools=False)
