"""Admission control, the request body limit and the drain gate.

One aiohttp middleware in front of every route. Before a handler reads,
tokenizes or renders anything it:

* answers 413 when ``Content-Length`` exceeds the body limit (a chunked body
  over the limit is stopped by aiohttp's ``client_max_size`` on read, which
  the error middleware also turns into a 413 in OpenAI's error shape);
* for the generation routes (those of the route table with a choice counter):
  answers 503 while the server drains (SIGTERM), with ``Connection: close``;
  and with ``--max-concurrent-requests N`` counts the request's choices from
  a skeleton parse of the body (nothing is built for the prompt), answering
  429 with ``Retry-After`` when admitting it would put more than N choices in
  flight. A request that alone has more than N choices can never be
  admitted: 400.

Admitted choices stay counted until the handler returns, that is until the
last byte of a stream is written (a stream holds engine work until then).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from aiohttp import web
from aiohttp.web_urldispatcher import AbstractRoute

from frontend.errors import ApiError, error_response
from frontend.state import AppState


class LimitsState:
    """This process's in-flight counts (read by /metrics and the drain) and the
    admission decision. With several frontend processes (``--api-server-count``)
    the limit is the whole service's: each process keeps its counts in its own
    slot of shared memory and decides under a lock over the sum."""

    def __init__(
        self,
        max_choices: int = 0,
        max_body: int = 32 * 1024 * 1024,
        retry_after: int = 1,
        shared: SharedCounts | None = None,
        slot: int = 0,
    ) -> None:
        self.max_choices = max_choices
        self.max_body = max_body
        self.retry_after = retry_after
        self.requests = 0
        self.choices = 0
        self._shared = shared
        self._slot = slot

    def admit(self, count: int) -> tuple[bool, int]:
        """Count a request of ``count`` choices in if it fits; returns whether it
        did, and the choices in flight (the service's) before it."""
        shared = self._shared
        if shared is None or not self.max_choices:
            return self._admit(count, self.choices)
        with shared.lock:  # check and count in, as one step for the service
            return self._admit(count, sum(shared.choices))

    def _admit(self, count: int, in_flight: int) -> tuple[bool, int]:
        if self.max_choices and in_flight + count > self.max_choices:
            return False, in_flight
        self._add(1, count)
        return True, in_flight

    def release(self, count: int) -> None:
        # Only this process writes its slot: others may read it a moment late,
        # which errs on the safe side.
        self._add(-1, -count)

    def _add(self, requests: int, choices: int) -> None:
        self.requests += requests
        self.choices += choices
        if self._shared is not None:
            self._shared.requests[self._slot] = self.requests
            self._shared.choices[self._slot] = self.choices


class SharedCounts(Protocol):
    """Shared memory of the frontend processes (``frontend/supervisor.py``)."""

    lock: Any
    requests: Any  # one slot per process
    choices: Any


def middleware(
    state: LimitsState,
    app: AppState,
    counters: dict[AbstractRoute, Callable[[bytes], int]],
    on_reject: Callable[[str], None] | None,
):
    """``counters``: the generation routes as aiohttp registered them, with
    their choice counters (from the route table); ``on_reject`` is told the
    reason of every refusal (metrics)."""

    def reject(reason: str, error: ApiError, **headers: str) -> web.Response:
        if on_reject is not None:
            on_reject(reason)
        return error_response(error, headers or None)

    def too_large(detail: str) -> web.Response:
        response = reject("body_too_large", ApiError(detail, 413, "RequestEntityTooLarge"))
        response.force_close()  # the unread rest of the body is not worth draining
        return response

    @web.middleware
    async def limits(request: web.Request, handler):
        length = request.content_length
        if length is not None and length > state.max_body:
            return too_large(
                f"Maximum request body size {state.max_body} exceeded, actual body size {length}"
            )
        count_choices = counters.get(request.match_info.route)
        if count_choices is None:
            return _counted(await handler(request))
        if app.draining:
            response = reject(
                "draining",
                ApiError(
                    "The server is shutting down and accepts no new requests.",
                    503,
                    "ServiceUnavailableError",
                ),
            )
            response.force_close()
            return response
        count = 0
        if state.max_choices:
            try:
                body = await request.read()  # cached: the handler reads it again for free
            except web.HTTPRequestEntityTooLarge as e:
                return too_large(e.text or "Request body too large")
            count = count_choices(body)
            if count > state.max_choices:
                return reject(
                    "too_many_choices",
                    ApiError(
                        f"This request asks for {count} choices (prompts x n) but the server "
                        f"admits at most {state.max_choices} at a time "
                        f"(--max-concurrent-requests).",
                        400,
                        "BadRequestError",
                        "n",
                    ),
                )
        admitted, in_flight = state.admit(count)
        if not admitted:
            return reject(
                "too_many_requests",
                ApiError(
                    f"The server is busy: {in_flight} of {state.max_choices} concurrent "
                    f"choices are in flight and this request asks for {count}. "
                    f"Retry later.",
                    429,
                    "TooManyRequestsError",
                ),
                **{"Retry-After": str(state.retry_after)},
            )
        try:
            return _counted(await handler(request))
        finally:
            state.release(count)

    def _counted(response: web.StreamResponse) -> web.StreamResponse:
        # A chunked body over the limit is refused by aiohttp while the handler
        # reads it (the error middleware shapes that 413).
        if response.status == 413 and on_reject is not None:
            on_reject("body_too_large")
        return response

    return limits
