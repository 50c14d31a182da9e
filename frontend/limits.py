"""Admission control, the request body limit and the drain gate.

One aiohttp middleware in front of the generation routes. Before a handler
reads, tokenizes or renders anything it:

* answers 503 while the server drains (SIGTERM), with ``Connection: close``;
* answers 413 when ``Content-Length`` exceeds the body limit (a chunked body
  over the limit is stopped by aiohttp's ``client_max_size`` on read, which
  the error middleware also turns into a 413 in OpenAI's error shape);
* with ``--max-concurrent-requests N``, counts the request's choices --
  ``len(prompts) * n`` for /v1/completions, ``n`` for chat and generate --
  from a skeleton parse of the body (``msgspec.Raw``: nothing is built for the
  prompt), and answers 429 with ``Retry-After`` when admitting it would put
  more than N choices in flight. A request that alone has more than N choices
  can never be admitted: 400.

Admitted choices stay counted until the handler returns, that is until the
last byte of a stream is written (a stream holds engine work until then).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import msgspec
from aiohttp import web

from frontend.errors import ApiError

if TYPE_CHECKING:
    from frontend.metrics import HttpMetrics

GENERATION_ROUTES = frozenset({"/v1/completions", "/v1/chat/completions",
                               "/inference/v1/generate"})


class _Completion(msgspec.Struct):
    prompt: msgspec.Raw = msgspec.Raw(b"null")
    n: Any = 1


class _Chat(msgspec.Struct):
    n: Any = 1


class _GenerateParams(msgspec.Struct):
    n: Any = 1


class _Generate(msgspec.Struct):
    sampling_params: _GenerateParams | None = None


_decoders = {
    "/v1/completions": msgspec.json.Decoder(_Completion),
    "/v1/chat/completions": msgspec.json.Decoder(_Chat),
    "/inference/v1/generate": msgspec.json.Decoder(_Generate),
}
_raw_list = msgspec.json.Decoder(list[msgspec.Raw])


def _as_n(value: Any) -> int:
    if isinstance(value, bool):
        return 1
    try:
        n = int(value)
    except (TypeError, ValueError):
        return 1
    return n if n >= 1 else 1


def count_choices(path: str, body: bytes) -> int:
    """``len(prompts) * n`` from the body, without decoding prompts.

    A body that does not parse counts 1: the handler then answers with the
    proper validation error.
    """
    try:
        req = _decoders[path].decode(body)
    except (msgspec.DecodeError, KeyError):
        return 1
    if isinstance(req, _Generate):
        return _as_n(req.sampling_params.n) if req.sampling_params else 1
    n = _as_n(req.n)
    if isinstance(req, _Completion):
        return _count_prompts(bytes(req.prompt)) * n
    return n


def _count_prompts(raw: bytes) -> int:
    raw = raw.lstrip()
    if not raw.startswith(b"["):
        return 1
    try:
        items = _raw_list.decode(raw)
    except msgspec.DecodeError:
        return 1
    if not items:
        return 1
    head = bytes(items[0]).lstrip()[:1]
    # A list of strings or of token lists is a batch; a list of ints is one prompt.
    return len(items) if head in (b'"', b"[") else 1


class LimitsState:
    """In-flight counts (read by /metrics and by the drain)."""

    def __init__(self, max_choices: int = 0, max_body: int = 32 * 1024 * 1024,
                 retry_after: int = 1) -> None:
        self.max_choices = max_choices
        self.max_body = max_body
        self.retry_after = retry_after
        self.requests = 0
        self.choices = 0


def middleware(state: LimitsState, server: Any, http: "HttpMetrics | None"):
    def reject(reason: str, error: ApiError, **headers: str) -> web.Response:
        if http is not None:
            http.reject(reason)
        response = web.Response(status=error.status, body=error.body(),
                                content_type="application/json", headers=headers or None)
        return response

    def too_large(detail: str) -> web.Response:
        response = reject("body_too_large", ApiError(detail, 413, "RequestEntityTooLarge"))
        response.force_close()  # the unread rest of the body is not worth draining
        return response

    @web.middleware
    async def limits(request: web.Request, handler):
        length = request.content_length
        if length is not None and length > state.max_body:
            return too_large(f"Maximum request body size {state.max_body} exceeded, "
                             f"actual body size {length}")
        path = request.path
        if request.method != "POST" or path not in GENERATION_ROUTES:
            return _counted(await handler(request))
        if server.draining:
            response = reject("draining", ApiError(
                "The server is shutting down and accepts no new requests.", 503,
                "ServiceUnavailableError"))
            response.force_close()
            return response
        count = 0
        if state.max_choices:
            try:
                body = await request.read()  # cached: the handler reads it again for free
            except web.HTTPRequestEntityTooLarge as e:
                return too_large(e.text or "Request body too large")
            count = count_choices(path, body)
            if count > state.max_choices:
                return reject("too_many_choices", ApiError(
                    f"This request asks for {count} choices (prompts x n) but the server "
                    f"admits at most {state.max_choices} at a time "
                    f"(--max-concurrent-requests).", 400, "BadRequestError", "n"))
            if state.choices + count > state.max_choices:
                return reject("too_many_requests", ApiError(
                    f"The server is busy: {state.choices} of {state.max_choices} concurrent "
                    f"choices are in flight and this request asks for {count}. "
                    f"Retry later.", 429, "TooManyRequestsError"),
                    **{"Retry-After": str(state.retry_after)})
        state.requests += 1
        state.choices += count
        try:
            return _counted(await handler(request))
        finally:
            state.requests -= 1
            state.choices -= count

    def _counted(response: web.StreamResponse) -> web.StreamResponse:
        # A chunked body over the limit is refused by aiohttp while the handler
        # reads it (the error middleware shapes that 413).
        if response.status == 413 and http is not None:
            http.reject("body_too_large")
        return response

    return limits
