"""URL map and the small endpoints (models, health, version, tokenize, detokenize)."""

from __future__ import annotations

import secrets
import time
from typing import TYPE_CHECKING, Any

import msgspec
from aiohttp import web

from frontend.errors import ApiError
from frontend.openai import completions, generate
from frontend.openai.common import decode_body

if TYPE_CHECKING:
    from frontend.server import Server


def add_routes(app: web.Application, server: "Server") -> None:
    def bind(handler):
        async def route(request: web.Request) -> web.StreamResponse:
            return await handler(server, request)
        return route

    app.router.add_post("/v1/completions", bind(completions.create_completion))
    app.router.add_post("/inference/v1/generate", bind(generate.create_generate))
    app.router.add_get("/v1/models", bind(list_models))
    app.router.add_get("/health", bind(health))
    app.router.add_get("/version", bind(version))
    app.router.add_post("/tokenize", bind(tokenize))
    app.router.add_post("/detokenize", bind(detokenize))
    if server.config.enable_debug_endpoints:
        app.router.add_get("/debug/state", bind(debug_state))


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
    add_special_tokens: bool = True
    return_token_strs: bool | None = False
    messages: list[Any] | None = None
    add_generation_prompt: bool = True
    continue_final_message: bool = False
    chat_template: str | None = None
    chat_template_kwargs: dict[str, Any] | None = None
    tools: Any = None


async def tokenize(server: "Server", request: web.Request) -> web.Response:
    req = await decode_body(request, TokenizeRequest)
    server.resolve_model(req.model)
    if req.messages is not None:
        raise ApiError("chat-form tokenization is not available yet", 501,
                       "NotImplementedError")
    if req.prompt is not None:
        ids = (await server.renderer.encode_texts([req.prompt], req.add_special_tokens))[0]
    else:
        raise ApiError("Either prompt or messages must be provided", 400, "Bad Request",
                       "prompt")
    token_strs = ([server.model.id_to_token(t) for t in ids]
                  if req.return_token_strs else None)
    return json_response(server, {"count": len(ids), "max_model_len": server.max_model_len,
                                  "tokens": ids, "token_strs": token_strs})


class DetokenizeRequest(msgspec.Struct, kw_only=True):
    tokens: list[int]
    model: str | None = None


async def detokenize(server: "Server", request: web.Request) -> web.Response:
    req = await decode_body(request, DetokenizeRequest)
    server.resolve_model(req.model)
    bad = [t for t in req.tokens if t < 0 or t >= server.model.vocab_size]
    if bad:
        raise ApiError(f"Token id {bad[0]} is out of vocabulary", param="tokens")
    return json_response(server, {"prompt": server.model.decode(req.tokens)})


async def debug_state(server: "Server", request: web.Request) -> web.Response:
    """Test/ops view: table size and whether the engine still has work."""
    has_work = None
    if server.engine.alive:
        has_work = await server.engine.call_utility("has_work", timeout=5.0)
    return json_response(server, {"table": len(server.table), "engine_alive": server.engine.alive,
                                  "engine_has_work": has_work})
