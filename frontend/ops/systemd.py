"""systemd ``Type=notify`` support: sd_notify(3) over a Unix datagram socket.

A few lines instead of a library: the protocol is one datagram of
newline-separated ``KEY=VALUE`` lines sent to the socket named by
``$NOTIFY_SOCKET`` (a path, or ``@name`` for the abstract namespace). Without
``$NOTIFY_SOCKET`` (not under systemd, or not ``Type=notify``) every call is a
no-op, so nothing here needs a running systemd.

What the frontend sends:

* ``STATUS=...`` while it waits for the engine (and when the engine dies),
* ``READY=1`` once the engine is attached and HTTP is serving,
* ``WATCHDOG=1`` every half ``$WATCHDOG_USEC`` (``WatchdogSec=``) from a task on
  the event loop, so the pings stop when the loop is stuck,
* ``STOPPING=1`` when a SIGTERM starts the drain.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
from collections.abc import Callable, Mapping

log = logging.getLogger("frontend.systemd")


class Notifier:
    """Sends sd_notify messages; never raises, logs a failure once."""

    def __init__(self, address: str | None, watchdog_usec: int = 0) -> None:
        self.address = address
        self.watchdog_usec = watchdog_usec
        self._sock: socket.socket | None = None
        self._warned = False
        self._watchdog: asyncio.Task | None = None
        if address:
            # "@name" is Linux's abstract namespace: a leading NUL byte.
            self._target: str | None = "\0" + address[1:] if address.startswith("@") else address
        else:
            self._target = None

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Notifier:
        env = os.environ if environ is None else environ
        address = env.get("NOTIFY_SOCKET") or None
        if address and not address.startswith(("/", "@")):
            log.warning("NOTIFY_SOCKET=%r is not a Unix socket; not notifying systemd", address)
            address = None
        return cls(address, watchdog_usec(env))

    @property
    def enabled(self) -> bool:
        return self._target is not None

    def send(self, *lines: str) -> bool:
        if self._target is None:
            return False
        payload = "\n".join(lines).encode()
        try:
            if self._sock is None:
                self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC)
            self._sock.sendto(payload, self._target)
            return True
        except OSError as e:
            if not self._warned:
                self._warned = True
                log.warning("cannot notify systemd at %s: %s", self.address, e)
            return False

    # -------------------------------------------------------------- messages
    def status(self, text: str) -> None:
        self.send("STATUS=" + text.replace("\n", " "))

    def ready(self, status: str | None = None) -> None:
        lines = ["READY=1"]
        if status:
            lines.append("STATUS=" + status.replace("\n", " "))
        self.send(*lines)

    def stopping(self, status: str | None = None) -> None:
        lines = ["STOPPING=1"]
        if status:
            lines.append("STATUS=" + status.replace("\n", " "))
        self.send(*lines)
        self.stop_watchdog()

    # -------------------------------------------------------------- watchdog
    def start_watchdog(self, healthy: Callable[[float], bool] | None = None) -> None:
        """Ping every half WatchdogSec from the running loop (no-op without one);
        with ``healthy`` (given the ping interval), only while it says so."""
        if not self.enabled or self.watchdog_usec <= 0 or self._watchdog is not None:
            return
        interval = self.watchdog_usec / 2e6
        self._watchdog = asyncio.get_running_loop().create_task(self._pings(interval, healthy))

    def stop_watchdog(self) -> None:
        """Stop pinging (systemd stops watching once it sees STOPPING=1)."""
        if self._watchdog is not None:
            self._watchdog.cancel()
            self._watchdog = None

    async def _pings(self, interval: float, healthy: Callable[[float], bool] | None) -> None:
        while True:
            if healthy is None or healthy(interval):
                self.send("WATCHDOG=1")
            await asyncio.sleep(interval)

    def close(self) -> None:
        self.stop_watchdog()
        if self._sock is not None:
            self._sock.close()
            self._sock = None


def watchdog_usec(environ: Mapping[str, str]) -> int:
    """``$WATCHDOG_USEC`` if it is meant for this process (``$WATCHDOG_PID``), else 0."""
    try:
        usec = int(environ.get("WATCHDOG_USEC", "0"))
    except ValueError:
        return 0
    pid = environ.get("WATCHDOG_PID")
    if pid and pid.isdigit() and int(pid) != os.getpid():
        return 0
    return max(usec, 0)
