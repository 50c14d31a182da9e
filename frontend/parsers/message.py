"""From parsed output to the response's message and finish_reason, as vLLM's
chat serving decides them."""

from __future__ import annotations

from dataclasses import dataclass

from frontend.parsers.composite import ParsedOutput
from frontend.parsers.types import ParsedDelta, ToolCall, make_tool_call_id, named_tool


@dataclass(slots=True)
class MessageParts:
    content: str | None
    reasoning: str | None
    # None: the message has no tool_calls (vLLM omits the empty list);
    # each call has its id (a fresh one when the parser gave none).
    tool_calls: list[ToolCall] | None
    finish_reason: str


def message_parts(
    parsed: ParsedOutput,
    *,
    tool_choice: object,
    has_tool_parser: bool,
    has_tools: bool,
    finish_reason: str | None,
    parallel_tool_calls: bool | None = True,
) -> MessageParts:
    """The non-streaming message of one choice.

    Forced choices ("required", named) always get ``tool_calls`` and a string
    content; "auto" gets ``tool_calls`` when the parser found some.
    ``finish_reason`` is "tool_calls" when "auto" called tools, or for
    "required" when the engine stopped normally.
    """
    named = named_tool(tool_choice) is not None
    required = tool_choice == "required"
    content, reasoning, calls = parsed.content, parsed.reasoning, None
    auto_called = False
    if named or required:
        content = content or ""
        calls = parsed.tool_calls or []
    elif has_tools and has_tool_parser and tool_choice in ("auto", None) and parsed.tool_calls:
        auto_called = True
        calls = parsed.tool_calls
    if calls is not None:
        calls = [ToolCall(c.name, c.arguments, c.id or make_tool_call_id()) for c in calls]
        if parallel_tool_calls is False:
            calls = calls[:1]
    if auto_called or (required and finish_reason == "stop"):
        reason = "tool_calls"
    else:
        reason = finish_reason or "stop"
    return MessageParts(content, reasoning, calls, reason)


def stream_finish_reason(
    tools_streamed: bool, tool_choice: object, finish_reason: str | None
) -> str:
    """A streamed choice's finish_reason: "tool_calls" once tool call pieces
    were sent (not for a named choice) and the engine stopped normally."""
    if tools_streamed and named_tool(tool_choice) is None and finish_reason == "stop":
        return "tool_calls"
    return finish_reason or "stop"


def first_call_only(delta: ParsedDelta) -> ParsedDelta:
    """``parallel_tool_calls=false``: keep only the pieces of call 0."""
    if delta.tool_calls:
        delta.tool_calls = [tc for tc in delta.tool_calls if tc.index == 0]
    return delta
