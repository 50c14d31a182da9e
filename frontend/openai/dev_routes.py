"""vLLM's development routes (``VLLM_SERVER_DEV_MODE=1``): caches, sleep, RPC, server info.

Each is a passthrough to the engine's utility method, sent as vLLM's engine
client sends it (``frontend/openai/engine_calls.py``), with vLLM's parameters,
bodies and errors (``vllm/entrypoints/serve/dev/``). An engine failure is
vLLM's 500 InternalServerError with the engine's message. The RL routes
(pause, abort, weights) are in ``rl_routes.py``.

``/server_info`` cannot be vLLM's: there is no VllmConfig or vLLM environment
in this process. It reports what the frontend knows (the README says what).
"""

from __future__ import annotations

import logging
import os
import platform
import sys
from collections.abc import Awaitable
from typing import Any

from aiohttp import web

from frontend.errors import ApiError
from frontend.openai import engine_calls
from frontend.openai.fastapi_params import Params, http_error, raw_json
from frontend.state import AppState

log = logging.getLogger("frontend.openai")

PAUSE_MODES = ("abort", "wait", "keep")


def json_response(state: AppState, value: Any, status: int = 200) -> web.Response:
    return web.Response(status=status, body=state.json(value), content_type="application/json")


def engine_error(e: Exception) -> ApiError:
    """vLLM's answer to an exception a route does not catch (a failed utility
    call arrives as a plain Exception): 500 with its message."""
    return ApiError(str(e), 500, "InternalServerError")


async def call_engine(coro: Awaitable[Any]) -> Any:
    """Await an engine call; its failure is vLLM's 500 (a route's own 400s pass)."""
    try:
        return await coro
    except ApiError:
        raise
    except Exception as e:
        raise engine_error(e) from e


# ------------------------------------------------------------ caches
async def reset_prefix_cache(state: AppState, request: web.Request) -> web.Response:
    params = Params(request)
    running = params.query_bool("reset_running_requests", False)
    external = params.query_bool("reset_external", False)
    params.check()
    log.info("Resetting prefix cache...")
    results = await call_engine(engine_calls.every(state, "reset_prefix_cache", running, external))
    return json_response(state, {"success": bool(all(results))})


async def reset_mm_cache(state: AppState, request: web.Request) -> web.Response:
    log.info("Resetting multi-modal cache...")  # (the frontend keeps no mm cache)
    await call_engine(engine_calls.first(state, "reset_mm_cache"))
    return web.Response(status=200)


async def reset_encoder_cache(state: AppState, request: web.Request) -> web.Response:
    log.info("Resetting encoder cache...")
    await call_engine(engine_calls.first(state, "reset_encoder_cache"))
    return web.Response(status=200)


# ------------------------------------------------------------ sleep
async def sleep(state: AppState, request: web.Request) -> web.Response:
    params = Params(request)
    level = params.query_int("level", 1, ge=0, le=2)
    mode = params.query_literal("mode", "abort", PAUSE_MODES)
    params.check()
    await call_engine(engine_calls.first(state, "sleep", level, mode))
    state.engine.set_paused(True)  # sleep pauses the scheduler first
    return json_response(state, {"status": "sleeping", "level": level})


async def release_kv_cache_memory(state: AppState, request: web.Request) -> web.Response:
    await call_engine(engine_calls.first(state, "release_kv_cache_memory"))
    return json_response(state, {"status": "kv_cache_released"})


async def wake_up(state: AppState, request: web.Request) -> web.Response:
    tags: list[str] | None = Params(request).query_list("tags") or None
    log.info("wake up the engine with tags: %s", tags)
    results = await call_engine(engine_calls.every(state, "wake_up", tags))
    fully_awake = all(results)
    if fully_awake:  # the engine resumes its scheduler once everything is resident
        state.engine.set_paused(False)
    return json_response(state, {"status": "awake" if fully_awake else "sleeping", "tags": tags})


async def is_sleeping(state: AppState, request: web.Request) -> web.Response:
    value = await call_engine(engine_calls.consensus(state, "is_sleeping"))
    return json_response(state, {"is_sleeping": value})


# ------------------------------------------------------------ RPC
async def collective_rpc(state: AppState, request: web.Request) -> web.Response:
    """Only strings travel as args and kwargs (vLLM: the method parses them)."""
    body = raw_json(await request.read(), "JSON decode error: {}")
    if not isinstance(body, dict):
        raise http_error("Request body must be a JSON object")
    method = body.get("method")
    if method is None:
        raise http_error("Missing 'method' in request body")
    try:
        args = list(body.get("args", []))  # vLLM's tuple(args)
    except TypeError as e:
        raise ApiError(str(e)) from None
    kwargs = body.get("kwargs", {})
    results = await call_engine(
        engine_calls.collective_rpc(state, method, body.get("timeout"), args, kwargs)
    )
    if results is None:
        return web.Response(status=200)
    shown = [r if r is None or isinstance(r, (dict, list)) else str(r) for r in results]
    return json_response(state, {"results": shown})


# ------------------------------------------------------------ info
async def get_world_size(state: AppState, request: web.Request) -> web.Response:
    params = Params(request)
    include_dp = params.query_bool("include_dp", True)
    params.check()
    ready = state.ready
    world_size = ready.world_size if ready is not None else 1
    if include_dp:
        world_size *= state.engine.data_parallel_size
    return json_response(state, {"world_size": world_size})


async def server_info(state: AppState, request: web.Request) -> web.Response:
    params = Params(request)
    config_format = params.query_literal("config_format", "text", ("text", "json"))
    params.check()
    config = _config(state)
    text = ", ".join(
        f"{key}={value!r}" for section in config.values() for key, value in section.items()
    )
    return json_response(
        state,
        {
            "vllm_config": text if config_format == "text" else config,
            "vllm_env": _vllm_env(),
            "system_env": _system_env(state),
        },
    )


def _config(state: AppState) -> dict[str, dict[str, Any]]:
    """The parts of vLLM's VllmConfig the frontend knows (model, engine facts)."""
    ready = state.ready
    model = state.model
    facts: dict[str, dict[str, Any]] = {
        "model_config": {
            "model": model.path,
            "tokenizer": state.operational.tokenizer_name or model.path,
            "served_model_name": model.served_names,
            "tokenizer_mode": model.tokenizer_mode,
        }
    }
    if ready is not None:
        facts["model_config"].update(max_model_len=ready.max_model_len, dtype=ready.dtype)
        facts["cache_config"] = {
            "block_size": ready.block_size,
            "num_gpu_blocks": ready.num_gpu_blocks,
        }
        facts["parallel_config"] = {
            "tensor_parallel_size": ready.tensor_parallel_size,
            "pipeline_parallel_size": ready.pipeline_parallel_size,
            "data_parallel_size": state.engine.data_parallel_size,
            "world_size": ready.world_size,
        }
        facts["scheduler_config"] = {
            "max_num_seqs": ready.max_num_seqs,
            "max_num_batched_tokens": ready.max_num_batched_tokens,
        }
    return facts


def _vllm_env() -> dict[str, str]:
    """vLLM's: every VLLM_* setting without KEY in its name (here: those set)."""
    return {k: v for k, v in sorted(os.environ.items()) if k.startswith("VLLM_") and "KEY" not in k}


def _system_env(state: AppState) -> dict[str, Any]:
    bits = sys.maxsize.bit_length() + 1
    return {
        "os": platform.platform(),
        "python_version": f"{sys.version} ({bits}-bit runtime)",
        "python_platform": platform.platform(),
        "vllm_version": state.ready.vllm_version if state.ready else None,
        "frontend": "vllm-frontend",
    }
