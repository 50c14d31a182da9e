"""The access log: one line per request, on the ``frontend.access`` logger.

vLLM's server logs uvicorn's line when a response starts
(``127.0.0.1:54321 - "POST /v1/completions HTTP/1.1" 200``); ours keeps that
prefix, so greps written for vLLM's logs still match, and is written when the
response has been sent, adding what an operator asks next: how long it took
and which request it was::

    127.0.0.1:54321 - "POST /v1/completions HTTP/1.1" 200 OK 12.3ms request_id=cmpl-...

Under ``--log-format json`` the same facts are fields of the log record
(``client``, ``method``, ``path``, ``http_version``, ``status``,
``latency_ms``, ``request_id``). ``--disable-uvicorn-access-log`` turns it off;
``--disable-access-log-for-endpoints /health,/metrics`` leaves out the
requests whose path (without its query) is one of those, as vLLM does.
"""

from __future__ import annotations

import http
import logging
import time
from collections.abc import Iterable

from aiohttp import HttpVersion11 as HTTP11
from aiohttp import web

from frontend.errors import REQUEST_ID_KEY
from frontend.ops import logs

log = logging.getLogger("frontend.access")


def middleware(skip_paths: Iterable[str] = ()):
    skipped = frozenset(skip_paths)
    write = logs.fast_lines(log.name)  # (None: through the logger)

    @web.middleware
    async def access_log(request: web.Request, handler):
        if request.path in skipped:
            return await handler(request)
        started = time.perf_counter()
        status = 500
        try:
            response = await handler(request)
            status = response.status
            return response
        except web.HTTPException as e:
            status = e.status
            raise
        finally:
            _line(request, status, (time.perf_counter() - started) * 1000.0, write)

    return access_log


# "OK", "Not Found", ... by status code
_PHRASES = {int(status): status.phrase for status in http.HTTPStatus}
_LINE = '%s - "%s %s HTTP/%s" %d %s %.1fms request_id=%s'


def _line(request: web.Request, status: int, latency_ms: float, write) -> None:
    # The connection's peer as aiohttp keeps it (a transport's get_extra_info
    # asks the kernel every time).
    peer = getattr(request.protocol, "peername", None)
    client = f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) and len(peer) >= 2 else "-"
    v = request.version
    version = "1.1" if v == HTTP11 else f"{v.major}.{v.minor}"
    method, path = request.method, request.raw_path
    request_id = request.get(REQUEST_ID_KEY) or request.headers.get("X-Request-Id") or "-"
    args = (client, method, path, version, status, _PHRASES.get(status, ""), latency_ms, request_id)
    fields = None
    if write is None or write.json:  # (a text line has no use for them)
        fields = {
            "client": client,
            "method": method,
            "path": path,
            "http_version": version,
            "status": status,
            "latency_ms": round(latency_ms, 3),
            "request_id": request_id,
        }
    if write is not None:
        write(_LINE % args, fields)
    else:
        log.info(_LINE, *args, extra={"fields": fields})
