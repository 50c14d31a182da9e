"""POST /start_profile and /stop_profile: served with ``--profiler-config`` naming a profiler.

As vLLM 0.32 (``serve/profile/api_router.py``, ``AsyncLLM.start_profile``):
the optional body's overrides are checked (strict types; a bad prefix or a
negative bound is a 400), one session at a time per API server (409 while
one is active; not enforced with several API servers, as vLLM), then the
engine's ``profile(is_start, prefix, delay, max)`` utility. A start the
engine refuses ends the session. vLLM's torch profiler of its own API-server
process has no counterpart here: only the engine's workers are profiled.
"""

from __future__ import annotations

import logging
import re
from typing import Any

from aiohttp import web

from frontend.errors import ApiError
from frontend.openai import engine_calls
from frontend.openai.dev_routes import call_engine
from frontend.openai.fastapi_params import Params, type_error
from frontend.state import AppState

log = logging.getLogger("frontend.openai")

_PREFIX = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
ALREADY_ACTIVE = (
    "A profiling session is already active. Call /stop_profile before starting another session."
)
BAD_PREFIX = (
    "profile_prefix must be 1-128 ASCII characters, start with a letter or number, "
    "and contain only letters, numbers, '.', '_', or '-'"
)


class Profiler:
    """The API server's profiling session (vLLM's ``_profile_session_active``)."""

    def __init__(self, state: AppState) -> None:
        self.state = state
        self.active = False
        self.guarded = state.table.num_clients == 1  # vLLM: one API server only

    async def start(self, state: AppState, request: web.Request) -> web.Response:
        overrides = await _overrides(request)
        log.info("Starting profiler...")
        if self.guarded and self.active:
            raise ApiError(ALREADY_ACTIVE, 409, "Conflict")
        prefix = overrides.get("profile_prefix")
        if prefix is not None and not (prefix.isascii() and _PREFIX.fullmatch(prefix)):
            raise ApiError(BAD_PREFIX)
        for name in ("delay_iterations", "max_iterations"):
            if overrides.get(name) is not None and overrides[name] < 0:
                raise ApiError(f"{name} must be greater than or equal to 0")
        self.active = self.guarded
        try:
            await call_engine(
                engine_calls.first(
                    state,
                    "profile",
                    True,
                    prefix,
                    overrides.get("delay_iterations"),
                    overrides.get("max_iterations"),
                )
            )
        except BaseException:
            self.active = False
            raise
        log.info("Profiler started.")
        return web.Response(status=200)

    async def stop(self, state: AppState, request: web.Request) -> web.Response:
        log.info("Stopping profiler...")
        await call_engine(engine_calls.first(state, "profile", False, None, None, None))
        self.active = False
        log.info("Profiler stopped.")
        return web.Response(status=200)


async def _overrides(request: web.Request) -> dict[str, Any]:
    """StartProfileRequest (optional body, strict types, extra keys ignored)."""
    params = Params(request)
    body = await params.whole_body()
    if body is None:
        return {}
    if not isinstance(body, dict):
        params.add(
            {
                "type": "model_type",
                "loc": ("body",),
                "msg": "Input should be a valid dictionary or instance of StartProfileRequest",
                "input": body,
                "ctx": {"class_name": "StartProfileRequest"},
            }
        )
        params.check()
    overrides: dict[str, Any] = {}
    for name, kind in (
        ("profile_prefix", str),
        ("delay_iterations", int),
        ("max_iterations", int),
    ):
        value = body.get(name)
        if value is None:
            continue
        if not isinstance(value, kind) or isinstance(value, bool):
            error = "string_type" if kind is str else "int_type"
            params.add(type_error(error, ("body", name), value))
            continue
        overrides[name] = value
    params.check()
    return overrides
