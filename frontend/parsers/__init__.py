"""Tool-call and reasoning parsers with vLLM 0.32's names and behaviour.

Set up once per server::

    parsers = ChatParsers(ParserTokenizer.from_model(model),
                          tool_parser="hermes", reasoning_parser="qwen3")

Per request, :meth:`ChatParsers.adjust` says what vLLM's ``adjust_request``
would change (``skip_special_tokens``, a forced-call JSON schema or structural
tag); per choice, :meth:`ChatParsers.new` gives an :class:`OutputParser`
(``tool_choice`` as the request resolved it: "none" without tools)::

    p = parsers.new(tools=tools, tool_choice="auto", prompt_token_ids=prompt)
    parsed = p.parse(text)                      # whole output: reasoning,
                                                # content, tool_calls
    for text, ids, last in steps:               # or streamed, per engine step
        delta = p.feed(text, ids, finished=last)    # Delta | None
        if delta is not None:
            send(delta.to_dict())

:mod:`frontend.parsers.message` turns the results into vLLM's message and
finish_reason.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from frontend.parsers.adjust import RequestAdjustment, adjust_request
from frontend.parsers.composite import OutputParser, ParsedOutput
from frontend.parsers.message import (
    MessageParts,
    first_call_only,
    message_parts,
    stream_finish_reason,
)
from frontend.parsers.registry import (
    REASONING_PARSERS,
    TOOL_PARSERS,
    reasoning_parser_class,
    tool_parser_class,
)
from frontend.parsers.schema import ToolSchemaError, json_schema_from_tools
from frontend.parsers.tokenizer import ParserTokenizer
from frontend.parsers.types import (
    UNSET,
    Delta,
    DeltaToolCall,
    ToolCall,
    make_tool_call_id,
)

__all__ = [
    "REASONING_PARSERS", "TOOL_PARSERS", "UNSET", "ChatParsers", "Delta", "DeltaToolCall",
    "MessageParts", "OutputParser", "ParsedOutput", "ParserTokenizer", "RequestAdjustment",
    "ToolCall", "ToolSchemaError", "first_call_only", "json_schema_from_tools",
    "make_tool_call_id", "message_parts", "stream_finish_reason",
]


class ChatParsers:
    """The server's configured tool and reasoning parsers.

    ``tool_parser`` is vLLM's ``--tool-call-parser`` (vLLM uses it only with
    ``--enable-auto-tool-choice``); ``reasoning_parser`` its
    ``--reasoning-parser``.  Unknown names and tokenizers without the
    parsers' marker tokens raise ValueError, as vLLM refuses to start.
    """

    def __init__(self, tokenizer: ParserTokenizer, *, tool_parser: str | None = None,
                 reasoning_parser: str | None = None) -> None:
        self.tokenizer = tokenizer
        self.tool_parser = tool_parser_class(tool_parser) if tool_parser else None
        self.reasoning_parser = (reasoning_parser_class(reasoning_parser)
                                 if reasoning_parser else None)
        for parser in (self.tool_parser, self.reasoning_parser):
            if parser is not None:
                parser.check_tokenizer(tokenizer)

    def adjust(self, *, tools: list[dict] | None, tool_choice: Any,
               parallel_tool_calls: bool | None = True, has_structured_outputs: bool = False,
               response_format_type: str | None = None,
               structured_outputs_tag: bool = False) -> RequestAdjustment:
        return adjust_request(self.tool_parser, self.reasoning_parser, tools=tools,
                              tool_choice=tool_choice, parallel_tool_calls=parallel_tool_calls,
                              has_structured_outputs=has_structured_outputs,
                              response_format_type=response_format_type,
                              structured_outputs_tag=structured_outputs_tag)

    def new(self, *, tools: list[dict] | None = None, tool_choice: Any = None,
            include_reasoning: bool = True, chat_template_kwargs: dict | None = None,
            prompt_token_ids: Sequence[int] = ()) -> OutputParser:
        return OutputParser(self.tokenizer, tool_parser=self.tool_parser,
                            reasoning_parser=self.reasoning_parser, tools=tools,
                            tool_choice=tool_choice, include_reasoning=include_reasoning,
                            chat_template_kwargs=chat_template_kwargs,
                            prompt_token_ids=prompt_token_ids)

    def reasoning_ended(self, prompt_token_ids: Sequence[int], *,
                        include_reasoning: bool = True,
                        chat_template_kwargs: dict | None = None) -> bool | None:
        """The engine request's ``reasoning_ended`` (vLLM's
        ``resolve_reasoning_ended``): None without a reasoning parser."""
        if not include_reasoning:
            return True
        if self.reasoning_parser is None:
            return None
        return self.new(chat_template_kwargs=chat_template_kwargs).is_reasoning_end(
            prompt_token_ids)
