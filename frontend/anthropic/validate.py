"""A Messages API body: decoded into its struct, then vLLM's pydantic rules.

FastAPI validates vLLM's bodies before its handler runs, so every error here
is a 400 in the *OpenAI* shape (``frontend.errors``), as vLLM sends it:

* missing required fields and the value rules of vLLM's validators come with
  pydantic's exact messages (in pydantic's field order, all of them);
* type errors are msgspec's (a shorter message, as on every route), with
  pydantic's ``param``: a union field (``content``, ``system``) reports its
  own path (pydantic's first error is the string branch's) and a thinking
  config's fields sit under its tag (``body.thinking.enabled.budget_tokens``).
"""

from __future__ import annotations

import re
from typing import Any, TypeVar

import msgspec

from frontend.anthropic.schemas import (
    ContentBlock,
    CountTokensRequest,
    MessagesRequest,
    ThinkingEnabled,
    ToolReference,
)
from frontend.errors import ApiError, field_error, from_msgspec, validation_errors
from frontend.openai.common import json_decode_error
from frontend.openai.validators import MAX_STOP_STRINGS

T = TypeVar("T", MessagesRequest, CountTokensRequest)

MIN_THINKING_BUDGET = 1024
CACHE_SALT_LENGTH = (1, 1024)
_REQUIRED = {
    MessagesRequest: ("model", "messages", "max_tokens"),
    CountTokensRequest: ("model", "messages"),
}
_TOOL_CHANGES = ("tool_addition", "tool_removal")
_UNION_FIELD = re.compile(r"^(body\.messages\.\d+\.content|body\.system)\.")


def decode(body: bytes, schema: type[T]) -> T:
    try:
        raw = msgspec.json.decode(body)
    except msgspec.DecodeError as e:
        raise json_decode_error(body) or from_msgspec(e) from None
    if isinstance(raw, dict):
        missing = [
            field_error("missing", ("body", name), raw)
            for name in _REQUIRED[schema]
            if name not in raw
        ]
        if missing:
            raise validation_errors(missing)
    try:
        req = msgspec.convert(raw, schema, strict=False)
    except msgspec.ValidationError as e:
        error = from_msgspec(e)
        raise _missing_field(error, raw) or _with_pydantic_param(error, raw) from None
    errors = field_errors(req, raw)
    if errors:
        raise validation_errors(errors)
    if isinstance(req, MessagesRequest):
        check_thinking_budget(req, raw)
    return req


def _missing_field(error: ApiError, raw: Any) -> ApiError | None:
    """A nested required field missing outside the union fields: pydantic's
    exact error (its input is the object that lacks it)."""
    param = error.param or ""
    if not error.message.endswith("  Field required") or _UNION_FIELD.match(param):
        return None
    if param.startswith("body.thinking"):
        return None
    loc = tuple(int(p) if p.isdigit() else p for p in param.split("."))
    return validation_errors([field_error("missing", loc, _raw_at(raw, *loc[1:-1]))])


def _with_pydantic_param(error: ApiError, raw: Any) -> ApiError:
    param = error.param or "body"
    union = _UNION_FIELD.match(param)
    if union:
        param = union.group(1)
    elif param == "body.thinking.type":
        param = "body.thinking"
    elif param.startswith("body.thinking.") and isinstance(raw, dict):
        tag = (raw.get("thinking") or {}).get("type")
        param = f"body.thinking.{tag}.{param.removeprefix('body.thinking.')}"
    error.param = param
    return error


def value_error(loc: tuple, value: Any, message: str) -> dict:
    """pydantic's error for a validator's ValueError (its repr shows in ``ctx``)."""
    return {
        "type": "value_error",
        "loc": loc,
        "msg": f"Value error, {message}",
        "input": value,
        "ctx": {"error": ValueError(message)},
    }


def field_errors(req: MessagesRequest | CountTokensRequest, raw: dict) -> list[dict]:
    """The field validators' errors, in field order (pydantic reports them all)."""
    errors: list[dict] = []
    if not req.model:
        errors.append(value_error(("body", "model"), req.model, "Model is required"))
    for i, message in enumerate(req.messages):
        errors += _message_errors(message.content, message.role, ("body", "messages", i), raw)
    if isinstance(req, MessagesRequest):
        if req.max_tokens <= 0:
            errors.append(
                value_error(("body", "max_tokens"), req.max_tokens, "max_tokens must be positive")
            )
        errors += _thinking_errors(req)
        stops = req.stop_sequences
        if stops is not None and len(stops) > MAX_STOP_STRINGS:
            errors.append(_too_long(("body", "stop_sequences"), stops, MAX_STOP_STRINGS))
        errors += _system_errors(req, raw)
    else:  # (count_tokens declares system before thinking)
        errors += _system_errors(req, raw) + _thinking_errors(req)
    errors += _tool_choice_errors(req, raw)
    if isinstance(req, MessagesRequest) and req.cache_salt is not None:
        errors += _cache_salt_errors(req.cache_salt)
    return errors


