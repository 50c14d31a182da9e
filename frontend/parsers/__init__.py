"""Tool-call and reasoning parsers with vLLM 0.32's names and behaviour.

Set up once per server::

    parsers = ChatParsers(ParserTokenizer.from_model(model),
                          tool_parser="hermes", reasoning_parser="qwen3")

Per choice, :meth:`ChatParsers.new` gives an :class:`OutputParser`
(``tool_choice`` as the request resolved it: "none" without tools)::

    p = parsers.new(tools=tools, tool_choice="auto", prompt_token_ids=prompt)
    parsed = p.parse(text)                      # whole output: reasoning,
                                                # content, tool_calls
    for text, ids, last in steps:               # or streamed, per engine step
        delta = p.feed(text, ids, finished=last)    # ParsedDelta | None
        if delta is not None:
            send(delta.to_dict())

:mod:`frontend.parsers.message` turns the results into vLLM's message and
finish_reason. What the parsers change in the request itself (vLLM's
``adjust_request``: a forced call's grammar, special tokens kept) is
:mod:`frontend.structured.tool_choice`, driven by the parsers' class
attributes.

Adding a parser: one file and one registry line
------------------------------------------------
Every parser speaks one per-delta protocol (:mod:`frontend.parsers.tool.base`,
:mod:`frontend.parsers.reasoning.base`): ``feed(delta_text, delta_ids)`` per
engine step, ``extract(text)`` for a whole output, ``finish()`` at the end.

1. Write ``parsers/tool/<name>.py`` (or ``parsers/reasoning/<name>.py``) with
   one class, on either base:

   * :class:`~frontend.parsers.text_so_far.TextSoFarToolParser` /
     :class:`~frontend.parsers.text_so_far.TextSoFarReasoningParser`: port a
     vLLM classic parser as it is (``extract_streaming(previous_text,
     current_text, delta_text, ...)``); the adapter keeps the text so far;
   * :class:`~frontend.parsers.tool.grammar_based.GrammarToolParser` /
     :class:`~frontend.parsers.reasoning.grammar_based.GrammarReasoningParser`:
     for a vLLM declarative (``engine``) parser, return its grammar parser
     from ``make_grammar_parser`` (a new grammar is one module in
     :mod:`frontend.parsers.grammar`, shared by the model's tool and
     reasoning parsers).

   Class attributes say what vLLM's ``adjust_request`` does for it
   (``structural_tag_model``, ``supports_required_and_named``,
   ``keeps_special_tokens``); ``check_tokenizer`` refuses a model without its
   marker tokens.
2. Add its vLLM name to :data:`TOOL_PARSERS` or :data:`REASONING_PARSERS` in
   :mod:`frontend.parsers.registry` (``"name": "module:Class"``).

A tool parser whose ``structural_tag_model`` is a format not built yet also
needs that builder in :mod:`frontend.structured.structural_tag`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

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
from frontend.parsers.tokenizer import ParserTokenizer
from frontend.parsers.types import (
    UNSET,
    DeltaToolCall,
    ParsedDelta,
    ToolCall,
    make_tool_call_id,
    named_tool,
)

__all__ = [
    "REASONING_PARSERS", "TOOL_PARSERS", "UNSET", "ChatParsers", "DeltaToolCall",
    "MessageParts", "OutputParser", "ParsedDelta", "ParsedOutput", "ParserTokenizer",
    "ToolCall", "first_call_only", "make_tool_call_id", "message_parts", "named_tool",
    "stream_finish_reason",
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
