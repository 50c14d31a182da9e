"""Nemotron 3 and Granite 4.2 thinking: the Qwen3 grammar (trailing reasoning
whitespace stripped), with their own handling of an answer left in reasoning.

When the chat template kwargs say ``enable_thinking=False`` or
``force_nonempty_content=True`` and there is no content, the reasoning is the
content: swapped in a complete output, sent as content at the end of a stream
that never left reasoning.  Granite also drops the newlines its template puts
before the content (``\\n</think>\\n``), and reasoning ends for the composite
only once content has started.
"""

from __future__ import annotations

from frontend.parsers.grammar.machine import Event, State
from frontend.parsers.grammar.qwen3 import NEMOTRON_V3, Qwen3Parser
from frontend.parsers.tokenizer import ParserTokenizer
from frontend.parsers.types import ParsedDelta


class NemotronV3Parser(Qwen3Parser):
    def __init__(
        self,
        tokenizer: ParserTokenizer,
        tools: list[dict] | None = None,
        tool_choice: object = None,
        chat_template_kwargs: dict | None = None,
    ) -> None:
        kwargs = chat_template_kwargs or {}
        self.force_content = (
            kwargs.get("enable_thinking") is False or kwargs.get("force_nonempty_content") is True
        )
        self._streamed_reasoning: list[str] = []
        super().__init__(tokenizer, tools, tool_choice, chat_template_kwargs, NEMOTRON_V3)

    def _reset(self, initial_state: State | None = None) -> None:
        super()._reset(initial_state)
        self._streamed_reasoning = []

    def _events_to_delta(self, events: list[Event], finished: bool = False) -> ParsedDelta | None:
        delta = super()._events_to_delta(events, finished)
        if delta is not None and isinstance(delta.reasoning, str):
            self._streamed_reasoning.append(delta.reasoning)
        return delta

    def streaming_fallback_content(self) -> str | None:
        if not self.force_content:
            return None
        return "".join(self._streamed_reasoning) or None

    def extract_reasoning(self, text: str) -> tuple[str | None, str | None]:
        reasoning, content = super().extract_reasoning(text)
        if self.force_content and (content is None or not content.strip()):
            reasoning, content = content, reasoning
        return reasoning, content


class GraniteThinkingParser(NemotronV3Parser):
    content_started = False

    def _reset(self, initial_state: State | None = None) -> None:
        super()._reset(initial_state)
        self.content_started = False

    def _events_to_delta(self, events: list[Event], finished: bool = False) -> ParsedDelta | None:
        delta = super()._events_to_delta(events, finished)
        if delta is not None and isinstance(delta.content, str) and not self.content_started:
            stripped = delta.content.lstrip("\n")
            if not stripped:
                delta.content = None
                if not isinstance(delta.reasoning, str) and not delta.tool_calls:
                    return None
            else:
                self.content_started = True
                delta.content = stripped
        return delta

    def extract_reasoning(self, text: str) -> tuple[str | None, str | None]:
        reasoning, content = Qwen3Parser.extract_reasoning(self, text)
        absent = content is None
        if content is not None:
            content = content.lstrip("\n") or None
        if self.force_content and absent:
            reasoning, content = content, reasoning
        return reasoning, content