def _raw_at(raw: Any, *path: Any) -> Any:
    for key in path:
        try:
            raw = raw[key]
        except (KeyError, IndexError, TypeError):
            return None
    return raw


def _block_errors(blocks: list[ContentBlock], loc: tuple, raw: dict) -> list[dict]:
    """AnthropicContentBlock.validate_tool_change, per block; inside a
    ``str | list`` union pydantic reports the string branch's error first."""
    errors = []
    for j, block in enumerate(blocks):
        if block.type not in _TOOL_CHANGES:
            continue
        message = None
        if block.tool is None:
            message = f"tool is required for {block.type} blocks"
        elif block.type == "tool_removal" and not isinstance(block.tool, ToolReference):
            message = "tool_removal only accepts a tool_reference"
        if message is not None:
            errors.append(value_error((*loc, j), _raw_at(raw, *loc[1:], j), message))
    if errors:
        errors.insert(0, field_error("string_type", loc, _raw_at(raw, *loc[1:])))
    return errors


def _message_errors(content: Any, role: str, loc: tuple, raw: dict) -> list[dict]:
    if isinstance(content, str):
        return []
    errors = _block_errors(content, (*loc, "content"), raw)
    if errors:
        return errors
    # AnthropicMessage.validate_tool_change_role
    if role != "system":
        for block in content:
            if block.type in _TOOL_CHANGES:
                message = f'{block.type} blocks are only allowed in messages with role "system"'
                return [value_error(loc, _raw_at(raw, *loc[1:]), message)]
    return []


def _system_errors(req: MessagesRequest | CountTokensRequest, raw: dict) -> list[dict]:
    """validate_system: no tool changes in the top-level system prompt."""
    system = req.system
    if system is None or isinstance(system, str):
        return []
    errors = _block_errors(system, ("body", "system"), raw)
    if errors:
        return errors
    for block in system:
        if block.type in _TOOL_CHANGES:
            message = f'{block.type} blocks are only allowed in messages with role "system"'
            return [value_error(("body", "system"), raw.get("system"), message)]
    return []


def _thinking_errors(req: MessagesRequest | CountTokensRequest) -> list[dict]:
    thinking = req.thinking
    if isinstance(thinking, ThinkingEnabled) and thinking.budget_tokens < MIN_THINKING_BUDGET:
        return [
            field_error(
                "greater_than_equal",
                ("body", "thinking", "enabled", "budget_tokens"),
                thinking.budget_tokens,
                {"ge": MIN_THINKING_BUDGET},
            )
        ]
    return []


def _tool_choice_errors(req: MessagesRequest | CountTokensRequest, raw: dict) -> list[dict]:
    choice = req.tool_choice
    if choice is not None and choice.type == "tool" and not choice.name:
        message = "tool_choice.name is required when type is 'tool'"
        return [value_error(("body", "tool_choice"), raw.get("tool_choice"), message)]
    return []


def _too_long(loc: tuple, value: list, limit: int) -> dict:
    return {
        "type": "too_long",
        "loc": loc,
        "msg": f"List should have at most {limit} items after validation, not {len(value)}",
        "input": value,
        "ctx": {"field_type": "List", "max_length": limit, "actual_length": len(value)},
    }


def _cache_salt_errors(salt: str) -> list[dict]:
    low, high = CACHE_SALT_LENGTH
    loc = ("body", "cache_salt")
    if len(salt) < low:
        return [_length_error("string_too_short", loc, salt, "at least", low, "min_length")]
    if len(salt) > high:
        return [_length_error("string_too_long", loc, salt, "at most", high, "max_length")]
    return []


def _length_error(kind: str, loc: tuple, value: str, bound: str, n: int, key: str) -> dict:
    unit = "character" if n == 1 else "characters"
    return {
        "type": kind,
        "loc": loc,
        "msg": f"String should have {bound} {n} {unit}",
        "input": value,
        "ctx": {key: n},
    }


def check_thinking_budget(req: MessagesRequest, raw: dict) -> None:
    """AnthropicMessagesRequest.validate_thinking_budget (after the fields).
    A disaggregated prefill leg (``do_remote_decode``) never decodes: skipped."""
    if req.kv_transfer_params and req.kv_transfer_params.get("do_remote_decode"):
        return
    thinking = req.thinking
    if isinstance(thinking, ThinkingEnabled) and thinking.budget_tokens >= req.max_tokens:
        message = "thinking.budget_tokens must be less than max_tokens"
        raise validation_errors([value_error(("body",), raw, message)])
