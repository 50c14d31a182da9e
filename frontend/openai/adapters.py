"""POST /v1/load_lora_adapter and /v1/unload_lora_adapter (VLLM_ALLOW_RUNTIME_LORA_UPDATING).

vLLM 0.32's routes (``vllm/entrypoints/serve/lora/api_router.py``): a JSON
body only, success as a plain-text sentence with status 200, errors in
OpenAI's shape (see ``frontend/lora.py`` for the rules). Adapters loaded here
are listed by /v1/models and selected by ``model`` like ``--lora-modules``.
"""

from __future__ import annotations

import msgspec
from aiohttp import web

from frontend.errors import ApiError
from frontend.openai.common import decode_body
from frontend.state import AppState


class LoadLoRAAdapterRequest(msgspec.Struct, kw_only=True):
    lora_name: str
    lora_path: str
    load_inplace: bool = False
    is_3d_lora_weight: bool = False


class UnloadLoRAAdapterRequest(msgspec.Struct, kw_only=True):
    lora_name: str
    lora_int_id: int | None = None  # accepted and unused, as in vLLM


def check_json_media_type(request: web.Request) -> None:
    """vLLM's ``validate_json_request`` dependency."""
    if request.content_type.lower() != "application/json":
        raise ApiError(
            "1 validation error:\n  Unsupported Media Type: Only 'application/json' is allowed",
            400,
            "Bad Request",
        )


def _ok(message: str) -> web.Response:
    return web.Response(status=200, text=message)


async def load_lora_adapter(state: AppState, request: web.Request) -> web.Response:
    check_json_media_type(request)
    req = await decode_body(request, LoadLoRAAdapterRequest)
    return _ok(
        await state.lora.load(
            req.lora_name,
            req.lora_path,
            load_inplace=req.load_inplace,
            is_3d_lora_weight=req.is_3d_lora_weight,
        )
    )


async def unload_lora_adapter(state: AppState, request: web.Request) -> web.Response:
    check_json_media_type(request)
    req = await decode_body(request, UnloadLoRAAdapterRequest)
    return _ok(await state.lora.unload(req.lora_name))
