"""A Messages API request as the chat completion request vLLM 0.32 makes of it
(``AnthropicServingMessages.to_chat_completion_request``), in its order:
system, messages, the base fields, streaming, output_config, thinking,
tool_choice, tools.

vLLM assigns ``tools`` and ``tool_choice`` after building its chat request,
so chat's own checks of the pair never see them (a ``tool_choice`` without
tools is served). :class:`Converted` keeps the pair vLLM ends up with; the
chat request carries one that passes chat's checks, and the handler puts the
real one into the plan once chat has prepared it.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any

from frontend.anthropic.schemas import (
    AnyRequest,
    ContentBlock,
    Message,
    MessagesRequest,
    ThinkingDisabled,
    ThinkingEnabled,
    Tool,
    ToolDefinition,
)
from frontend.errors import ApiError
from frontend.openai.chat_request import ChatCompletionRequest

BILLING_HEADER = "x-anthropic-billing-header"  # Claude Code's per-request hash
STREAM_OPTIONS = {"include_usage": True, "continuous_usage_stats": True}
TOOL_CHOICES = {"auto": "auto", "any": "required", "none": "none"}


@dataclass
class Converted:
    chat: ChatCompletionRequest
    tools: list[dict] | None  # vLLM's request.tools
    tool_choice: Any  # vLLM's request.tool_choice

    @property
    def sanitized(self) -> bool:
        """Whether the chat request carries another tool_choice than vLLM's."""
        return self.chat.tool_choice != self.tool_choice


def to_chat_request(
    req: AnyRequest, *, merge_inline_system: bool, disabled_effort: str
) -> Converted:
    messages: list[dict[str, Any]] = []
    system = system_message(req, merge_inline_system)
    if system is not None:
        messages.append(system)
    convert_messages(req.messages, messages, merge_inline_system)
    chat = base_request(req, messages)
    if isinstance(req, MessagesRequest) and req.stream:
        chat.stream = True
        chat.stream_options = dict(STREAM_OPTIONS)
    config = req.output_config
    if config is not None and config.format is not None and config.format.json_schema:
        chat.response_format = {
            "type": config.format.type,
            "json_schema": {"name": config.format.type, "schema": config.format.json_schema},
        }
    if config is not None and config.effort is not None:
        chat.reasoning_effort = config.effort
    thinking = req.thinking
    if thinking is not None:
        if isinstance(thinking, ThinkingDisabled):
            chat.reasoning_effort = disabled_effort
        elif isinstance(thinking, ThinkingEnabled):  # the engine's budget; no template switch
            chat.thinking_token_budget = thinking.budget_tokens
        # adaptive: nothing
    tool_choice: Any = None
    if req.tool_choice is not None:
        chat.parallel_tool_calls = not req.tool_choice.disable_parallel_tool_use
        kind = req.tool_choice.type
        tool_choice = (
            {"type": "function", "function": {"name": req.tool_choice.name}}
            if kind == "tool"
            else TOOL_CHOICES[kind]
        )
    tools = convert_tools(req)
    if tools is not None and tool_choice is None:
        tool_choice = "auto"
    # What chat's checks accept: no tools means no tool_choice (the plan gets
    # vLLM's tool_choice back after prepare).
    chat.tools = tools or None
    chat.tool_choice = tool_choice if tools else ("none" if tool_choice is not None else None)
    return Converted(chat, tools, tool_choice)


def base_request(req: AnyRequest, messages: list[dict]) -> ChatCompletionRequest:
    if not isinstance(req, MessagesRequest):  # count_tokens
        return ChatCompletionRequest(
            model=req.model, messages=messages, chat_template_kwargs=req.chat_template_kwargs
        )
    return ChatCompletionRequest(
        model=req.model,
        messages=messages,
        max_tokens=req.max_tokens,
        max_completion_tokens=req.max_tokens,
        stop=req.stop_sequences,
        temperature=req.temperature,
        top_p=req.top_p,
        top_k=req.top_k,
        watermarking=req.watermarking,
        cache_salt=req.cache_salt,
        kv_transfer_params=req.kv_transfer_params,
        ec_transfer_params=req.ec_transfer_params,
        vllm_xargs=req.vllm_xargs,
        chat_template_kwargs=req.chat_template_kwargs,
    )


# ---------------------------------------------------------------------------- system


def system_message(req: AnyRequest, merge_inline_system: bool) -> dict | None:
    """The top-level system prompt (text blocks joined with "", billing headers
    dropped), with the inline system messages when the template wants one
    system message first. None when empty."""
    parts: list[str] = []
    if isinstance(req.system, str):
        if req.system:
            parts.append(req.system)
    elif req.system:
        parts += [
            b.text
            for b in req.system
            if b.type == "text" and b.text and not b.text.startswith(BILLING_HEADER)
        ]
    if merge_inline_system:
        for msg in req.messages:
            text = system_text(msg) if msg.role == "system" else None
            if text:
                parts.append(text)
    return {"role": "system", "content": "".join(parts)} if parts else None


def system_text(msg: Message) -> str | None:
    if isinstance(msg.content, str):
        return None if msg.content.startswith(BILLING_HEADER) else msg.content
    parts = [
        b.text
        for b in msg.content
        if b.type == "text" and b.text and not b.text.startswith(BILLING_HEADER)
    ]
    return "".join(parts) if parts else None


# ---------------------------------------------------------------------------- messages


