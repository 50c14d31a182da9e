"""``--enable-server-load-tracking``: what ``GET /load`` reports.

vLLM's ``load_aware_call`` counts the requests of its generation and pooling
routes from the moment the handler is entered until the response is sent
(a stream until its last chunk), also when the handler fails or the client
goes away. Those routes are exactly the route table's routes with a choice
counter (``/invocations`` included), so the same registered routes are counted
here, after admission: a request refused with 429 or 503 never counts.
"""

from __future__ import annotations

from collections.abc import Container

from aiohttp import web
from aiohttp.web_urldispatcher import AbstractRoute

from frontend.state import AppState


def middleware(state: AppState, counted: Container[AbstractRoute]):
    """Counts the requests of ``counted`` in ``state.server_load`` while they run."""

    @web.middleware
    async def track_load(request: web.Request, handler):
        if request.match_info.route not in counted:
            return await handler(request)
        state.server_load += 1
        try:
            # A stream is written inside the handler: it counts until its end.
            return await handler(request)
        finally:  # (an error, a cancelled handler on disconnect, or the response)
            state.server_load -= 1

    return track_load
