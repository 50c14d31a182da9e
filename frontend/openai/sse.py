"""Server-sent events over aiohttp: one write per engine step per stream."""

from __future__ import annotations

import msgspec
from aiohttp import web

from frontend.fanout import RequestFailed

DONE = b"data: [DONE]\n\n"
HEADERS = {"Content-Type": "text/event-stream; charset=utf-8", "Cache-Control": "no-cache"}


class SseWriter:
    def __init__(self, request: web.Request) -> None:
        self.request = request
        self.response = web.StreamResponse(status=200, headers=HEADERS)

    async def start(self) -> None:
        await self.response.prepare(self.request)

    async def write(self, data: bytes) -> None:
        """Raises ConnectionResetError (or is cancelled) when the client is gone."""
        if data:
            await self.response.write(data)

    async def write_event(self, payload: bytes) -> None:
        await self.response.write(b"data: " + payload + b"\n\n")

    async def write_error(self, error: RequestFailed) -> None:
        # vLLM formats stream errors with json.dumps (spaces after separators).
        body = {"error": {"message": error.message, "type": error.err_type,
                          "param": None, "code": error.status}}
        await self.write_event(msgspec.json.encode(body))

    async def done(self) -> None:
        await self.response.write(DONE)
        await self.response.write_eof()
