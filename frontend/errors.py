"""Every error a client sees, in OpenAI's (and vLLM's) shape:
``{"error": {"message", "type", "param", "code"}}``; only requests that no
route takes get Starlette's ``{"detail": ...}``, as from vLLM's server.

One payload builder (:func:`error_payload`) serves the three ways an error
leaves the frontend: a JSON response (:func:`error_response`, also what the
error middleware answers), and an SSE ``data:`` event once a stream's 200 is
out (:func:`sse_error_event`). vLLM writes stream errors with ``json.dumps``
(a space after each separator); ours are compact JSON, which parses the same.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Awaitable, Callable
from http import HTTPStatus
from typing import Any

import msgspec
from aiohttp import web

from protocol.errors import ValidationError

log = logging.getLogger("frontend")

_json = msgspec.json.Encoder()
CLIENT_GONE = 499  # nginx's "client closed request": never sent, only counted


class ApiError(Exception):
    """A request that cannot be served: how to report it over HTTP."""

    def __init__(
        self,
        message: str,
        status: int = 400,
        err_type: str = "BadRequestError",
        param: str | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.status = status
        self.err_type = err_type
        self.param = param

    def payload(self) -> dict:
        return error_payload(self.message, self.err_type, self.param, self.status)

    def body(self) -> bytes:
        return _json.encode(self.payload())


def error_payload(message: str, err_type: str, param: str | None, code: int) -> dict:
    return {"error": {"message": sanitize(message), "type": err_type, "param": param, "code": code}}


def error_response(error: ApiError, headers: dict[str, str] | None = None) -> web.Response:
    return web.Response(
        status=error.status, body=error.body(), content_type="application/json", headers=headers
    )


def sse_error_event(error: ApiError) -> bytes:
    return b"data: " + error.body() + b"\n\n"


def internal_error(reason: str = "Internal server error") -> ApiError:
    return ApiError(reason, 500, "InternalServerError")


def engine_failure(reason: str) -> ApiError:
    """What every request in flight gets when the engine dies (vLLM's message)."""
    return internal_error(
        f"EngineCore encountered an issue. See stack trace (if any) for the root cause. ({reason})"
    )


def from_validation(e: ValidationError) -> ApiError:
    return ApiError(str(e), 400, "BadRequestError", e.parameter)


def invalid(message: str, parameter: str | None = None, value: Any = None) -> ApiError:
    """A rule of vLLM's request models broken: its VLLMValidationError, which
    clients get as a plain BadRequestError (``"<message> (parameter=..., value=...)"``)."""
    return from_validation(ValidationError(message, parameter=parameter, value=value))


def schema_error(message: str, param: str | None = None) -> ApiError:
    """A body that does not fit the request schema (FastAPI's 422, which vLLM maps to 400)."""
    return ApiError(f"1 validation error:\n  {message}", 400, "Bad Request", param)


# ---------------------------------------------------------------- pydantic's field errors
# vLLM's request models are pydantic; FastAPI reports a body that does not fit
# them as a 400 listing each error as pydantic's dict. Routes that check a
# field by hand build those dicts here, so every one reads the same.

_FIELD_MESSAGES = {
    "missing": "Field required",
    "model_attributes_type": "Input should be a valid dictionary or object to extract fields from",
    "string_type": "Input should be a valid string",
    "dict_type": "Input should be a valid dictionary",
    "list_type": "Input should be a valid list",
    "int_type": "Input should be a valid integer",
    "float_type": "Input should be a valid number",
    "greater_than_equal": "Input should be greater than or equal to {ge}",
    "extra_forbidden": "Extra inputs are not permitted",
    "bool_type": "Input should be a valid boolean",
    "bool_parsing": "Input should be a valid boolean, unable to interpret input",
    "literal_error": "Input should be {expected}",
    "dataclass_type": "Input should be a dictionary or an instance of {class_name}",
}
_LAX_TRUE = frozenset({"1", "on", "t", "true", "y", "yes"})
_LAX_FALSE = frozenset({"0", "off", "f", "false", "n", "no"})
_MAX_REPORTED = 10  # vLLM's validation-error rendering
_MAX_INPUT_CHARS = 200


def lax_bool(value: Any) -> bool | None:
    """What pydantic's lax mode reads as a bool (True/False, 0/1 and the usual
    words in any case); None where a bool field fails (:func:`bool_error`)."""
    if isinstance(value, bool):
        return value
    if isinstance(value, (int, float)) and value in (0, 1):
        return bool(value)
    if isinstance(value, str):
        word = value.lower()
        if word in _LAX_TRUE:
            return True
        if word in _LAX_FALSE:
            return False
    return None


def field_error(kind: str, loc: tuple, value: Any, ctx: dict | None = None) -> dict:
    """One pydantic error: ``kind`` is its type (``missing``, ``string_type``...);
    ``ctx`` fills its message in, and is shown as pydantic shows it."""
    error = {
        "type": kind,
        "loc": loc,
        "msg": _FIELD_MESSAGES[kind].format(**(ctx or {})),
        "input": value,
    }
    if ctx is not None:
        error["ctx"] = ctx
    return error


def bool_error(loc: tuple, value: Any) -> dict:
    return field_error("bool_parsing" if isinstance(value, str) else "bool_type", loc, value)


def literal_error(loc: tuple, parent: dict, allowed: tuple[str, ...]) -> dict:
    """The error for ``parent["type"]`` outside ``allowed`` (missing: "Field required")."""
    if "type" not in parent:
        return field_error("missing", loc, parent)
    quoted = [f"'{a}'" for a in allowed]
    expected = quoted[0] if len(quoted) == 1 else f"{', '.join(quoted[:-1])} or {quoted[-1]}"
    return field_error("literal_error", loc, parent["type"], {"expected": expected})


def validation_errors(errors: list[dict]) -> ApiError:
    """FastAPI's request-validation 400 as vLLM renders it: "N validation errors:"
    and one line per error (inputs summarised), ``param`` the first error's path."""
    lines = []
    for err in errors[:_MAX_REPORTED]:
        shown = dict(err, loc=_dotted(err["loc"]), input=_summarize(err["input"]))
        lines.append(f"  {shown}")
    label = "error" if len(errors) == 1 else "errors"
    message = "\n".join([f"{len(errors)} validation {label}:", *lines])
    if len(errors) > _MAX_REPORTED:
        message += f"\n  ...and {len(errors) - _MAX_REPORTED} more {label}"
    return ApiError(message, 400, "Bad Request", _dotted(errors[0]["loc"]))


def _dotted(loc: tuple) -> str:
    return ".".join(str(p) for p in loc)


def _summarize(value: Any) -> Any:
    if isinstance(value, (list, tuple, dict)):
        return f"<{type(value).__name__} of {len(value)} items>"
    text = value if isinstance(value, str) else str(value)
    return text[:_MAX_INPUT_CHARS] + "...[truncated]" if len(text) > _MAX_INPUT_CHARS else text


def from_msgspec(e: msgspec.ValidationError | msgspec.DecodeError) -> ApiError:
    """msgspec's ``... - at `$.a[0]` `` becomes param ``body.a.0`` like vLLM's."""
    text = str(e)
    match = re.search(r" - at `\$(.*)`$", text)
    param = "body"
    if match:
        path = re.sub(r"\[(\d+)\]", r".\1", match.group(1))
        param = "body" + path
        text = text[: match.start()]
    if not isinstance(e, msgspec.ValidationError):  # (ValidationError subclasses DecodeError)
        text = f"JSON decode error: {text}"
    missing = re.fullmatch(r"Object missing required field `(\w+)`", text)
    if missing:  # pydantic's loc names the missing field itself
        param = f"{param}.{missing.group(1)}"
        text = "Field required"
    return schema_error(text, param)


def not_found_model(name: str, valid: list[str]) -> ApiError:
    return ApiError(
        f"The model `{name}` does not exist. Valid aliases: {', '.join(valid)}.",
        404,
        "NotFoundError",
        "model",
    )


def from_http_exception(e: web.HTTPException) -> ApiError:
    """aiohttp's own errors (body too large: 413) as vLLM's exception handler
    shapes FastAPI's: the status phrase as message and type."""
    phrase = HTTPStatus(e.status).phrase
    if e.status == 413:
        return ApiError(e.text or "Request body too large", 413, "RequestEntityTooLarge")
    return ApiError(phrase, e.status, phrase)


def unmatched_response(e: web.HTTPException) -> web.Response:
    """No route (404) or not this method (405), as vLLM's server answers them:
    Starlette's default ``{"detail": <status phrase>}``, since vLLM's handler
    covers FastAPI's HTTPException only, which the router's are not; a 405
    lists the route's methods in ``Allow``, joined with Starlette's ", "."""
    headers = None
    if isinstance(e, web.HTTPMethodNotAllowed):
        headers = {"Allow": ", ".join(sorted(e.allowed_methods))}
    body = _json.encode({"detail": HTTPStatus(e.status).phrase})
    return web.Response(
        status=e.status, body=body, content_type="application/json", headers=headers
    )


_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+>")
_TRACEBACK_LINE = re.compile(r'\n?\s*File "[^"]+", line \d+, in \S+(\n\s+.*)?')
_PATH = re.compile(r"/(?:home|usr|opt|var|tmp|root|lib|mnt|srv)(?:/[\w.\-]+)+")
_FILE_PATH = re.compile(r"(?:/[\w\-]+)+/[\w\-]+\.\w+")  # (a URL's path too, as vLLM)


def sanitize(message: str) -> str:
    """No memory addresses, tracebacks or file paths in messages sent to clients
    (vLLM's ``sanitize_message``, step for step)."""
    message = _TRACEBACK_LINE.sub("", _ADDRESS.sub(">", message))
    return _FILE_PATH.sub("<path>", _PATH.sub("<path>", message)).strip()


Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


# --log-error-stack (an aiohttp app key): a request's error is logged with its traceback.
LOG_ERROR_STACK = web.AppKey("log_error_stack", bool)
# Where a route notes the id it gave the request (the access log reads it too).
REQUEST_ID_KEY = "frontend.request_id"


@web.middleware
async def error_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    """The innermost middleware: whatever a handler raises becomes an OpenAI error."""
    try:
        return await handler(request)
    except ApiError as e:
        _log_stack(request, "Exception" if e.status >= 500 else "RequestValidationError")
        return error_response(e)
    except web.HTTPException as e:
        if e.status < 400:
            raise
        if e is request.match_info.http_exception:  # the router's: no route, no method
            return unmatched_response(e)
        _log_stack(request, "HTTPException")
        return error_response(from_http_exception(e))
    except ConnectionError:
        # The client went away while we wrote (a stream's start or end, most
        # often): nothing to report. aiohttp would log a traceback for a raised
        # error; a response it cannot write is dropped quietly.
        return web.Response(status=CLIENT_GONE)
    except asyncio.CancelledError:
        raise
    except Exception as e:
        log.exception("unhandled error in %s %s", request.method, request.path)
        return error_response(internal_error(f"Internal server error: {type(e).__name__}"))


def _log_stack(request: web.Request, kind: str) -> None:
    """vLLM's exception handlers under --log-error-stack."""
    if request.app.get(LOG_ERROR_STACK):
        log.exception("%s caught. Request id: %s", kind, request.get(REQUEST_ID_KEY))
