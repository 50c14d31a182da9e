"""Errors in OpenAI's (and vLLM's) shape: ``{"error": {message, type, param, code}}``."""

from __future__ import annotations

import re

import msgspec

from protocol.errors import ValidationError

_json = msgspec.json.Encoder()


class ApiError(Exception):
    def __init__(self, message: str, status: int = 400, err_type: str = "BadRequestError",
                 param: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.status = status
        self.err_type = err_type
        self.param = param

    def payload(self) -> dict:
        return {"error": {"message": sanitize(self.message), "type": self.err_type,
                          "param": self.param, "code": self.status}}

    def body(self) -> bytes:
        return _json.encode(self.payload())


def from_validation(e: ValidationError) -> ApiError:
    return ApiError(str(e), 400, "BadRequestError", e.parameter)


def schema_error(message: str, param: str | None = None) -> ApiError:
    """A body that does not fit the request schema (FastAPI's 422, which vLLM maps to 400)."""
    return ApiError(f"1 validation error:\n  {message}", 400, "Bad Request", param)


def from_msgspec(e: msgspec.ValidationError | msgspec.DecodeError) -> ApiError:
    """msgspec's ``... - at `$.a[0]` `` becomes param ``body.a.0`` like vLLM's."""
    text = str(e)
    match = re.search(r" - at `\$(.*)`$", text)
    param = "body"
    if match:
        path = re.sub(r"\[(\d+)\]", r".\1", match.group(1))
        param = "body" + path
        text = text[:match.start()]
    if not isinstance(e, msgspec.ValidationError):  # (ValidationError subclasses DecodeError)
        text = f"JSON decode error: {text}"
    missing = re.fullmatch(r"Object missing required field `(\w+)`", text)
    if missing:  # pydantic's loc names the missing field itself
        param = f"{param}.{missing.group(1)}"
        text = "Field required"
    return schema_error(text, param)


def not_found_model(name: str, valid: list[str]) -> ApiError:
    return ApiError(f"The model `{name}` does not exist. Valid aliases: {', '.join(valid)}.",
                    404, "NotFoundError", "model")


_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+>")
_PATH = re.compile(r"/(?:home|usr|opt|var|tmp|root|lib|mnt|srv)(?:/[\w.\-]+)+")


def sanitize(message: str) -> str:
    """No memory addresses or file paths in messages sent to clients (as vLLM)."""
    return _PATH.sub("<path>", _ADDRESS.sub(">", message)).strip()
