"""One entry of the route table (``routes.py``): what routing, admission and
/openapi.json need of an endpoint."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from aiohttp import web

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@dataclass(frozen=True)
class Route:
    method: str
    path: str
    handler: Handler
    # Generation routes: the body -> how many engine requests it asks for
    # (prompts x n), from a skeleton parse. None for every other route.
    count_choices: Callable[[bytes], int] | None = None
    # The msgspec struct the handler decodes its JSON body into (for /openapi.json).
    body: type | None = None
