"""Pieces shared by the OpenAI-style routes: body decoding, ids, usage, and
running a request's group."""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from typing import Any, TypeVar

import msgspec
from aiohttp import web

from frontend.choices import Choice, Group
from frontend.errors import REQUEST_ID_KEY, ApiError, from_msgspec, from_validation
from frontend.ids import random_hex
from frontend.state import AppState
from protocol.errors import ValidationError
from protocol.sampling import SamplingParams

T = TypeVar("T")
log = logging.getLogger("frontend.openai")


class StreamOptions(msgspec.Struct, kw_only=True):
    include_usage: bool | None = False
    continuous_usage_stats: bool | None = False


async def decode_body(request: web.Request, schema: type[T]) -> T:
    """Parse a JSON body into ``schema`` in lax mode (like pydantic's: "true" -> True)."""
    body = await request.read()
    try:
        value = _decoder(schema).decode(body)
    except msgspec.ValidationError as e:
        raise from_msgspec(e) from None
    except msgspec.DecodeError as e:
        raise json_decode_error(body) or from_msgspec(e) from None
    return value


_DECODERS: dict[type, msgspec.json.Decoder] = {}


def _decoder(schema: type[T]) -> msgspec.json.Decoder[T]:
    """One per request schema (the routes' classes): msgspec.json.decode(type=...)
    looks its type up on every call (~1.3 us a request)."""
    decoder = _DECODERS.get(schema)
    if decoder is None:
        decoder = _DECODERS[schema] = msgspec.json.Decoder(schema, strict=False)
    return decoder


def json_decode_error(body: bytes) -> ApiError | None:
    """Malformed JSON, reported exactly as FastAPI does for vLLM: Python's json
    error position in ``loc`` (``param`` ``body.<pos>``) and its message; an
    empty body is a missing one."""
    if not body:
        detail: dict[str, Any] = {
            "type": "missing",
            "loc": "body",
            "msg": "Field required",
            "input": "None",
        }
        return ApiError(f"1 validation error:\n  {detail}", 400, "Bad Request", "body")
    try:
        json.loads(body)
    except json.JSONDecodeError as e:
        detail = {
            "type": "json_invalid",
            "loc": f"body.{e.pos}",
            "msg": "JSON decode error",
            "input": "<dict of 0 items>",
            "ctx": {"error": e.msg},
        }
        return ApiError(f"1 validation error:\n  {detail}", 400, "Bad Request", f"body.{e.pos}")
    except (UnicodeDecodeError, RecursionError):
        return None
    return None


def request_id_for(request: web.Request, body_request_id: str | None) -> str:
    """The X-Request-Id header, else the body's request_id, else random hex (as vLLM)."""
    return request.headers.get("X-Request-Id") or body_request_id or random_hex(8)


def stream_usage_flags(options: StreamOptions | None, force: bool) -> tuple[bool, bool]:
    """(include_usage, continuous_usage_stats) as vLLM's should_include_usage."""
    if force:
        return True, True
    if options is None:
        return False, False
    include = bool(options.include_usage)
    return include, include and bool(options.continuous_usage_stats)


def usage_dict(prompt_tokens: int, completion_tokens: int, *, details: bool = False) -> dict:
    usage: dict[str, int | None] = {
        "prompt_tokens": prompt_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
        "completion_tokens": completion_tokens,
    }
    if details:
        usage["prompt_tokens_details"] = None
        usage["completion_tokens_details"] = None
    return usage


def prompt_tokens_details(cached: int, created: int | None = None, *, full: bool = True) -> dict:
    """--enable-prompt-tokens-details: the prompt tokens the engine's prefix
    cache held. ``full``: every field of vLLM's PromptTokenUsageInfo (a stream's
    chunk that leaves unset fields out has only ``cached_tokens``)."""
    if not full:
        return {"cached_tokens": cached}
    return {"cached_tokens": cached, "created_cache_tokens": created, "multimodal_tokens": None}


TRACE_HEADERS = ("traceparent", "tracestate")
_warned_untraced = False


def trace_headers(headers: Mapping[str, str]) -> dict[str, str] | None:
    """The request's W3C trace context headers (lower-case names), or None."""
    found = {h: headers[h] for h in TRACE_HEADERS if h in headers}
    return found or None


def warn_if_traced(headers: Mapping[str, str]) -> None:
    """vLLM's one warning for trace context sent to a server that does not trace."""
    global _warned_untraced
    if not _warned_untraced and any(h in headers for h in TRACE_HEADERS):
        _warned_untraced = True
        log.warning("Received a request with trace context but tracing is disabled")


async def serve_group(
    state: AppState,
    request: web.Request,
    group: Group,
    view,
    *,
    priority: int,
    cache_salt: str | None,
    reasoning_ended: bool | None = None,
    reasoning_parser_kwargs: dict | None = None,
) -> web.StreamResponse:
    """Send the group's engine requests, then stream them or answer once all are
    done. Whatever happens, the group is released: unfinished engine requests
    are aborted (client gone, error) and its table entries freed."""
    table = state.table
    request[REQUEST_ID_KEY] = group.request_id
    if state.request_log is not None:
        log_inputs(state, group)
    if state.config.trace_requests:
        group.trace_headers = trace_headers(request.headers)
    else:
        warn_if_traced(request.headers)
    try:
        try:
            table.submit(
                group,
                priority=priority,
                cache_salt=cache_salt,
                reasoning_ended=reasoning_ended,
                reasoning_parser_kwargs=reasoning_parser_kwargs,
            )
        except ValidationError as e:
            raise from_validation(e) from e
        if group.stream:
            return await view.stream(request)
        await group.wait_done()
        if group.error is not None:
            raise group.error
        return web.Response(body=state.json(view.full_response()), content_type="application/json")
    finally:
        table.release(group)


def reasoning_enabled(state: AppState) -> bool:
    """vLLM's reasoning_config is enabled: a reasoning parser (every one
    here has its start and end strings), or --reasoning-config."""
    parsers = state.parsers
    reasoning_parser = parsers is not None and parsers.reasoning_parser is not None
    return reasoning_parser or state.config.reasoning_config


def transfer_params(group: Group) -> dict[str, Any]:
    """The non-streaming response's ``kv_transfer_params`` and
    ``ec_transfer_params``: the first prompt's, from its choice that finished
    last (vLLM's ``final_res_batch[0]``); null when the engine sent none."""
    kv, ec = group.transfer_params.get(0, (None, None))
    return {"kv_transfer_params": kv, "ec_transfer_params": ec}


def log_inputs(state: AppState, group: Group) -> None:
    """--enable-log-requests: one line per engine request id vLLM's route gives
    (a completion's prompts each their own, ``cmpl-<id>-<prompt>``)."""
    assert state.request_log is not None
    per_prompt: dict[int, list[Choice]] = {}
    for choice in group.choices:
        per_prompt.setdefault(choice.prompt_index, []).append(choice)
    several = group.request_id.startswith("cmpl-")
    for index, choices in per_prompt.items():
        first = choices[0]
        params = first.params if isinstance(first.params, SamplingParams) else None
        state.request_log.inputs(
            f"{group.request_id}-{index}" if several else group.request_id,
            None,
            first.prompt_token_ids,
            params,
            len(choices),
            group.lora,
        )
