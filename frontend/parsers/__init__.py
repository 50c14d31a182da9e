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

Every parser speaks one per-delta protocol (:mod:`frontend.parsers.tool.base`,
:mod:`frontend.parsers.reasoning.base`). Adding one is one module in
``parsers/tool/`` or ``parsers/reasoning/`` and one line in
:mod:`frontend.parsers.registry` under vLLM's name: see ``README.md`` here.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from frontend.parsers.composite import ChoiceSetup, OutputParser, ParsedOutput
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
    "REASONING_PARSERS",
    "TOOL_PARSERS",
    "UNSET",
    "ChatParsers",
    "DeltaToolCall",
    "MessageParts",
    "OutputParser",
    "ParsedDelta",
    "ParsedOutput",
    "ParserTokenizer",
    "ToolCall",
    "first_call_only",
    "make_tool_call_id",
    "message_parts",
    "named_tool",
    "stream_finish_reason",
]


class ChatParsers:
    """The server's configured tool and reasoning parsers.

    ``tool_parser`` is vLLM's ``--tool-call-parser`` (vLLM uses it only with
    ``--enable-auto-tool-choice``); ``reasoning_parser`` its
    ``--reasoning-parser``; ``tool_strict_level`` its ``--tool-strict-level``
    (auto, function, parameter).  Unknown names and tokenizers without the
    parsers' marker tokens raise ValueError, as vLLM refuses to start.
    """

    def __init__(
        self,
        tokenizer: ParserTokenizer,
        *,
        tool_parser: str | None = None,
        reasoning_parser: str | None = None,
        tool_strict_level: str = "auto",
        architecture: str = "",
    ) -> None:
        self.tokenizer = tokenizer
        self.tool_strict_level = tool_strict_level
        self.architecture = architecture  # the model's, for Cohere's structural tags
        self.tool_parser = tool_parser_class(tool_parser) if tool_parser else None
        self.reasoning_parser = (
            reasoning_parser_class(reasoning_parser) if reasoning_parser else None
        )
        pair = [p for p in (self.tool_parser, self.reasoning_parser) if p is not None]
        # A parser of the whole output (vLLM's hf, cohere_command*) parses the
        # choice alone.
        self.output_parser = pair[0].output_parser if pair else None
        if any(parser.output_parser is not self.output_parser for parser in pair):
            whole = tool_parser if pair[0].output_parser is not None else reasoning_parser
            raise ValueError(
                f"The {whole} parser cannot be combined with other reasoning or tool call parsers"
            )
        for parser in pair:
            parser.check_tokenizer(tokenizer)
        self.tool_tag_suffix = (
            self.tool_parser.structural_tag_suffix(tokenizer) if self.tool_parser else ""
        )

    def new(
        self,
        *,
        tools: list[dict] | None = None,
        tool_choice: Any = None,
        include_reasoning: bool = True,
        chat_template_kwargs: dict | None = None,
        prompt_token_ids: Sequence[int] = (),
    ) -> OutputParser:
        setup = ChoiceSetup(
            tool_parser=self.tool_parser,
            reasoning_parser=self.reasoning_parser,
            tools=tools,
            tool_choice=tool_choice,
            include_reasoning=include_reasoning,
            chat_template_kwargs=chat_template_kwargs,
            prompt_token_ids=prompt_token_ids,
        )
        return (self.output_parser or OutputParser)(self.tokenizer, setup)

    def reasoning_ended(
        self,
        prompt_token_ids: Sequence[int],
        *,
        include_reasoning: bool = True,
        chat_template_kwargs: dict | None = None,
    ) -> bool | None:
        """The engine request's ``reasoning_ended`` (vLLM's
        ``resolve_reasoning_ended``): None without a reasoning parser."""
        if not include_reasoning:
            return True
        if self.reasoning_parser is None:
            return None
        return self.new(chat_template_kwargs=chat_template_kwargs).is_reasoning_end(
            prompt_token_ids
        )
