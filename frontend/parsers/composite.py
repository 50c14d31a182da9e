"""One choice's output -> reasoning, content and tool calls (vLLM's ``DelegatingParser``).

The reasoning parser runs first; once reasoning ends (in the prompt already,
or at ``</think>``), the text after it goes to the tool parser.  Forced tool
choices ("required", a named tool) are read as JSON for the parsers that
support that; ``tool_choice="none"`` leaves the text as content.

Streaming: call :meth:`OutputParser.feed` once per engine step of the choice
(with that step's new text and token ids, before any merging of steps; skip
leading steps with neither), ``finished=True`` on the last.  It returns the
:class:`~frontend.parsers.types.ParsedDelta` to send, or None for nothing.
Both parsers speak the per-delta protocol (``feed``/``ended``/``finish``);
text-so-far parsers do through :mod:`frontend.parsers.text_so_far`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from frontend.parsers.forced import named_stream_delta, parse_required, required_stream_delta
from frontend.parsers.reasoning.base import ReasoningParser
from frontend.parsers.tokenizer import ParserTokenizer
from frontend.parsers.tool.base import ToolParser
from frontend.parsers.types import UNSET, ParsedDelta, ToolCall, named_tool


@dataclass(slots=True)
class ParsedOutput:
    """A complete output, parsed.  ``tool_calls`` None: no tool call parsing
    happened or found nothing ("auto"); [] for a forced choice with no call."""

    reasoning: str | None
    content: str | None
    tool_calls: list[ToolCall] | None


@dataclass(frozen=True, slots=True)
class ChoiceSetup:
    """What a choice's output parser is built from: the server's parser
    classes and the request's settings (the same for every kind of
    :class:`OutputParser`)."""

    tool_parser: type[ToolParser] | None = None
    reasoning_parser: type[ReasoningParser] | None = None
    tools: list[dict] | None = None
    tool_choice: object = None
    include_reasoning: bool = True
    chat_template_kwargs: dict | None = None
    prompt_token_ids: Sequence[int] = ()


class OutputParser:
    """Parses one choice of one request (create one per choice)."""

    def __init__(self, tokenizer: ParserTokenizer, setup: ChoiceSetup) -> None:
        reasoning_parser, tools, tool_choice = (
            setup.reasoning_parser,
            setup.tools,
            setup.tool_choice,
        )
        self.reasoning = (
            reasoning_parser(tokenizer, setup.chat_template_kwargs)
            if reasoning_parser is not None
            else None
        )
        self.tool = (
            setup.tool_parser(
                tokenizer, tools, tool_choice, chat_template_kwargs=setup.chat_template_kwargs
            )
            if setup.tool_parser is not None
            else None
        )
        rewriter = reasoning_parser.output_rewriter if reasoning_parser is not None else None
        self._rewriter = rewriter() if rewriter is not None else None
        if self.reasoning is not None:
            self.reasoning.set_request(tools, tool_choice)
        self.tool_choice = tool_choice
        self.include_reasoning = setup.include_reasoning
        # vLLM's KimiK3Parser, for a pair with a kimi_k3 parser: content from
        # the tool parser always; without one, streamed content unwrapped by
        # the reasoning parser.
        self._kimi_k3 = any(
            p is not None and p.vllm_composite == "kimi_k3" for p in (self.tool, self.reasoning)
        )
        self._unwraps_content = (
            self.tool is None
            and self.reasoning is not None
            and self.reasoning.vllm_composite == "kimi_k3"
        )
        self._content_so_far = ""  # after reasoning, for _unwraps_content
        self._named = named_tool(tool_choice)
        # vLLM lets the tool parser decide the content of tool_choice="none"
        # output and of output without calls only when every configured
        # parser is a grammar parser (its DelegatingParser's _engine_based);
        # with a text-so-far parser in the pair the text passes as it is.
        self._content_from_tool_parser = (
            self.reasoning is None or self.reasoning.grammar_based
        ) and (self.tool is None or self.tool.grammar_based)
        if self.reasoning is None and self.tool is not None:
            # Reasoning markup is plain content when no reasoning parser runs.
            self.tool.skip_reasoning_parsing = True
        self._prompt_ids = list(setup.prompt_token_ids)
        self._prompt_checked = False
        self.reasoning_ended = False
        self._required_text = ""  # a forced "required" array so far
        self._name_returned = False
        self.tools_streamed = False

    # -- non-streaming ---------------------------------------------------------------

    def parse(self, text: str) -> ParsedOutput:
        if self.reasoning is not None:
            reasoning, content = self.reasoning.extract(text)
        else:
            reasoning, content = None, text
        tool_calls, content = self._extract_tool_calls(content)
        if not self.include_reasoning:
            reasoning = None
        if self._rewriter is not None:
            reasoning, content = self._rewriter.parsed(reasoning, content)
        return ParsedOutput(reasoning, content, tool_calls)

    def _extract_tool_calls(self, content: str | None) -> tuple[list[ToolCall] | None, str | None]:
        tool = self.tool
        if tool is None:
            return [], content
        if self._kimi_k3:
            return self._kimi_k3_tool_calls(content)
        if self.tool_choice == "none":
            if self._content_from_tool_parser:
                return [], tool.extract(content or "").content
            return [], content
        supports = tool.supports_required_and_named
        required = self.tool_choice == "required"
        if self._named is not None and supports:
            if content is None or not content.strip():
                return [], None
            return [ToolCall(self._named, content)], None
        if required and supports:
            return parse_required(content), None
        if self.tool_choice in ("auto", None) or self._named is not None or required:
            info = tool.extract(content if content is not None else "")
            if info.tools_called:
                content = info.content
                if content and not content.strip():
                    content = None
                return info.tool_calls, content
            if (required or self._named is not None) and (content is None or not content.strip()):
                return [], None
            if self._content_from_tool_parser:
                return None, info.content or None
            return None, content
        return [], content

    def _kimi_k3_tool_calls(self, content: str | None) -> tuple[list[ToolCall] | None, str | None]:
        """vLLM's KimiK3Parser: every tool_choice is parsed as "auto", and the
        content is the tool parser's."""
        assert self.tool is not None
        info = self.tool.extract(content or "")
        if self.tool_choice == "none":
            return [], info.content
        if not info.tools_called:
            return None, info.content
        content = info.content
        return info.tool_calls, None if content and not content.strip() else content

    def count_reasoning_tokens(self, token_ids: Sequence[int]) -> int:
        """Reasoning tokens among the choice's output tokens (usage details)."""
        if self.reasoning is None:
            return 0
        return self.reasoning.count_reasoning_tokens(token_ids)

    def is_reasoning_end(self, prompt_token_ids: Sequence[int]) -> bool:
        """Whether the prompt already ends reasoning (no reasoning parser: False)."""
        if self.reasoning is None:
            return False
        return self.reasoning.is_reasoning_end(prompt_token_ids)

    # -- streaming -------------------------------------------------------------------

    def feed(
        self, delta_text: str, delta_ids: Sequence[int], *, finished: bool = False
    ) -> ParsedDelta | None:
        delta_ids = list(delta_ids)
        reasoning = self.reasoning
        previous_content = self._content_so_far
        if not self._prompt_checked:
            self._prompt_checked = True
            if reasoning is None or reasoning.is_reasoning_end(self._prompt_ids):
                self.reasoning_ended = True
            else:
                reasoning.adjust_initial_state_from_prompt(self._prompt_ids)

        delta: ParsedDelta | None = None
        transitioned = False
        if reasoning is not None and not self.reasoning_ended:
            delta = reasoning.feed(delta_text, delta_ids)
            if reasoning.ended():
                self.reasoning_ended = transitioned = True
                # The text after the end marker: this step's content, and
                # what the parser held back.
                flushed = reasoning.finish()
                delta_text = (delta.text if delta else "") + (flushed.text if flushed else "")
                delta_ids = reasoning.extract_content_ids(delta_ids)
                if self.tool is None and delta_text:
                    delta = delta or ParsedDelta()
                    delta.content = delta_text

        if self.tool is not None and self.reasoning_ended:
            reasoning_text = delta.reasoning if delta is not None else None
            delta = self._tool_step(delta_text, delta_ids)
            if reasoning_text:
                if delta is None:
                    delta = ParsedDelta(reasoning=reasoning_text)
                elif not delta.reasoning:
                    delta.reasoning = reasoning_text

        in_reasoning = reasoning is not None and not self.reasoning_ended
        in_tools = self.tool is not None and self.reasoning_ended
        if delta is None and not transitioned and not in_reasoning and not in_tools:
            delta = ParsedDelta(content=delta_text)
        if self._unwraps_content and self.reasoning_ended:
            self._content_so_far += delta_text

        if finished:
            delta = self._finish(delta)
        if delta is not None and not self.include_reasoning:
            delta.reasoning = None
            if not delta.content and not delta.tool_calls:
                delta = None
        if delta is not None and self._unwraps_content and self.reasoning_ended:
            delta = self._unwrapped(delta, previous_content)
        if self._rewriter is not None:
            delta = self._rewriter.delta(delta, finished=finished)
        if delta is not None and delta.tool_calls:
            self.tools_streamed = True
        return delta

    def _unwrapped(self, delta: ParsedDelta, previous_content: str) -> ParsedDelta | None:
        """vLLM's KimiK3Parser without a tool parser: the step's content is
        what the content so far adds, response/message markers stripped."""
        assert self.reasoning is not None
        delta.content = self.reasoning.strip_content_streaming(
            previous_content, self._content_so_far
        )
        if delta.content is None and delta.reasoning in (None, UNSET) and not delta.tool_calls:
            return None
        return delta

    def _tool_step(self, delta_text: str, delta_ids: list[int]) -> ParsedDelta | None:
        tool = self.tool
        assert tool is not None
        if self.tool_choice == "none":
            if self._content_from_tool_parser or self._kimi_k3:
                delta = tool.feed(delta_text, delta_ids)
                if delta is not None:
                    delta.tool_calls = []
                return delta
            return ParsedDelta(content=delta_text) if delta_text else None
        if tool.supports_required_and_named and self._named is not None:
            delta, self._name_returned = named_stream_delta(
                delta_text, self._named, self._name_returned
            )
            return delta
        if tool.supports_required_and_named and self.tool_choice == "required":
            if self._content_from_tool_parser:
                # vLLM's all-grammar stack keeps no text so far: each step alone.
                previous_text, self._required_text = "", delta_text
            else:
                previous_text = self._required_text
                self._required_text += delta_text
            delta, self._name_returned = required_stream_delta(previous_text, self._required_text)
            return delta
        return tool.feed(delta_text, delta_ids)

    def _finish(self, delta: ParsedDelta | None) -> ParsedDelta | None:
        if self.reasoning is not None and not self.reasoning_ended:
            promoted = self.reasoning.fallback_content()
            if promoted:
                delta = delta if delta is not None else ParsedDelta()
                delta.content = (delta.content or "") + promoted
        tool = self.tool
        if tool is not None and delta is not None and delta.tool_calls:
            last = delta.tool_calls[-1]
            if last.has_function:
                rest = tool.remaining_unstreamed_args()
                last.arguments = (last.arguments or "") + rest
        # What the parsers still hold back (a reasoning parser's was taken
        # when reasoning ended).
        parsers: list[ReasoningParser | ToolParser] = []
        if self.reasoning is not None and not self.reasoning_ended:
            parsers.append(self.reasoning)
        if tool is not None:
            parsers.append(tool)
        for parser in parsers:
            flushed = parser.finish()
            if flushed is None:
                continue
            if delta is None:
                delta = flushed
                continue
            if flushed.content:
                delta.content = (delta.content or "") + flushed.content
            if flushed.reasoning:
                delta.reasoning = (delta.reasoning or "") + flushed.reasoning
            if flushed.tool_calls:
                delta.tool_calls = delta.tool_calls + flushed.tool_calls
        return delta
