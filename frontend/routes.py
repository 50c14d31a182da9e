"""URL map and the small endpoints (models, health, version, tokenize, detokenize)."""

from __future__ import annotations

import secrets
import sys
import time
import tracemalloc
from typing import TYPE_CHECKING, Any

import msgspec
from aiohttp import web

from frontend import chat_template
from frontend.errors import ApiError, schema_error
from frontend.openai import chat, completions, generate
from frontend.openai.common import decode_body

if TYPE_CHECKING:
    from frontend.server import Server


def add_routes(app: web.Application, server: "Server") -> None:
    def bind(handler):
        async def route(request: web.Request) -> web.StreamResponse:
            return await handler(server, request)
        return route

    app.router.add_post("/v1/completions", bind(completions.create_completion))
    app.router.add_post("/v1/chat/completions", bind(chat.create_chat_completion))
    app.router.add_post("/inference/v1/generate", bind(generate.create_generate))
    app.router.add_get("/v1/models", bind(list_models))
    app.router.add_get("/health", bind(health))
    app.router.add_get("/version", bind(version))
    app.router.add_post("/tokenize", bind(tokenize))
    app.router.add_post("/detokenize", bind(detokenize))
    if server.config.enable_debug_endpoints:
        app.router.add_get("/debug/state", bind(debug_state))
    chat_template.prepare(server.model)  # compile once, before the first chat request


def json_response(server: "Server", value: Any, status: int = 200) -> web.Response:
    return web.Response(status=status, body=server.json(value), content_type="application/json")


async def list_models(server: "Server", request: web.Request) -> web.Response:
    now = int(time.time())
    data = [{
        "id": name, "object": "model", "created": now, "owned_by": "vllm",
        "root": server.model.path, "parent": None, "max_model_len": server.max_model_len,
        "permission": [{
            "id": f"modelperm-{secrets.token_hex(8)}", "object": "model_permission",
            "created": now, "allow_create_engine": False, "allow_sampling": True,
            "allow_logprobs": True, "allow_search_indices": False, "allow_view": True,
            "allow_fine_tuning": False, "organization": "*", "group": None,
            "is_blocking": False}],
    } for name in server.model.served_names]
    return json_response(server, {"object": "list", "data": data})


async def health(server: "Server", request: web.Request) -> web.Response:
    ok = server.engine.alive and not server.draining
    return web.Response(status=200 if ok else 503)


async def version(server: "Server", request: web.Request) -> web.Response:
    return json_response(server, {"version": server.ready.vllm_version if server.ready else None})


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
    tools: Any = None


async def tokenize(server: "Server", request: web.Request) -> web.Response:
    req = await decode_body(request, TokenizeRequest)
    server.resolve_model(req.model)
    if req.messages is not None:
        ids = await tokenize_chat(server, req)
    elif req.prompt is not None:
        add_special = req.add_special_tokens is not False
        ids = (await server.renderer.encode_texts([req.prompt], add_special))[0]
    else:
        raise ApiError("Either prompt or messages must be provided", 400, "Bad Request",
                       "prompt")
    token_strs = ([server.model.id_to_token(t) for t in ids]
                  if req.return_token_strs else None)
    return json_response(server, {"count": len(ids), "max_model_len": server.max_model_len,
                                  "tokens": ids, "token_strs": token_strs})


async def tokenize_chat(server: "Server", req: TokenizeRequest) -> list[int]:
    """The chat form: the same prompt ids /v1/chat/completions would send (no length limit)."""
    if not isinstance(req.messages, list):
        raise schema_error("Input should be a valid list", "body.messages")
    if req.continue_final_message and req.add_generation_prompt is True:
        raise ApiError("Cannot set both `continue_final_message` and "
                       "`add_generation_prompt` to True.")
    if req.chat_template is not None or (
            req.chat_template_kwargs and req.chat_template_kwargs.get("chat_template")
            is not None):
        raise ApiError(chat.UNTRUSTED_TEMPLATE)
    if req.tools:
        raise ApiError("tools are not supported by this frontend (it has no tool-call "
                       "parser); remove `tools` from the request", param="tools")
    rendered = await chat.render_chat(
        server, req.messages, add_generation_prompt=req.add_generation_prompt is not False,
        continue_final_message=req.continue_final_message,
        kwargs=chat.template_kwargs(req.chat_template_kwargs),
        add_special_tokens=bool(req.add_special_tokens), check_length=False)
    return rendered.token_ids


class DetokenizeRequest(msgspec.Struct, kw_only=True):
    tokens: list[int]
    model: str | None = None


async def detokenize(server: "Server", request: web.Request) -> web.Response:
    req = await decode_body(request, DetokenizeRequest)
    server.resolve_model(req.model)
    # vLLM only requires ids >= 0 (pydantic); ids the tokenizer does not know
    # decode to nothing, ids beyond 32 bits fail in the tokenizer.
    negative = next((i for i, t in enumerate(req.tokens) if t < 0), None)
    if negative is not None:
        raise schema_error("Input should be greater than or equal to 0",
                           f"body.tokens.{negative}")
    try:
        text = server.model.decode(req.tokens)
    except OverflowError as e:
        raise ApiError(str(e)) from e
    return json_response(server, {"prompt": text})


async def debug_state(server: "Server", request: web.Request) -> web.Response:
    """Test/ops view: table size and whether the engine still has work."""
    has_work = None
    if server.engine.alive:
        has_work = await server.engine.call_utility("has_work", timeout=5.0)
    state = {"table": len(server.table), "engine_alive": server.engine.alive,
             "engine_has_work": has_work, "python_blocks": sys.getallocatedblocks()}
    if tracemalloc.is_tracing():  # PYTHONTRACEMALLOC=1: where Python memory goes
        top = tracemalloc.take_snapshot().statistics("lineno")[:15]
        state["tracemalloc_top"] = [f"{s.size / 1024:.0f} KiB {s.count} {s.traceback}"
                                    for s in top]
    return json_response(server, state)
