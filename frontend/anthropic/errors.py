"""Errors in the Messages API's shape, as vLLM's ``translate_error_response``
writes them: ``{"type": "error", "error": {"type", "message"}}`` with the
status of the error. The ``type`` is vLLM's own (``BadRequestError``,
``NotFoundError``...), not Anthropic's names. Body validation errors keep
the OpenAI shape (FastAPI answers those before vLLM's handler runs), so
only what goes wrong after the body is read comes here.
"""

from __future__ import annotations

import msgspec
from aiohttp import web

from frontend.errors import ApiError, sanitize

_json = msgspec.json.Encoder()

HARMONY_REFUSED = "The Messages API is not supported for gpt-oss (Harmony) models by this server"


def error_body(err_type: str, message: str) -> dict:
    return {"type": "error", "error": {"type": err_type, "message": sanitize(message)}}


def error_response(error: ApiError) -> web.Response:
    return web.Response(
        status=error.status,
        body=_json.encode(error_body(error.err_type, error.message)),
        content_type="application/json",
    )


def stream_error_event(message: str) -> bytes:
    """The ``event: error`` vLLM's stream converter sends when a stream fails."""
    return b"event: error\ndata: " + _json.encode(error_body("internal_error", message)) + b"\n\n"


def harmony_refused() -> ApiError:
    # vLLM renders gpt-oss through Harmony, whose vocabulary file this server cannot fetch.
    return ApiError(HARMONY_REFUSED, 400, "invalid_request_error")
