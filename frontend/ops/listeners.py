"""Where HTTP is served: TCP or a Unix socket, with TLS, and the keep-alive timeout."""

from __future__ import annotations

import os
from typing import Any

from aiohttp import web

from frontend.ops.flags import OpsConfig, validate

# After the drain, handlers get this long to write their last bytes.
HANDLER_SHUTDOWN_S = 2.0


def runner_kwargs(ops: OpsConfig) -> dict[str, Any]:
    return {"keepalive_timeout": ops.timeout_keep_alive, "shutdown_timeout": HANDLER_SHUTDOWN_S}


async def start_sites(runner: web.AppRunner, host: str, port: int, ops: OpsConfig) -> str:
    """Start the listener; returns where it listens, for the log."""
    ctx = validate(ops)
    if ops.uds:
        try:
            if os.path.exists(ops.uds) and not os.path.isdir(ops.uds):
                os.unlink(ops.uds)  # a stale socket from a previous run
        except OSError:
            pass
        site = web.UnixSite(runner, ops.uds, ssl_context=ctx)
        await site.start()
        return f"unix:{ops.uds}" + (" (TLS)" if ctx else "")
    site = web.TCPSite(runner, host, port, ssl_context=ctx, reuse_address=True)
    await site.start()
    return f"{'https' if ctx else 'http'}://{host}:{port}"
