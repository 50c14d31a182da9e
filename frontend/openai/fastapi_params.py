"""Query parameters and embedded JSON bodies read the way FastAPI reads them for vLLM.

vLLM's operational routes declare ``Query(...)`` parameters and ``Body(embed=True)``
fields; FastAPI validates them all before the route runs and reports every
failure in one 400 (pydantic's error dicts, rendered by vLLM's handler:
:func:`frontend.errors.validation_errors`). :class:`Params` collects those
errors for one request and raises them together from :meth:`Params.check`.

FastAPI's rules kept here: a query parameter given twice takes the last value
(Starlette's ``query_params``); an embedded body is read as JSON only with a
JSON content type; a field that is absent or ``null`` is missing (its default,
or "Field required"); a body that is JSON but not an object makes every field
missing.
"""

from __future__ import annotations

import json
import re
from http import HTTPStatus
from typing import Any

from aiohttp import web

from frontend.errors import ApiError, lax_bool, validation_errors
from frontend.openai.common import json_decode_error

_INT = re.compile(r"\s*[+-]?\d+\s*")
MISSING = object()  # a body field that was not given (its error is recorded)


def _quoted(allowed: tuple[str, ...]) -> str:
    quoted = [f"'{a}'" for a in allowed]
    return quoted[0] if len(quoted) == 1 else f"{', '.join(quoted[:-1])} or {quoted[-1]}"


def literal(loc: tuple, value: Any, allowed: tuple[str, ...]) -> dict | None:
    """pydantic's error for ``value`` outside ``Literal[allowed]``, or None."""
    if value in allowed:
        return None
    expected = _quoted(allowed)
    return {
        "type": "literal_error",
        "loc": loc,
        "msg": f"Input should be {expected}",
        "input": value,
        "ctx": {"expected": expected},
    }


def missing(loc: tuple) -> dict:
    return {"type": "missing", "loc": loc, "msg": "Field required", "input": None}


def type_error(kind: str, loc: tuple, value: Any) -> dict:
    messages = {
        "dict_type": "Input should be a valid dictionary",
        "list_type": "Input should be a valid list",
        "string_type": "Input should be a valid string",
        "int_type": "Input should be a valid integer",
    }
    return {"type": kind, "loc": loc, "msg": messages[kind], "input": value}


