"""A Responses request's ``input`` (and ``instructions``, and the stored
history of ``previous_response_id``) -> the chat messages the chat template
renders, as vLLM 0.32 builds them (``responses/utils.py``:
``construct_input_messages``, ``_construct_message_from_response_item``).

Input items first get vLLM's ``input_item_parsing`` (:func:`normalize_items`):
ids and statuses filled in where the SDK types require them; then each item
becomes a chat message, or joins the assistant message before it (a
function_call adds to its ``tool_calls``, a reasoning item sets its
``reasoning``).
"""

from __future__ import annotations

import json
from typing import Any

from frontend.errors import field_error, invalid, validation_errors
from frontend.ids import random_hex
from frontend.responses.tools import CUSTOM_INPUT_KEY, NAMESPACE_SEPARATOR

MESSAGE_ROLES = ("user", "assistant", "system", "developer")
_PARTIAL = ("in_progress", "incomplete")
_MESSAGE_KEYS = ("content", "role", "type")


def normalize_items(body: dict[str, Any]) -> None:
    """vLLM's ``input_item_parsing`` and ``_default_input_image_details``: a
    reasoning item gets an id, an assistant message with list content an id,
    a status and ``annotations`` on its output_text parts; input images get
    ``detail: "auto"``. Items are copied, never changed in place."""
    items = body.get("input")
    if not isinstance(items, list):
        return
    out = []
    for item in items:
        if isinstance(item, dict):
            kind = item.get("type")
            if kind == "reasoning" and "id" not in item:
                item = {**item, "id": f"rs_{random_hex(8)}"}
            elif kind == "message" and item.get("role") == "assistant":
                item = _output_message(item)
            item = _image_details(item)
        out.append(item)
    body["input"] = out


def _output_message(item: dict[str, Any]) -> dict[str, Any]:
    content = item.get("content")
    if not isinstance(content, list):
        return item  # string content: an EasyInputMessage
    item = dict(item)
    item.setdefault("id", f"msg_{random_hex(8)}")
    item.setdefault("status", "completed")
    item["content"] = [
        {**c, "annotations": []}
        if isinstance(c, dict) and c.get("type") == "output_text" and "annotations" not in c
        else c
        for c in content
    ]
    return item


def _image_details(item: dict[str, Any]) -> dict[str, Any]:
    content = item.get("content")
    if not isinstance(content, list) or not any(
        isinstance(p, dict) and p.get("type") == "input_image" and "detail" not in p
        for p in content
    ):
        return item
    parts = [
        {**p, "detail": "auto"}
        if isinstance(p, dict) and p.get("type") == "input_image" and "detail" not in p
        else p
        for p in content
    ]
    return {**item, "content": parts}


def check_items(items: Any) -> None:
    """Field validation of a list ``input``: each item an object, the fields
    its type requires present (pydantic's union errors, shortened)."""
    if isinstance(items, str):
        return
    if not isinstance(items, list):
        raise validation_errors([field_error("list_type", ("body", "input"), items)])
    for i, item in enumerate(items):
        loc = ("body", "input", i)
        if not isinstance(item, dict):
            raise validation_errors([field_error("model_attributes_type", loc, item)])
        kind = item.get("type")
        required = _REQUIRED_FIELDS.get(kind, ()) if isinstance(kind, str) else ()
        if kind in (None, "message"):
            required = ("role", "content")
            role = item.get("role")
            if "role" in item and role not in MESSAGE_ROLES:
                raise validation_errors(
                    [
                        field_error(
                            "literal_error",
                            (*loc, "role"),
                            role,
                            {"expected": "'user', 'assistant', 'system' or 'developer'"},
                        )
                    ]
                )
        for name in required:
            if name not in item:
                raise validation_errors([field_error("missing", (*loc, name), item)])


# Fields each input item type requires (openai's input item params).
_REQUIRED_FIELDS: dict[str, tuple[str, ...]] = {
    "function_call": ("arguments", "call_id", "name"),
    "function_call_output": ("call_id", "output"),
    "custom_tool_call": ("call_id", "input", "name"),
    "custom_tool_call_output": ("call_id", "output"),
    "reasoning": ("id", "summary"),
}


