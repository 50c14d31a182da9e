"""The Messages API's request bodies, as vLLM 0.32's pydantic models declare them
(``vllm/entrypoints/anthropic/protocol.py``): the same fields, types and
defaults; unknown fields are ignored. Value rules pydantic checks in
validators (``max_tokens`` > 0, thinking budgets, tool changes) are
:mod:`frontend.anthropic.validate`'s.
"""

from __future__ import annotations

from typing import Any, Literal

import msgspec

BlockType = Literal[
    "text",
    "image",
    "tool_use",
    "tool_result",
    "tool_reference",
    "thinking",
    "redacted_thinking",
    "tool_addition",
    "tool_removal",
]
Effort = Literal["low", "medium", "high", "xhigh", "max"]
ThinkingDisplay = Literal["summarized", "omitted", "updates"]


class Tool(msgspec.Struct, kw_only=True):
    name: str
    description: str | None = None
    input_schema: dict[str, Any]
    strict: bool | None = None
    defer_loading: bool | None = None


class ToolReference(msgspec.Struct, tag_field="type", tag="tool_reference"):
    """A tool named by a tool_addition or tool_removal block."""

    name: str


class ToolDefinition(msgspec.Struct, tag_field="type", tag="tool_definition"):
    """A tool defined by value in a tool_addition block."""

    definition: Tool


class ContentBlock(msgspec.Struct, kw_only=True):
    type: BlockType
    text: str | None = None
    source: dict[str, Any] | None = None  # image: base64 or url
    id: str | None = None
    tool_use_id: str | None = None
    name: str | None = None
    input: dict[str, Any] | None = None
    content: str | list[dict[str, Any]] | None = None  # a tool_result's
    is_error: bool | None = None
    tool_name: str | None = None
    thinking: str | None = None
    signature: str | None = None
    data: str | None = None  # redacted_thinking
    tool: ToolReference | ToolDefinition | None = None  # tool_addition / tool_removal


class Message(msgspec.Struct):
    role: Literal["user", "assistant", "system"]  # system: a vLLM extension
    content: str | list[ContentBlock]


class ToolChoice(msgspec.Struct, kw_only=True):
    type: Literal["auto", "any", "tool", "none"]
    name: str | None = None
    disable_parallel_tool_use: bool | None = None


class JsonOutputFormat(msgspec.Struct, kw_only=True):
    json_schema: dict[str, Any] | None = msgspec.field(default=None, name="schema")
    type: Literal["json_schema"] = "json_schema"


class OutputConfig(msgspec.Struct, kw_only=True):
    effort: Effort | None = None
    format: JsonOutputFormat | None = None


class ThinkingEnabled(msgspec.Struct, kw_only=True, tag_field="type", tag="enabled"):
    budget_tokens: int  # >= 1024 (checked with pydantic's message)
    display: ThinkingDisplay | None = None  # accepted, ignored (as vLLM)


class ThinkingDisabled(msgspec.Struct, tag_field="type", tag="disabled"):
    pass


class ThinkingAdaptive(msgspec.Struct, kw_only=True, tag_field="type", tag="adaptive"):
    display: ThinkingDisplay | None = None


Thinking = ThinkingEnabled | ThinkingDisabled | ThinkingAdaptive
XargValue = str | int | float | list[str | int | float]


class CountTokensRequest(msgspec.Struct, kw_only=True):
    """POST /v1/messages/count_tokens."""

    model: str
    messages: list[Message]
    output_config: OutputConfig | None = None
    system: str | list[ContentBlock] | None = None
    thinking: Thinking | None = None
    tool_choice: ToolChoice | None = None
    tools: list[Tool] | None = None
    chat_template_kwargs: dict[str, Any] | None = None  # vLLM extra


class MessagesRequest(msgspec.Struct, kw_only=True):
    """POST /v1/messages."""

    model: str
    messages: list[Message]
    max_tokens: int
    metadata: dict[str, Any] | None = None  # accepted, ignored (as vLLM)
    output_config: OutputConfig | None = None
    thinking: Thinking | None = None
    stop_sequences: list[str] | None = None
    stream: bool | None = False
    system: str | list[ContentBlock] | None = None
    temperature: float | None = None
    tool_choice: ToolChoice | None = None
    tools: list[Tool] | None = None
    top_k: int | None = None
    top_p: float | None = None
    # vLLM extras
    mm_payload: Literal["tensors", "none"] = "tensors"  # (render routes only)
    return_mm_kwargs: bool | None = None
    cache_salt: str | None = None
    watermarking: bool | None = None
    kv_transfer_params: dict[str, Any] | None = None
    ec_transfer_params: dict[str, Any] | None = None
    vllm_xargs: dict[str, XargValue] | None = None
    chat_template_kwargs: dict[str, Any] | None = None


AnyRequest = MessagesRequest | CountTokensRequest