class Params:
    """One request's parameters, validated as FastAPI does; errors raised together."""

    def __init__(self, request: web.Request) -> None:
        self.request = request
        self.errors: list[dict] = []
        self._body: Any = MISSING

    # ------------------------------------------------------------ query
    def _query(self, name: str) -> str | None:
        values = self.request.query.getall(name, [])
        return values[-1] if values else None

    def query_bool(self, name: str, default: bool) -> bool:
        text = self._query(name)
        if text is None:
            return default
        value = lax_bool(text)
        if value is None:
            self.errors.append(
                {
                    "type": "bool_parsing",
                    "loc": ("query", name),
                    "msg": "Input should be a valid boolean, unable to interpret input",
                    "input": text,
                }
            )
            return default
        return value

    def query_int(
        self, name: str, default: int, ge: int | None = None, le: int | None = None
    ) -> int:
        text = self._query(name)
        if text is None:
            return default
        loc = ("query", name)
        if not _INT.fullmatch(text):
            self.errors.append(
                {
                    "type": "int_parsing",
                    "loc": loc,
                    "msg": "Input should be a valid integer, unable to parse string as an integer",
                    "input": text,
                }
            )
            return default
        value = int(text)
        if ge is not None and value < ge:
            msg = f"Input should be greater than or equal to {ge}"
            self.errors.append(
                {
                    "type": "greater_than_equal",
                    "loc": loc,
                    "msg": msg,
                    "input": text,
                    "ctx": {"ge": ge},
                }
            )
        elif le is not None and value > le:
            msg = f"Input should be less than or equal to {le}"
            self.errors.append(
                {
                    "type": "less_than_equal",
                    "loc": loc,
                    "msg": msg,
                    "input": text,
                    "ctx": {"le": le},
                }
            )
        return value

    def query_literal(self, name: str, default: str, allowed: tuple[str, ...]) -> str:
        text = self._query(name)
        if text is None:
            return default
        error = literal(("query", name), text, allowed)
        if error is not None:
            self.errors.append(error)
            return default
        return text

    def query_list(self, name: str) -> list[str]:
        return self.request.query.getall(name, [])

    # ------------------------------------------------------------ embedded body
    async def _read_body(self) -> Any:
        """The JSON body, or None (empty, or not a JSON content type: FastAPI's
        strict content type); malformed JSON raises its 400 at once."""
        if self._body is MISSING:
            raw = await self.request.read()
            body: Any = None
            ctype = self.request.headers.get("Content-Type")
            if raw and ctype is not None and _json_type(ctype):
                try:
                    body = json.loads(raw)
                except (json.JSONDecodeError, UnicodeDecodeError):
                    raise json_decode_error(raw) or ApiError(
                        "There was an error parsing the body", 400, "Bad Request"
                    ) from None
            self._body = body
        return self._body

    async def body_field(self, name: str, required: bool = True, default: Any = None) -> Any:
        """The raw value of embedded body field ``name`` (None when defaulted or
        missing: a missing required field is an error)."""
        body = await self._read_body()
        loc = ("body", name)
        if body is not None and not isinstance(body, dict):
            self.errors.append(missing(loc))  # (FastAPI: body.get fails on a list)
            return MISSING
        value = body.get(name) if body is not None else None
        if value is None:
            if required:
                self.errors.append(missing(loc))
                return MISSING
            return default
        return value

    async def body_dict(self, name: str, required: bool = True) -> dict | None:
        value = await self.body_field(name, required)
        if value is MISSING or value is None:
            return None
        if not isinstance(value, dict):
            self.errors.append(type_error("dict_type", ("body", name), value))
            return None
        return value

    async def body_str(self, name: str, required: bool = True) -> str | None:
        value = await self.body_field(name, required)
        if value is MISSING or value is None:
            return None
        if not isinstance(value, str):
            self.errors.append(type_error("string_type", ("body", name), value))
            return None
        return value

    async def body_literal(self, name: str, allowed: tuple[str, ...]) -> str | None:
        value = await self.body_field(name)
        if value is MISSING:
            return None
        error = literal(("body", name), value, allowed)
        if error is not None:
            self.errors.append(error)
            return None
        return value

    async def whole_body(self) -> Any:
        """A single optional body model (not embedded): the JSON body, or None."""
        return await self._read_body()

    def add(self, error: dict) -> None:
        self.errors.append(error)

    def check(self) -> None:
        if self.errors:
            raise validation_errors(self.errors)


def _json_type(content_type: str) -> bool:
    """FastAPI's test: an ``application/json`` or ``application/*+json`` body."""
    main, _, sub = content_type.split(";", 1)[0].strip().lower().partition("/")
    return main == "application" and (sub == "json" or sub.endswith("+json"))


def http_error(detail: str, status: int = 400) -> ApiError:
    """A FastAPI ``HTTPException(status, detail)`` as vLLM's handler shapes it."""
    return ApiError(detail, status, HTTPStatus(status).phrase)


def raw_json(raw: bytes, decode_error: str) -> Any:
    """Starlette's ``request.json()`` for a route that reads the body itself:
    a JSONDecodeError is ``HTTPException(400, decode_error.format(e))``; bytes
    that are not UTF-8 are a ValueError (vLLM's 400 BadRequestError)."""
    try:
        return json.loads(raw)
    except json.JSONDecodeError as e:
        raise http_error(decode_error.format(e)) from None
    except UnicodeDecodeError as e:
        raise ApiError(str(e)) from None