def continue_final_message(items: Any) -> bool:
    """vLLM's ``should_continue_final_message``: the last item is a partial
    (in_progress / incomplete) assistant message or reasoning item."""
    if not isinstance(items, list) or not items:
        return False
    last = items[-1]
    if not isinstance(last, dict) or last.get("type", "message") not in ("message", "reasoning"):
        return False
    return last.get("status") in _PARTIAL


def input_messages(
    instructions: str | None,
    items: str | list[dict[str, Any]],
    previous_messages: list[dict[str, Any]] | None = None,
    previous_output: list[dict[str, Any]] | None = None,
) -> list[dict[str, Any]]:
    """vLLM's ``construct_input_messages``: instructions as the system message,
    the previous turn's messages (their system messages dropped: instructions
    never carry over) and its output *messages* (vLLM skips its reasoning and
    function calls), then the new input."""
    messages: list[dict[str, Any]] = []
    if instructions:
        messages.append({"role": "system", "content": instructions})
    if previous_messages is not None:
        messages.extend(m for m in previous_messages if m.get("role") != "system")
    for item in previous_output or ():
        if item.get("type") == "message":
            messages.extend(
                {"role": "assistant", "content": part.get("text")} for part in item["content"]
            )
    if isinstance(items, str):
        messages.append({"role": "user", "content": items})
        return messages
    new: list[dict[str, Any]] = []
    for item in items:
        message = _from_item(item, new[-1] if new else None)
        if message is not None:
            new.append(message)
    return messages + new


def _from_item(item: dict[str, Any], prev: dict[str, Any] | None) -> dict[str, Any] | None:
    """One item -> a new message, or None when it joined ``prev`` (an assistant message)."""
    assistant = prev if prev is not None and prev.get("role") == "assistant" else None
    kind = item.get("type")
    call = _tool_call(item) if kind in ("function_call", "custom_tool_call") else None
    if call is not None:
        if assistant is not None:
            calls = assistant.get("tool_calls")
            if calls is None:
                assistant["tool_calls"] = [call]
                return None
            if isinstance(calls, list):
                calls.append(call)
                return None
        return {"role": "assistant", "tool_calls": [call]}
    if kind == "reasoning":
        if item.get("encrypted_content"):
            raise invalid("Encrypted content is not supported.", "input")
        content, summary = item.get("content"), item.get("summary") or []
        if content:
            text = content[0].get("text")
        elif summary:
            text = summary[0].get("text")
        else:
            text = ""
        if assistant is not None and assistant.get("reasoning") is None:
            assistant["reasoning"] = text
            return None
        return {"role": "assistant", "reasoning": text}
    if kind in ("function_call_output", "custom_tool_call_output"):
        return {"role": "tool", "content": item.get("output"), "tool_call_id": item.get("call_id")}
    if item.get("role") == "assistant":
        content = item.get("content")
        text = None
        if isinstance(content, str):
            text = content
        elif isinstance(content, list) and content and isinstance(content[0], dict):
            text = content[0].get("text")
        if text is not None:
            if assistant is not None and assistant.get("content") is None:
                assistant["content"] = text
                return None
            return {"role": "assistant", "content": text}
    if "role" in item:  # as pydantic's TypedDicts keep it: their keys only
        return {k: item[k] for k in _MESSAGE_KEYS if k in item}
    raise invalid(f"Unsupported input item type: {kind}", "input")


def _tool_call(item: dict[str, Any]) -> dict[str, Any]:
    name: Any = item.get("name")
    arguments: Any
    if item["type"] == "custom_tool_call":
        arguments = json.dumps({CUSTOM_INPUT_KEY: item.get("input") or ""}, ensure_ascii=False)
    else:
        arguments = item.get("arguments")
        if item.get("namespace"):
            name = f"{item['namespace']}{NAMESPACE_SEPARATOR}{name}"
    return {
        "id": item.get("call_id"),
        "function": {"name": name, "arguments": arguments},
        "type": "function",
    }
