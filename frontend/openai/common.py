"""Pieces shared by the OpenAI-style routes: body decoding, ids, usage, logprobs JSON,
and running a request's group."""

from __future__ import annotations

import json
import secrets
from typing import TYPE_CHECKING, TypeVar

import msgspec
from aiohttp import web

from frontend.errors import ApiError, from_msgspec, from_validation, schema_error
from frontend.fanout import Group
from frontend.text import Position
from protocol.errors import ValidationError

if TYPE_CHECKING:
    from frontend.model import ModelInfo
    from frontend.server import Server

T = TypeVar("T")

LOGPROB_FLOOR = -9999.0  # OpenAI's JSON-safe stand-in for -inf


class StreamOptions(msgspec.Struct, kw_only=True):
    include_usage: bool | None = False
    continuous_usage_stats: bool | None = False


async def decode_body(request: web.Request, schema: type[T]) -> T:
    """Parse a JSON body into ``schema`` in lax mode (like pydantic's: "true" -> True)."""
    body = await request.read()
    try:
        value = msgspec.json.decode(body, type=schema, strict=False)
    except msgspec.ValidationError as e:
        raise from_msgspec(e) from None
    except msgspec.DecodeError as e:
        raise json_decode_error(body) or from_msgspec(e) from None
    return value


def json_decode_error(body: bytes) -> ApiError | None:
    """Malformed JSON, reported exactly as FastAPI does for vLLM: Python's json
    error position in ``loc`` (``param`` ``body.<pos>``) and its message; an
    empty body is a missing one."""
    if not body:
        detail = {"type": "missing", "loc": "body", "msg": "Field required", "input": "None"}
        return ApiError(f"1 validation error:\n  {detail}", 400, "Bad Request", "body")
    try:
        json.loads(body)
    except json.JSONDecodeError as e:
        detail = {"type": "json_invalid", "loc": f"body.{e.pos}", "msg": "JSON decode error",
                  "input": "<dict of 0 items>", "ctx": {"error": e.msg}}
        return ApiError(f"1 validation error:\n  {detail}", 400, "Bad Request",
                        f"body.{e.pos}")
    except (UnicodeDecodeError, RecursionError):
        return None
    return None


def request_id_for(request: web.Request, body_request_id: str | None) -> str:
    """The X-Request-Id header, else the body's request_id, else random hex (as vLLM)."""
    return (request.headers.get("X-Request-Id") or body_request_id
            or secrets.token_hex(8))


CACHE_SALT_MAX_LENGTH = 128
CACHE_SALT_FORBIDDEN_CHARS = frozenset("@/\\\x00")


def validate_cache_salt(cache_salt: object) -> None:
    """vLLM's ``validate_cache_salt`` (a model validator: a plain BadRequestError)."""
    if cache_salt is None:
        return
    if not isinstance(cache_salt, str) or not cache_salt:
        raise from_validation(ValidationError(
            "Parameter 'cache_salt' must be a non-empty string if provided.",
            parameter="cache_salt"))
    if len(cache_salt) > CACHE_SALT_MAX_LENGTH or any(
            c in CACHE_SALT_FORBIDDEN_CHARS for c in cache_salt):
        raise from_validation(ValidationError(
            f"Parameter 'cache_salt' must be at most {CACHE_SALT_MAX_LENGTH} characters "
            "and must not contain '@', '/', '\\\\', or NUL.", parameter="cache_salt"))


def stream_usage_flags(options: StreamOptions | None, force: bool) -> tuple[bool, bool]:
    """(include_usage, continuous_usage_stats) as vLLM's should_include_usage."""
    if force:
        return True, True
    if options is None:
        return False, False
    include = bool(options.include_usage)
    return include, include and bool(options.continuous_usage_stats)


def usage_dict(prompt_tokens: int, completion_tokens: int, *, details: bool = False) -> dict:
    usage = {"prompt_tokens": prompt_tokens,
             "total_tokens": prompt_tokens + completion_tokens,
             "completion_tokens": completion_tokens}
    if details:
        usage["prompt_tokens_details"] = None
        usage["completion_tokens_details"] = None
    return usage


def completion_logprobs(model: "ModelInfo", token_ids: list[int],
                        positions: list[Position | None], num_top: int,
                        all_alternatives: bool, initial_offset: int,
                        as_token_ids: bool) -> dict:
    """The completions ``logprobs`` object for ``token_ids`` and their positions.

    ``top_logprobs`` holds the sampled token plus the top ``num_top`` (keyed by
    text, so equal texts collapse); a position without logprobs (the first
    prompt token) gives nulls and the token's plain decoding.
    """
    offsets: list[int] = []
    token_logprobs: list[float | None] = []
    tokens: list[str] = []
    top: list[dict[str, float] | None] = []
    last_len = 0
    for i, token_id in enumerate(token_ids):
        pos = positions[i] if i < len(positions) else None
        if pos is None:
            token = f"token_id:{token_id}" if as_token_ids else model.decode([token_id])
            token_logprobs.append(None)
            top.append(None)
        else:
            lp, _, text = pos[token_id]
            token = f"token_id:{token_id}" if as_token_ids else text
            token_logprobs.append(max(lp, LOGPROB_FLOOR))
            top.append({
                (f"token_id:{tid}" if as_token_ids else t): max(v, LOGPROB_FLOOR)
                for k, (tid, (v, _, t)) in enumerate(pos.items())
                if all_alternatives or num_top == -1 or num_top >= k
            })
        tokens.append(token)
        offsets.append(initial_offset if not offsets else offsets[-1] + last_len)
        last_len = len(token)
    return {"text_offset": offsets, "token_logprobs": token_logprobs, "tokens": tokens,
            "top_logprobs": top}


def prompt_logprobs_json(positions: list[Position | None] | None) -> list | None:
    """``prompt_logprobs``: null first, then ``{"<id>": {logprob, rank, decoded_token}}``."""
    if positions is None:
        return None
    return [None if p is None else {
        str(tid): {"logprob": max(lp, LOGPROB_FLOOR), "rank": rank, "decoded_token": text}
        for tid, (lp, rank, text) in p.items()} for p in positions]


def ensure_list_of_ints(value: object, param: str) -> list[int]:
    if not isinstance(value, list) or not all(
            isinstance(v, int) and not isinstance(v, bool) for v in value):
        raise schema_error(f"{param} must be a list of integers", f"body.{param}")
    return value


async def serve_group(server: "Server", request: web.Request, group: Group, view,
                      *, priority: int, cache_salt: str | None) -> web.StreamResponse:
    """Send the group's engine requests, then stream them or answer once all are
    done. Whatever happens, the group is released: unfinished engine requests
    are aborted (client gone, error) and its table entries freed."""
    try:
        try:
            server.table.submit(group, priority=priority, cache_salt=cache_salt)
        except ValidationError as e:
            raise from_validation(e) from e
        if group.stream:
            return await view.stream(request)
        await group.wait_done()
        server.raise_if_failed(group)
        return web.Response(body=server.json(view.full_response()),
                            content_type="application/json")
    finally:
        server.table.release(group)
