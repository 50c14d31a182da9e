"""POST /v1/chat/completions/render and /v1/completions/render (vLLM's scale-out
routes): a request taken as far as the engine -- its token ids and sampling
params -- without generating, as the ``/inference/v1/generate`` body a router
or a disaggregated deployment sends on (one for chat, one per prompt for
completions). Nothing reaches the engine.
"""

from __future__ import annotations

from typing import Any

import msgspec
from aiohttp import web

from frontend.errors import invalid
from frontend.openai import chat, completions
from frontend.openai.common import decode_body, request_id_for
from frontend.state import AppState
from protocol.sampling import SamplingParams

BEAM_SEARCH = "Beam search is not supported by the render endpoint"


async def render_chat(state: AppState, request: web.Request) -> web.Response:
    req = await decode_body(request, chat.ChatCompletionRequest)
    state.resolve_model(req.model)
    if req.use_beam_search:
        raise invalid(BEAM_SEARCH)
    prepared = await chat.prepare(state, req, engine_checks=False)
    assert prepared.params is not None  # (not beam search)
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
        render_params(prepared.params, req.watermarking),
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
                render_params(params, req.watermarking),
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


def render_params(params: SamplingParams, watermarking: bool | None) -> dict[str, Any]:
    """The sampling params as vLLM's render serializes them: the fields set
    (defaults left out), none of the engine's private ones (``_eos_token_id``
    ...), the request's own watermarking wish, and ``skip_clone``."""
    params = msgspec.structs.replace(params, watermarking=watermarking)
    out = {k: v for k, v in msgspec.to_builtins(params).items() if not k.startswith("_")}
    so = out.get("structured_outputs")
    if isinstance(so, dict):
        out["structured_outputs"] = {k: v for k, v in so.items() if not k.startswith("_")}
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
    if ids[-len(token_ids) :] == token_ids:  # whole, or truncated on the left
        return [list(o) for o in offsets[-len(token_ids) :]]
    if ids[: len(token_ids)] == token_ids:  # truncated on the right
        return [list(o) for o in offsets[: len(token_ids)]]
    return None
