"""vLLM's RL routes (``VLLM_SERVER_DEV_MODE=1``): pause, resume, abort, weight transfer.

As ``vllm/entrypoints/rl/online/api_router.py``. /pause, /resume, /is_paused
and /abort_requests catch their own failures and answer with a bare
``{"error": "..."}`` (vLLM's shape for them, not the OpenAI one). The weight
routes are ``collective_rpc`` calls of the workers' methods; they fail (500)
on an engine started without ``--weight-transfer-config``.

A pause changes what the frontend may expect of the engine: a paused rank
sends nothing for the requests it holds, which is no stall
(``EngineClient.set_paused``).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from aiohttp import web

from frontend.openai import aborts, engine_calls
from frontend.openai.dev_routes import PAUSE_MODES, call_engine, json_response
from frontend.openai.fastapi_params import MISSING, Params, http_error, raw_json, type_error
from frontend.state import AppState

log = logging.getLogger("frontend.openai")

# vLLM's AsyncLLM.pause_generation sleeps this long after the engine paused,
# so that the last outputs of aborted requests reach their clients first.
PAUSE_SETTLE_S = 0.02


def _bare_error(state: AppState, message: str, status: int) -> web.Response:
    return json_response(state, {"error": message}, status)


# ------------------------------------------------------------ pause
async def pause(state: AppState, request: web.Request) -> web.Response:
    params = Params(request)
    mode = params.query_literal("mode", "abort", PAUSE_MODES)
    clear_cache = params.query_bool("clear_cache", True)  # deprecated, passed on as vLLM does
    params.check()
    try:
        await engine_calls.first(state, "pause_scheduler", mode, clear_cache)
        state.engine.set_paused(True)
        await asyncio.sleep(PAUSE_SETTLE_S)
    except ValueError as e:
        return _bare_error(state, str(e), 400)
    except Exception as e:
        log.exception("Failed to pause generation")
        return _bare_error(state, f"Failed to pause generation: {e}", 500)
    return json_response(state, {"status": "paused"})


async def resume(state: AppState, request: web.Request) -> web.Response:
    try:
        await engine_calls.first(state, "resume_scheduler")
    except Exception as e:
        log.exception("Failed to resume generation")
        return _bare_error(state, f"Failed to resume generation: {e}", 500)
    state.engine.set_paused(False)
    return json_response(state, {"status": "resumed"})


async def is_paused(state: AppState, request: web.Request) -> web.Response:
    try:
        paused = await engine_calls.consensus(state, "is_scheduler_paused")
    except Exception as e:
        log.exception("Failed to fetch pause status")
        return _bare_error(state, f"Failed to fetch pause status: {e}", 500)
    return json_response(state, {"is_paused": paused})


async def abort_requests(state: AppState, request: web.Request) -> web.Response:
    """External ids given: those; none (or empty): everything in flight."""
    body = raw_json(await request.read(), "Invalid JSON format")
    if not isinstance(body, dict):
        raise http_error("Request body must be a JSON object")
    request_ids = body.get("request_ids")
    try:
        if request_ids:
            ids = [request_ids] if isinstance(request_ids, str) else list(request_ids)
            state.table.abort_choices(aborts.matching(state.table, ids))
            count = len(request_ids)  # vLLM's len() of what was given
        else:
            choices = aborts.in_flight(state.table)
            count = aborts.tracked_ids(choices)
            state.table.abort_choices(choices)
    except Exception as e:
        log.exception("Failed to abort requests")
        return _bare_error(state, f"Failed to abort requests: {e}", 500)
    return json_response(state, {"status": "aborted", "aborted": count})


# ------------------------------------------------------------ weights
async def _rpc(state: AppState, method: str, kwargs: dict[str, Any] | None = None) -> None:
    await call_engine(engine_calls.collective_rpc(state, method, None, [], kwargs))


async def init_weight_transfer_engine(state: AppState, request: web.Request) -> web.Response:
    params = Params(request)
    init_info = await params.body_dict("init_info")
    params.check()
    await _rpc(state, "init_weight_transfer_engine", {"init_info": init_info})
    return json_response(state, {"message": "Weight transfer initialized"})


async def shutdown_weight_transfer_engine(state: AppState, request: web.Request) -> web.Response:
    await _rpc(state, "shutdown_weight_transfer_engine")
    return json_response(state, {"message": "Weight transfer shut down"})


async def start_weight_update(state: AppState, request: web.Request) -> web.Response:
    await _rpc(state, "start_weight_update")
    return json_response(state, {"message": "Weight update started"})


async def start_draft_weight_update(state: AppState, request: web.Request) -> web.Response:
    await _rpc(state, "start_draft_weight_update")
    return json_response(state, {"message": "Draft weight update started"})


async def update_weights(state: AppState, request: web.Request) -> web.Response:
    """``update_info``: an object, or a list of objects (one per worker rank)."""
    params = Params(request)
    info = await params.body_field("update_info")
    if info is not MISSING and not _is_payload(info):
        # pydantic's errors for each branch of dict[str, Any] | list[dict[str, Any]]
        # (vLLM drops the branch names from their locations)
        loc = ("body", "update_info")
        params.add(type_error("dict_type", loc, info))
        if isinstance(info, list):
            for i, item in enumerate(info):
                if not isinstance(item, dict):
                    params.add(type_error("dict_type", (*loc, i), item))
        else:
            params.add(type_error("list_type", loc, info))
    params.check()
    await _rpc(state, "update_weights", {"update_info": info})
    return json_response(state, {"message": "Weights updated"})


def _is_payload(value: Any) -> bool:
    return isinstance(value, dict) or (
        isinstance(value, list) and all(isinstance(item, dict) for item in value)
    )


async def finish_weight_update(state: AppState, request: web.Request) -> web.Response:
    params = Params(request)
    version = await params.body_str("weight_version", required=False)
    params.check()
    await _rpc(state, "finish_weight_update")
    if version is not None:
        await call_engine(engine_calls.first(state, "set_weight_version", version))
    return json_response(state, {"message": "Weight update finished"})


async def update_weight_version(state: AppState, request: web.Request) -> web.Response:
    params = Params(request)
    version = await params.body_str("new_version")
    params.check()
    await call_engine(engine_calls.first(state, "set_weight_version", version))
    return json_response(state, {"success": True, "new_version": version})


async def weight_info(state: AppState, request: web.Request) -> web.Response:
    version = await call_engine(engine_calls.consensus(state, "get_weight_version"))
    return json_response(state, {"weight_version": version})


async def weight_checker(state: AppState, request: web.Request) -> web.Response:
    """Checksum, reset (zeroes the weights!) or compare with a baseline."""
    params = Params(request)
    action = await params.body_literal("action", ("checksum", "reset", "compare"))
    baseline = await params.body_dict("baseline", required=False)
    for key, value in (baseline or {}).items():
        if not isinstance(value, str):
            params.add(type_error("string_type", ("body", "baseline", key), value))
    params.check()
    if action == "reset":
        await _rpc(state, "reset_weights")
        return json_response(state, {"status": "reset"})
    if action == "compare" and baseline is None:
        raise http_error("action='compare' requires a 'baseline' object")
    checksums: dict[str, str] = {}
    per_rank = await call_engine(engine_calls.every(state, "compute_weight_checksums"))
    for workers in per_rank:
        for worker in workers:
            if duplicates := checksums.keys() & worker.keys():
                raise http_error(f"Duplicate weight checksum keys: {sorted(duplicates)}", 500)
            checksums.update(worker)
    if action == "checksum":
        return json_response(state, {"checksums": checksums})
    assert baseline is not None  # (compare)
    mismatches = sorted(
        key for key in checksums.keys() | baseline.keys() if checksums.get(key) != baseline.get(key)
    )
    return json_response(state, {"match": not mismatches, "mismatches": mismatches})
