"""The small endpoints: models, health (and /ping), /load, version, tokenize,
detokenize, debug state."""

from __future__ import annotations

import asyncio
import os
import secrets
import sys
import time
import tracemalloc
from typing import Any

import msgspec
from aiohttp import web

from frontend.errors import ApiError, schema_error
from frontend.multimodal import chat as multimodal_chat
from frontend.multimodal.detect import has_media
from frontend.openai import validators as rules
from frontend.openai.common import decode_body
from frontend.openai.tooling import normalize_tools
from frontend.render import check_template_override, request_template, template_kwargs
from frontend.state import AppState


def json_response(state: AppState, value: Any, status: int = 200) -> web.Response:
    return web.Response(status=status, body=state.json(value), content_type="application/json")


async def list_models(state: AppState, request: web.Request) -> web.Response:
    """The served names, then the LoRA adapters in load order (vLLM's cards)."""
    now = int(time.time())

    def card(name: str, root: str, parent: str | None, max_model_len: int | None) -> dict:
        return {
            "id": name,
            "object": "model",
            "created": now,
            "owned_by": "vllm",
            "root": root,
            "parent": parent,
            "max_model_len": max_model_len,
            "permission": [
                {
                    "id": f"modelperm-{secrets.token_hex(8)}",
                    "object": "model_permission",
                    "created": now,
                    "allow_create_engine": False,
                    "allow_sampling": True,
                    "allow_logprobs": True,
                    "allow_search_indices": False,
                    "allow_view": True,
                    "allow_fine_tuning": False,
                    "organization": "*",
                    "group": None,
                    "is_blocking": False,
                }
            ],
        }

    lora = state.lora
    data = [
        card(name, state.model.path, None, state.max_model_len) for name in state.model.served_names
    ]
    data += [card(a.lora_name, a.lora_path, lora.parent(a), None) for a in lora.adapters.values()]
    return json_response(state, {"object": "list", "data": data})


async def health(state: AppState, request: web.Request) -> web.Response:
    return web.Response(status=200 if state.serving else 503)


async def server_load(state: AppState, request: web.Request) -> web.Response:
    """GET /load: the load-tracked requests in flight (0 unless
    --enable-server-load-tracking; ``frontend/ops/load.py`` counts them)."""
    return json_response(state, {"server_load": state.server_load})


async def version(state: AppState, request: web.Request) -> web.Response:
    return json_response(state, {"version": state.ready.vllm_version if state.ready else None})


class TokenizeRequest(msgspec.Struct, kw_only=True):
    model: str | None = None
    prompt: str | None = None
    # None: true for a prompt, false for messages (the template adds them).
    add_special_tokens: bool | None = None
    return_token_strs: bool | None = False
    messages: Any = None
    add_generation_prompt: bool | msgspec.UnsetType = msgspec.UNSET
    continue_final_message: bool = False
    chat_template: str | None = None
    chat_template_kwargs: dict[str, Any] | None = None
    mm_processor_kwargs: Any = None
    media_io_kwargs: Any = None
    tools: Any = None


async def tokenize(state: AppState, request: web.Request) -> web.Response:
    req = await decode_body(request, TokenizeRequest)
    state.resolve_model(req.model)
    if req.messages is not None:
        ids = await tokenize_chat(state, req)
    elif req.prompt is not None:
        ids = await state.renderer.encode_for_tokenize(
            req.prompt, req.add_special_tokens is not False
        )
    else:
        raise ApiError("Either prompt or messages must be provided", 400, "Bad Request", "prompt")
    token_strs = [state.model.id_to_token(t) for t in ids] if req.return_token_strs else None
    return json_response(
        state,
        {
            "count": len(ids),
            "max_model_len": state.max_model_len,
            "tokens": ids,
            "token_strs": token_strs,
        },
    )


async def tokenize_chat(state: AppState, req: TokenizeRequest) -> list[int]:
    """The chat form: the same prompt ids /v1/chat/completions would send (no length limit)."""
    if not isinstance(req.messages, list):
        raise schema_error("Input should be a valid list", "body.messages")
    if req.continue_final_message and req.add_generation_prompt is True:
        raise ApiError(
            "Cannot set both `continue_final_message` and `add_generation_prompt` to True."
        )
    config = state.config
    trusted = config.trust_request_chat_template
    check_template_override(req.chat_template, req.chat_template_kwargs, trusted)
    rules.check_mm_kwargs(
        req.mm_processor_kwargs, req.media_io_kwargs, config.trust_request_mm_kwargs
    )
    tools = normalize_tools(req.tools)
    kwargs = template_kwargs(req.chat_template_kwargs, defaults=config.default_chat_template_kwargs)
    if tools is not None:  # rendered into the prompt as on /v1/chat/completions
        kwargs = {"tools": tools, **kwargs}
    if state.mm_pool is not None and has_media(req.messages):
        prompt = await multimodal_chat.render(state.mm_pool, req, tools)
        return prompt.token_ids
    renderer = state.renderer
    own = request_template(req.chat_template, req.chat_template_kwargs, config.server_chat_template)
    template = renderer.template_for(own) if trusted else None
    rendered = await renderer.render_chat(
        renderer.parse_messages(req.messages, template),
        add_generation_prompt=req.add_generation_prompt is not False,
        continue_final_message=req.continue_final_message,
        kwargs=kwargs,
        add_special_tokens=bool(req.add_special_tokens),
        check_length=False,
        template=template,
    )
    return rendered.token_ids


class DetokenizeRequest(msgspec.Struct, kw_only=True):
    tokens: list[int]
    model: str | None = None


async def detokenize(state: AppState, request: web.Request) -> web.Response:
    req = await decode_body(request, DetokenizeRequest)
    state.resolve_model(req.model)
    # vLLM only requires ids >= 0 (pydantic); ids the tokenizer does not know
    # decode to nothing, ids beyond 32 bits fail in the tokenizer.
    negative = next((i for i, t in enumerate(req.tokens) if t < 0), None)
    if negative is not None:
        raise schema_error("Input should be greater than or equal to 0", f"body.tokens.{negative}")
    try:
        text = state.model.decode(req.tokens)
    except OverflowError as e:
        raise ApiError(str(e)) from e
    return json_response(state, {"prompt": text})


async def debug_state(state: AppState, request: web.Request) -> web.Response:
    """Test/ops view: table size and whether the engine still has work."""
    engine = state.engine
    has_work = None
    serving = engine.routable_ranks()
    if serving:  # (a stalled rank would not answer; one dying just now cannot)
        answers = await asyncio.gather(
            *(engine.call_utility("has_work", rank=rank, timeout=5.0) for rank in serving),
            return_exceptions=True,
        )
        has_work = any(answer is True for answer in answers)
    body: dict[str, Any] = {
        "worker": state.table.client_index,
        "workers": state.table.num_clients,
        "pid": os.getpid(),
        "table": len(state.table),
        "mm_processing": state.mm_pool.in_flight() if state.mm_pool is not None else 0,
        "engine_alive": engine.alive,
        "engine_has_work": has_work,
        "python_blocks": sys.getallocatedblocks(),
        "ranks": [
            {"rank": rank, "state": rank_state, "in_flight": state.table.in_flight(rank)}
            for rank, rank_state in enumerate(engine.rank_states())
        ],
    }
    if tracemalloc.is_tracing():  # PYTHONTRACEMALLOC=1: where Python memory goes
        top = tracemalloc.take_snapshot().statistics("lineno")[:15]
        body["tracemalloc_top"] = [f"{s.size / 1024:.0f} KiB {s.count} {s.traceback}" for s in top]
    return json_response(state, body)
