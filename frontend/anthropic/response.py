"""A chat completion as a Messages API response (vLLM's
``messages_full_converter``), and the stop reason and usage both the
response and the stream report."""

from __future__ import annotations

import json
import uuid
from typing import Any

from frontend.errors import ApiError


def stop_reason(
    finish_reason: str | None, stop: int | str | None, tool_used: bool, tool_complete: bool
) -> tuple[str | None, str | None]:
    """(stop_reason, stop_sequence) for chat's finish (vLLM's
    ``_to_anthropic_stop_reason``): the length wins; an abort has none; a
    complete tool call wins over a stop string (a call it cut short must not run)."""
    if finish_reason == "length":
        return "max_tokens", None
    if finish_reason not in ("stop", "tool_calls"):
        return None, None
    if tool_complete:
        return "tool_use", None
    if isinstance(stop, str):  # a matched stop string (an int is a stop token id)
        return "stop_sequence", stop
    if finish_reason == "tool_calls" or tool_used:
        return "tool_use", None
    return "end_turn", None


def usage(chat_usage: dict | None) -> dict[str, int]:
    """Anthropic's usage from chat's: input tokens exclude the cached ones
    (with ``prompt_tokens_details``, which only --enable-prompt-tokens-details gives)."""
    if chat_usage is None:
        return {"input_tokens": 0, "output_tokens": 0}
    input_tokens = chat_usage["prompt_tokens"]
    out: dict[str, int] = {
        "input_tokens": 0,
        "output_tokens": chat_usage.get("completion_tokens") or 0,
    }
    details = chat_usage.get("prompt_tokens_details")
    if details is not None:
        created = details.get("created_cache_tokens")
        cached = details.get("cached_tokens")
        if created is not None:
            input_tokens -= created
            out["cache_creation_input_tokens"] = created
        if cached is not None:
            input_tokens -= cached
            out["cache_read_input_tokens"] = cached
    out["input_tokens"] = max(0, input_tokens)
    return out


def signature() -> str:
    """A thinking block's signature: random, as vLLM's (nothing verifies it)."""
    return uuid.uuid4().hex


def tool_input(arguments: str) -> Any:
    """A tool call's arguments as the tool_use block's input: JSON that does
    not parse is the request's 400, as in vLLM (its ``json.loads`` raises)."""
    try:
        value = json.loads(arguments)
    except json.JSONDecodeError as e:
        raise ApiError(str(e)) from None
    if not isinstance(value, dict):  # pydantic refuses a non-object input
        raise ApiError(
            "1 validation error for AnthropicContentBlock\ninput\n  Input should be a valid "
            f"dictionary [type=dict_type, input_value={value!r}, input_type={type(value).__name__}]"
            "\n    For further information visit https://errors.pydantic.dev/2.14/v/dict_type"
        )
    return value


def message(chat: dict) -> dict:
    """The Messages response for a finished chat completion (one choice);
    null fields left out, as vLLM's ``exclude_none``."""
    choice = chat["choices"][0]
    msg = choice["message"]
    tool_calls = msg.get("tool_calls") or []
    reason, sequence = stop_reason(
        choice["finish_reason"], choice["stop_reason"], bool(tool_calls), bool(tool_calls)
    )
    content: list[dict[str, Any]] = []
    if msg.get("reasoning"):
        content.append({"type": "thinking", "thinking": msg["reasoning"], "signature": signature()})
    if msg.get("content"):
        content.append({"type": "text", "text": msg["content"]})
    for call in tool_calls:
        function = call["function"]
        content.append(
            {
                "type": "tool_use",
                "id": call["id"],
                "name": function["name"],
                "input": tool_input(function["arguments"]),
            }
        )
    if not content:  # Anthropic's empty completion: one empty text block
        content.append({"type": "text", "text": ""})
    body: dict[str, Any] = {
        "id": chat["id"],
        "type": "message",
        "role": "assistant",
        "content": content,
        "model": chat["model"],
    }
    if reason is not None:
        body["stop_reason"] = reason
    if sequence is not None:
        body["stop_sequence"] = sequence
    body["usage"] = usage(chat.get("usage"))
    for key in ("kv_transfer_params", "ec_transfer_params"):
        if chat.get(key) is not None:
            body[key] = chat[key]
    return body
