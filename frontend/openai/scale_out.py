"""vLLM's scale-out routes beside /inference/v1/generate, for routers and
disaggregated deployments:

* POST /v1/chat/completions/render and /v1/completions/render: a request taken
  as far as the engine -- its token ids and sampling params -- without
  generating, as the /inference/v1/generate body to send on (one for chat, one
  per prompt for completions); nothing reaches the engine;
* POST /inference/v1/abort_requests: abort requests in flight by the ids the
  routes gave them (``cmpl-<id>-<prompt index>``, ``chatcmpl-<id>``,
  ``generate-tokens-<id>``).
"""

from __future__ import annotations

from typing import Any

import msgspec
from aiohttp import web

from frontend.errors import ApiError, invalid
from frontend.openai import aborts, chat, completions
from frontend.openai.common import decode_body, request_id_for
from frontend.openai.fastapi_params import http_error, raw_json
from frontend.state import AppState
from protocol.sampling import SamplingParams

BEAM_SEARCH = "Beam search is not supported by the render endpoint"
MM_RENDER = (
    "the render endpoint does not return multimodal features here yet: send requests with "
    "media to /v1/chat/completions"
)


class AbortRequests(msgspec.Struct):
    """/inference/v1/abort_requests' body (for /openapi.json: the route reads
    the raw body, for vLLM's error messages)."""

    request_ids: list[str]


async def render_chat(state: AppState, request: web.Request) -> web.Response:
    req = await decode_body(request, chat.ChatCompletionRequest)
    state.resolve_model(req.model)
    if req.use_beam_search:
        raise invalid(BEAM_SEARCH)
    prepared = await chat.prepare(state, req, engine_checks=False)
    assert prepared.params is not None  # (not beam search)
    if prepared.mm_features is not None:  # (vLLM answers its features: not implemented here)
        raise ApiError(MM_RENDER, 501, "NotImplementedError")
    ids = prepared.prompt_ids
    if not ids:
        raise invalid("No token_ids rendered")
    plan = prepared.plan
    offsets = (
        token_offsets(state, prepared.rendered.text, ids, req.add_special_tokens)
        if req.return_token_offsets
        else None
    )
    body = generate_request(
        f"chatcmpl-{request_id_for(request, req.request_id)}",
        ids,
        offsets,
        render_params(prepared.params, req),
        req,
        reasoning_ended=plan.reasoning_ended,
        reasoning_parser_kwargs=plan.reasoning_parser_kwargs,
    )
    return web.Response(body=state.json(body), content_type="application/json")


async def render_completion(state: AppState, request: web.Request) -> web.Response:
    req = await decode_body(request, completions.CompletionRequest)
    state.resolve_model(req.model)
    if req.use_beam_search:
        raise invalid(BEAM_SEARCH)
    prepared = await completions.prepare(state, req, engine_checks=False)
    assert prepared.params is not None
    base = f"cmpl-{request_id_for(request, req.request_id)}"
    several = len(prepared.rendered) > 1
    bodies = []
    for i, ((ids, text), params) in enumerate(zip(prepared.rendered, prepared.params)):
        if not ids:
            raise invalid("No token_ids rendered")
        offsets = (
            token_offsets(state, text, ids, req.add_special_tokens)
            if req.return_token_offsets and text is not None
            else None
        )
        bodies.append(
            generate_request(
                f"{base}-{i}" if several else base,
                ids,
                offsets,
                render_params(params, req),
                req,
            )
        )
    return web.Response(body=state.json(bodies), content_type="application/json")


def generate_request(
    request_id: str,
    token_ids: list[int],
    offsets: list[list[int]] | None,
    sampling_params: dict[str, Any],
    req: Any,
    *,
    reasoning_ended: bool | None = None,
    reasoning_parser_kwargs: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """vLLM's GenerateRequest, every field in its order."""
    return {
        "request_id": request_id,
        "token_ids": token_ids,
        "token_offsets": offsets,
        "features": None,  # (text-only models)
        "content_parts": None,
        "sampling_params": sampling_params,
        "model": req.model,
        "reasoning_ended": reasoning_ended,
        "reasoning_parser_kwargs": reasoning_parser_kwargs,
        "return_token_ids": None,
        "output_mode": "tokens",
        "stream": bool(req.stream),
        "stream_options": (
            msgspec.to_builtins(req.stream_options)
            if req.stream and req.stream_options is not None
            else None
        ),
        "cache_salt": req.cache_salt,
        "priority": req.priority,
        # (vLLM's render leaves these null: the request's are in extra_args)
        "kv_transfer_params": None,
        "ec_transfer_params": None,
    }


def render_params(params: SamplingParams, req: Any) -> dict[str, Any]:
    """The sampling params as vLLM's render serializes them (``to_sampling_params``,
    before the engine's input processor): the fields set (defaults left out),
    none of the engine's private ones (``_eos_token_id`` ...), the request's own
    stop ids (not the generation config's EOS ids) and watermarking wish, a
    grammar constraint in full with no backend chosen, and ``skip_clone``."""
    grammar = params.structured_outputs
    params = msgspec.structs.replace(
        params,
        watermarking=req.watermarking,
        stop_token_ids=list(dict.fromkeys(req.stop_token_ids or [])),
        structured_outputs=None,
    )
    out = {k: v for k, v in msgspec.to_builtins(params).items() if not k.startswith("_")}
    if grammar is not None:
        whole = {f.encode_name: getattr(grammar, f.name) for f in msgspec.structs.fields(grammar)}
        out["structured_outputs"] = {**whole, "_backend": None, "_backend_was_auto": False}
    out["skip_clone"] = True
    return out


def token_offsets(
    state: AppState, text: str, token_ids: list[int], add_special_tokens: bool
) -> list[list[int]] | None:
    """``return_token_offsets``: each token's [start, end) in the text it was
    cut from (the templated prompt for chat); null where they cannot be had
    (a tokenizer that renders ids itself, or ids that are not the text's)."""
    tokenizer = state.model.tokenizer
    if state.model.render_chat is not None:
        return None
    encoding = tokenizer.encode(text, add_special_tokens=add_special_tokens)
    ids, offsets = encoding.ids, encoding.offsets
    # The ids are the text's, or a truncation of them: its head (right), or its
    # tail behind the special tokens kept in front (left).
    n = len(token_ids)
    head = 0
    while head < min(n, len(ids)) and ids[head] == token_ids[head]:
        head += 1
    for keep in (head, 0):
        tail = n - keep
        if tail <= len(ids) - keep and ids[len(ids) - tail :] == token_ids[keep:]:
            return [list(o) for o in (*offsets[:keep], *offsets[len(ids) - tail :])]
    return None


async def abort_requests(state: AppState, request: web.Request) -> web.Response:
    """vLLM answers at once (the aborts are scheduled) with an empty 200;
    unknown ids are ignored."""
    value = raw_json(await request.read(), "JSON decode error: {}")
    if not isinstance(value, dict):  # (vLLM: an AttributeError, its 500; bad input is a 400)
        raise http_error("Request body must be a JSON object")
    ids = value.get("request_ids")
    if ids is None:
        raise http_error("Missing 'request_ids' in request body")
    if isinstance(ids, str):
        ids = [ids]
    state.table.abort_choices(aborts.matching(state.table, [str(i) for i in ids]))
    return web.Response(status=200)
