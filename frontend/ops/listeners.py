"""Where HTTP is served: TCP or a Unix socket, with TLS, and the keep-alive timeout."""

from __future__ import annotations

import asyncio
import os
import socket
import ssl
from typing import Any, cast

from aiohttp import web

from frontend.ops.flags import OpsConfig, validate

# After the drain, handlers get this long to write their last bytes.
HANDLER_SHUTDOWN_S = 2.0


def runner_kwargs(ops: OpsConfig) -> dict[str, Any]:
    return {"keepalive_timeout": ops.timeout_keep_alive, "shutdown_timeout": HANDLER_SHUTDOWN_S}


async def start_sites(
    runner: web.AppRunner,
    host: str,
    port: int,
    ops: OpsConfig,
    *,
    reuse_port: bool = False,
    handoff: socket.socket | None = None,
) -> str:
    """Start the listener; returns where it listens, for the log. One of several
    frontend processes listens with SO_REUSEPORT (TCP), or takes the connections
    its supervisor accepts on the Unix socket from ``handoff``."""
    ctx = validate(ops)
    if handoff is not None:
        take_handed_connections(runner, handoff, ctx)
        return f"unix:{ops.uds}" + (" (TLS)" if ctx else "")
    if ops.uds:
        try:
            if os.path.exists(ops.uds) and not os.path.isdir(ops.uds):
                os.unlink(ops.uds)  # a stale socket from a previous run
        except OSError:
            pass
        site: web.BaseSite = web.UnixSite(runner, ops.uds, ssl_context=ctx)
        await site.start()
        return f"unix:{ops.uds}" + (" (TLS)" if ctx else "")
    site = web.TCPSite(
        runner, host, port, ssl_context=ctx, reuse_address=True, reuse_port=reuse_port or None
    )
    await site.start()
    return f"{'https' if ctx else 'http'}://{host}:{port}"


def take_handed_connections(
    runner: web.AppRunner, handoff: socket.socket, ctx: ssl.SSLContext | None
) -> None:
    """Serve the connections the supervisor passes over ``handoff`` (SCM_RIGHTS):
    on a Unix socket it accepts for all workers and spreads the connections,
    where workers accepting from one shared socket would not (an event loop
    accepts every pending connection at once)."""
    loop = asyncio.get_running_loop()
    handoff.setblocking(False)

    def receive() -> None:
        while True:
            try:
                _, fds, _, _ = socket.recv_fds(handoff, 1, 64)
            except (BlockingIOError, InterruptedError):
                return
            if not fds:  # the supervisor is gone
                loop.remove_reader(handoff.fileno())
                return
            for fd in fds:
                conn = socket.socket(fileno=fd)
                conn.setblocking(False)
                server = cast(web.Server, runner.server)  # (set up before any connection)
                loop.create_task(loop.connect_accepted_socket(server, conn, ssl=ctx))

    loop.add_reader(handoff.fileno(), receive)
