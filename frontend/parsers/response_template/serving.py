"""vLLM 0.32's ``hf`` parsers: one ``response_template`` pass over an output.

vLLM's ``ResponseTemplateParser`` (``vllm/parser/response_template.py``) does
not split the work between a reasoning and a tool parser: one
:class:`~frontend.parsers.response_template.stream.ResponseParser`, started on
the decoded prompt, routes the output's regions -- ``thinking`` to reasoning
(with a reasoning parser configured), ``tool_calls`` to whole tool calls as
each region closes (with a tool parser configured and tool parsing on for the
request), the rest to content.  :class:`ResponseTemplateOutputParser` is that,
with the composite ``OutputParser``'s interface.
"""

from __future__ import annotations

import copy
import json
import logging
from collections.abc import Sequence
from typing import Any

from frontend.parsers.composite import ChoiceSetup, OutputParser, ParsedOutput
from frontend.parsers.response_template.stream import ResponseParser
from frontend.parsers.response_template.template import ResponseTemplate, load_response_template
from frontend.parsers.tokenizer import ParserTokenizer
from frontend.parsers.types import DeltaToolCall, ParsedDelta, ToolCall, make_tool_call_id

logger = logging.getLogger(__name__)

THINKING = "thinking"
CONTENT = "content"
TOOL_CALLS = "tool_calls"
_SUPPORTED_FIELDS = frozenset({THINKING, CONTENT, TOOL_CALLS})


def tokenizer_template(tokenizer: ParserTokenizer) -> dict | None:
    """The tokenizer's ``response_template`` (tokenizer_config.json), or None."""
    template = tokenizer.init_kwargs.get("response_template")
    return template if isinstance(template, dict) else None


def validate_for_serving(template: dict) -> ResponseTemplate:
    """Load the template; refuse fields the OpenAI routes cannot carry."""
    loaded = load_response_template(template)
    unsupported = (set(loaded.fields) - _SUPPORTED_FIELDS) | (set(loaded.defaults) - {"role"})
    if unsupported:
        raise ValueError(
            "response_template contains unsupported semantic fields: "
            f"{sorted(unsupported)}. Supported fields are: {sorted(_SUPPORTED_FIELDS)}"
        )
    for name in (THINKING, CONTENT):
        field = loaded.fields.get(name)
        if field is None:
            continue
        if field.content != "text" or field.transform is not None or field.join is not None:
            raise ValueError(
                f"response_template field {name!r} uses semantics that cannot "
                "be streamed by the OpenAI serving adapter"
            )
    return loaded


def check_tokenizer_template(tokenizer: ParserTokenizer, *, reasoning: bool, tools: bool) -> None:
    """vLLM's start-up check (``validate_tokenizer_response_template``)."""
    template = tokenizer_template(tokenizer)
    if template is None:
        raise ValueError(
            "The hf parser requires `response_template` metadata in the tokenizer configuration"
        )
    try:
        fields = validate_for_serving(template).fields
    except (TypeError, ValueError) as exc:
        raise ValueError(f"Invalid response_template metadata: {exc}") from exc
    if reasoning and THINKING not in fields:
        raise ValueError("--reasoning-parser hf requires a response_template with a thinking field")
    if tools and TOOL_CALLS not in fields:
        raise ValueError(
            "--tool-call-parser hf requires a response_template with a tool_calls field"
        )


def streaming_template(tokenizer: ParserTokenizer) -> ResponseTemplate:
    """The validated template with every field optional, and an implicit
    content region when every field has an opener (text outside any region
    is content, not dropped); loaded once per tokenizer (the parsers only
    read it)."""
    loaded = tokenizer.cache.get("response_template")
    if loaded is None:
        loaded = tokenizer.cache["response_template"] = _streaming_template(tokenizer)
    return loaded