def convert_messages(messages: list[Message], out: list[dict], merge_inline_system: bool) -> None:
    for msg in messages:
        if msg.role == "system":  # in place, unless merged into the first one
            if not merge_inline_system:
                text = system_text(msg)
                if text:
                    out.append({"role": "system", "content": text})
            continue
        chat_msg: dict[str, Any] = {"role": msg.role}
        if isinstance(msg.content, str):
            chat_msg["content"] = msg.content
        else:
            convert_content(msg.content, msg.role, chat_msg, out)
        # A user message of tool results only has become tool messages.
        if not (msg.role == "user" and "content" not in chat_msg):
            out.append(chat_msg)


def convert_content(blocks: list[ContentBlock], role: str, msg: dict, out: list[dict]) -> None:
    parts: list[dict[str, Any]] = []
    tool_calls: list[dict[str, Any]] = []
    reasoning: list[str] = []
    for block in blocks:
        kind = block.type
        if kind == "text" and block.text:
            parts.append({"type": "text", "text": block.text})
        elif kind == "image" and block.source:
            parts.append({"type": "image_url", "image_url": {"url": image_url(block.source)}})
        elif kind == "thinking" and block.thinking is not None:
            reasoning.append(block.thinking)
        elif kind == "tool_use":
            tool_calls.append(
                {
                    "id": block.id or f"call_{int(time.time())}",
                    "type": "function",
                    # Python's json.dumps, as vLLM (", " and ": ", ASCII escapes)
                    "function": {
                        "name": block.name or "",
                        "arguments": json.dumps(block.input or {}),
                    },
                }
            )
        elif kind == "tool_result":
            if role == "user":
                tool_result_messages(block, out)  # (before this message, as vLLM)
            else:
                text = str(block.content) if block.content else ""
                parts.append({"type": "text", "text": f"Tool result: {text}"})
        # redacted_thinking, tool_reference, tool_addition/removal: not rendered
    if reasoning:
        msg["reasoning"] = "".join(reasoning)
    if tool_calls:
        msg["tool_calls"] = tool_calls
    if parts:
        single = len(parts) == 1 and parts[0]["type"] == "text"
        msg["content"] = parts[0]["text"] if single else parts


def tool_result_messages(block: ContentBlock, out: list[dict]) -> None:
    """A user's tool_result: a tool message, then its images as a user
    message, then its tool references as another tool message."""
    text = ""
    images: list[str] = []
    references: list[dict[str, Any]] = []
    if isinstance(block.content, str):
        text = block.content
    elif isinstance(block.content, list):
        texts = []
        for item in block.content:
            kind = item.get("type")
            if kind == "text":
                texts.append(item.get("text", ""))
            elif kind == "image":
                url = image_url(item.get("source", {}))
                if url:
                    images.append(url)
            elif kind == "tool_reference":
                name = item.get("tool_name") or item.get("name")
                if name:
                    references.append({"type": "tool_reference", "name": name})
        text = "\n".join(texts)
    call_id = block.tool_use_id or ""
    out.append({"role": "tool", "tool_call_id": call_id, "content": text or ""})
    if images:
        out.append(
            {
                "role": "user",
                "content": [{"type": "image_url", "image_url": {"url": u}} for u in images],
            }
        )
    if references:
        out.append({"role": "tool", "tool_call_id": call_id, "content": references})


def image_url(source: dict[str, Any]) -> str:
    """An image source as a URL: its url, else a base64 data URI."""
    if source.get("type") == "url":
        return source.get("url", "")
    return f"data:{source.get('media_type', 'image/jpeg')};base64,{source.get('data', '')}"


# ---------------------------------------------------------------------------- tools


def resolve_tools(req: AnyRequest) -> list[Tool] | None:
    """The tools in effect after the conversation's tool_addition/tool_removal
    blocks (vLLM's ``_resolve_tools``): a reference addition stops deferring,
    a definition declares, a removal drops."""
    changes = [
        block
        for msg in req.messages
        if not isinstance(msg.content, str)
        for block in msg.content
        if block.type in ("tool_addition", "tool_removal")
    ]
    if not changes:
        return req.tools
    tools = {tool.name: tool for tool in req.tools or []}
    removed: set[str] = set()
    for block in changes:
        change = block.tool
        if isinstance(change, ToolDefinition):
            name = change.definition.name
            tools[name] = change.definition
        else:
            assert change is not None  # (validated)
            name = change.name
            if name not in tools:
                raise ApiError(
                    f"{block.type} references tool {name!r}, which is not declared in tools"
                )
            if block.type == "tool_addition":
                tool = tools[name]
                tools[name] = Tool(
                    name=tool.name,
                    description=tool.description,
                    input_schema=tool.input_schema,
                    strict=tool.strict,
                    defer_loading=None,
                )
        if block.type == "tool_removal":
            removed.add(name)
        else:
            removed.discard(name)
    return [tool for name, tool in tools.items() if name not in removed]


def convert_tools(req: AnyRequest) -> list[dict] | None:
    tools = resolve_tools(req)
    if tools is None:
        return None
    out = []
    for tool in tools:
        schema = tool.input_schema
        if "type" not in schema:  # vLLM's validator: an object by default
            schema["type"] = "object"
        function = {
            "name": tool.name,
            "description": tool.description,
            "parameters": schema,
            "strict": tool.strict,
            "defer_loading": tool.defer_loading,
        }
        out.append({"type": "function", "function": function})
    return out
