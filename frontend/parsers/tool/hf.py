"""``--tool-call-parser hf``: tool calls as the checkpoint's ``response_template`` says.

vLLM's ``ResponseTemplateToolParser`` only registers the name; its
``ResponseTemplateParser`` parses the whole output, reasoning included (see
:mod:`frontend.parsers.response_template.serving`).  A call is sent whole
when its region closes.  No grammar can force the template's format, so
vLLM refuses strict tools, "required"/named tool_choice and
``parallel_tool_calls=false`` with a 400.
"""

from __future__ import annotations

from frontend.parsers.response_template.serving import (
    ResponseTemplateOutputParser,
    check_tokenizer_template,
)
from frontend.parsers.tokenizer import ParserTokenizer
from frontend.parsers.tool.base import ToolParser


class ResponseTemplateToolParser(ToolParser):
    output_parser = ResponseTemplateOutputParser
    supports_required_and_named = False
    keeps_special_tokens = "always"
    always_adjust_request = True
    refuses_tool_guarantees = True

    @classmethod
    def check_tokenizer(cls, tokenizer: ParserTokenizer) -> None:
        check_tokenizer_template(tokenizer, reasoning=False, tools=True)