def _streaming_template(tokenizer: ParserTokenizer) -> ResponseTemplate:
    template = tokenizer_template(tokenizer)
    if template is None:
        raise ValueError(
            "The hf parser requires `response_template` metadata in the tokenizer configuration"
        )
    validate_for_serving(template)
    result = copy.deepcopy(template)
    fields = result["fields"]
    if CONTENT not in fields and all(
        "open" in field or "open_pattern" in field for field in fields.values()
    ):
        fields[CONTENT] = {}
    for field in fields.values():
        field["optional"] = True
    return load_response_template(result)


def reasoning_has_ended(
    parser: ResponseParser, template: ResponseTemplate, *, thinking_disabled: bool
) -> bool:
    """Whether the prompt (consumed by ``parser``) has left the thinking region."""
    thinking = template.fields.get(THINKING)
    if thinking is None:
        return True
    if thinking.repeats:
        return False
    active_field: str | None = None
    thinking_closed = False
    for event in parser.initial_events:
        if event["type"] == "region_open":
            active_field = event["field"]
        elif event["type"] in {"region_close", "region_malformed"}:
            thinking_closed |= event["field"] == THINKING
            active_field = None
    if thinking_closed or active_field in (CONTENT, TOOL_CALLS):
        return True
    # Resolve delimiters held at the prompt's end with a probe: a NUL cannot
    # occur in the model's output format.
    for event in parser.feed("\0"):
        if (
            event["type"] == "region_open"
            and event["field"] in (CONTENT, TOOL_CALLS)
            and event["end"] > event["start"]
        ):
            return True
        if event["field"] == THINKING:
            if event["type"] == "region_open":
                return False
            if event["type"] in {"region_close", "region_malformed"}:
                return True
    if active_field == THINKING:
        return False
    return thinking_disabled


def tool_parsing_enabled(tool_choice: object) -> bool:
    """vLLM parses calls for "auto", "required" and a named tool (the server
    runs with --enable-auto-tool-choice), not for "none"."""
    return tool_choice != "none"


def _to_tool_calls(value: Any) -> list[tuple[str, str]]:
    """``(name, arguments)`` of each call in a tool region's value; nothing if
    any call is incomplete."""
    values = value if isinstance(value, list) else [value]
    calls: list[tuple[str, str]] = []
    for item in values:
        function = item.get("function") if isinstance(item, dict) else None
        if not isinstance(function, dict):
            return []
        name = function.get("name")
        arguments = function.get("arguments")
        if not isinstance(name, str) or not name or arguments is None:
            return []
        if not isinstance(arguments, str):
            arguments = json.dumps(arguments, ensure_ascii=False)
        calls.append((name, arguments))
    return calls


class _Stream:
    """One output fed through ``ResponseParser``, routed to message deltas
    (vLLM's ``_ResponseStream``)."""

    def __init__(
        self,
        template: ResponseTemplate,
        *,
        prefix: str,
        tools: list[dict],
        parse_reasoning: bool,
        include_reasoning: bool,
        parse_tools: bool,
    ) -> None:
        self.parse_reasoning = parse_reasoning
        self.include_reasoning = include_reasoning
        self.parse_tools = parse_tools
        self.parser = ResponseParser(template, prefix=prefix, tools=tools)
        self._prefix_end = len(self.parser.input_text)
        self._next_tool_index = 0
        self._finalized = False

    def feed(self, text: str, *, finished: bool) -> ParsedDelta | None:
        if self._finalized:
            return None
        reasoning: list[str] = []
        content: list[str] = []
        calls: list[DeltaToolCall] = []
        self._route(self.parser.feed(text), reasoning, content, calls)
        if finished:
            self._finalized = True
            if len(self.parser.input_text) > self._prefix_end:
                _, events = self.parser.finalize()
                self._route(events, reasoning, content, calls)
        delta = ParsedDelta(tool_calls=calls)
        if joined := "".join(reasoning):
            delta.reasoning = joined
        if joined := "".join(content):
            delta.content = joined
        return delta if delta.to_dict() else None

    def _route(
        self,
        events: list[dict],
        reasoning: list[str],
        content: list[str],
        calls: list[DeltaToolCall],
    ) -> None:
        for event in events:
            field = event.get("field")
            if field == TOOL_CALLS:
                self._route_tool_event(event, content, calls)
            elif event["type"] == "region_chunk":
                if field == THINKING and self.parse_reasoning:
                    if self.include_reasoning:
                        reasoning.append(event["text"])
                elif field in (THINKING, CONTENT):
                    content.append(event["text"])

    def _route_tool_event(
        self, event: dict, content: list[str], calls: list[DeltaToolCall]
    ) -> None:
        """A tool region's calls, whole, once it closes and parses; a region
        cut off by the end of the output is parsed as it is.  Without tool
        parsing the region is content."""
        if not self.parse_tools:
            if event["type"] == "region_chunk":
                content.append(event["text"])
            else:
                start = max(event["start"], self._prefix_end)
                content.append(self.parser.input_text[start : event["end"]])
            return
        if event["type"] == "region_malformed":
            logger.warning("response_template: dropping a malformed tool call")
        elif event["type"] == "region_close":
            parsed = _to_tool_calls(event.get("value"))
            if not parsed:
                logger.warning("response_template: dropping an incomplete tool call")
            for name, arguments in parsed:
                calls.append(
                    DeltaToolCall(
                        self._next_tool_index,
                        id=make_tool_call_id(),
                        type="function",
                        name=name,
                        arguments=arguments,
                    )
                )
                self._next_tool_index += 1


class ResponseTemplateOutputParser(OutputParser):
    """One choice's output through the ``response_template`` (vLLM's
    ``ResponseTemplateParser``), in place of the composite's reasoning-then-tools
    pipeline: every method of :class:`OutputParser` the routes call is its own."""

    def __init__(self, tokenizer: ParserTokenizer, setup: ChoiceSetup) -> None:
        self.template = streaming_template(tokenizer)
        self.parse_reasoning = setup.reasoning_parser is not None
        self.parse_tools = setup.tool_parser is not None and tool_parsing_enabled(setup.tool_choice)
        self.include_reasoning = setup.include_reasoning
        self._thinking_disabled = not (setup.chat_template_kwargs or {}).get(
            "enable_thinking", True
        )
        self._tools = [t for t in setup.tools or () if isinstance(t.get("function"), dict)]
        self._tokenizer = tokenizer
        self._prefix = tokenizer.decode(list(setup.prompt_token_ids))
        self._stream: _Stream | None = None
        self.tools_streamed = False

    def _new_stream(self, include_reasoning: bool) -> _Stream:
        return _Stream(
            self.template,
            prefix=self._prefix,
            tools=self._tools,
            parse_reasoning=self.parse_reasoning,
            include_reasoning=include_reasoning,
            parse_tools=self.parse_tools,
        )

    def parse(self, text: str) -> ParsedOutput:
        delta = self._new_stream(include_reasoning=True).feed(text, finished=True)
        if delta is None:
            return ParsedOutput(None, None, None)
        calls = [ToolCall(call.name, call.arguments, call.id) for call in delta.tool_calls]
        reasoning = (delta.reasoning or None) if self.include_reasoning else None
        return ParsedOutput(reasoning, delta.content or None, calls or None)

    def feed(
        self, delta_text: str, delta_ids: Sequence[int], *, finished: bool = False
    ) -> ParsedDelta | None:
        if self._stream is None:
            self._stream = self._new_stream(self.include_reasoning)
        delta = self._stream.feed(delta_text, finished=finished)
        if delta is not None and delta.tool_calls:
            self.tools_streamed = True
        return delta

    def is_reasoning_end(self, prompt_token_ids: Sequence[int]) -> bool:
        """vLLM's ``ResponseTemplateReasoningParser.is_reasoning_end``."""
        if not self.parse_reasoning:
            return False
        try:
            parser = ResponseParser(
                self.template, prefix=self._tokenizer.decode(list(prompt_token_ids))
            )
        except Exception:
            return False
        return reasoning_has_ended(parser, self.template, thinking_disabled=self._thinking_disabled)

    def count_reasoning_tokens(self, token_ids: Sequence[int]) -> int:
        return 0  # vLLM's ResponseTemplateParser counts none
