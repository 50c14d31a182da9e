"""Synchronous client for the mock engine's control channel (``--control-addr``).

Each call is one msgpack map over a fresh REQ socket, so a call that timed out
(for example against a killed mock) leaves nothing stuck behind.
"""

from __future__ import annotations

from typing import Any

import msgspec
import zmq


class MockControlError(RuntimeError):
    """The mock rejected a control command."""


class MockControl:
    def __init__(self, addr: str, timeout: float = 5.0) -> None:
        self.addr = addr
        self.timeout = timeout
        self._ctx: zmq.Context = zmq.Context.instance()

    def call(self, cmd: str, timeout: float | None = None, **fields: Any) -> dict[str, Any]:
        """Send ``{"cmd": cmd, **fields}``; raises TimeoutError if no reply comes."""
        timeout_ms = int(1000 * (self.timeout if timeout is None else timeout))
        sock = self._ctx.socket(zmq.REQ)
        sock.setsockopt(zmq.LINGER, 0)
        try:
            sock.connect(self.addr)
            sock.send(msgspec.msgpack.encode({"cmd": cmd, **fields}))
            if not sock.poll(timeout_ms):
                raise TimeoutError(f"mock engine control {cmd!r}: no reply in {timeout_ms} ms")
            reply = msgspec.msgpack.decode(sock.recv())
        finally:
            sock.close()
        if not reply.get("ok"):
            raise MockControlError(reply.get("error", f"control {cmd!r} failed"))
        return reply

    def stats(self) -> dict[str, Any]:
        """running, waiting, finished{total, stop, length, abort, error, repetition},
        aborted (live requests the client aborted), aborts_unknown,
        aborts_after_finish, adds, scripted (ADDs a script matched), steps,
        utility_calls, input_alive, paused, rank (data parallel), pid."""
        return self.call("stats")

    def crash(self) -> None:
        """The busy loop dies: ENGINE_CORE_DEAD, then exit status 1."""
        self.call("crash")

    def exit(self) -> None:
        """Die at once like SIGKILL, sending nothing."""
        self.call("exit")

    def stall(self, seconds: float | None) -> None:
        """Neither step nor read input for ``seconds`` (None: forever; 0: resume)."""
        self.call("stall", seconds=seconds)

    def configure(self, **settings: Any) -> dict[str, Any]:
        """Change ``step_time``, ``tokens_per_step`` and/or ``eos_rate``; returns all three."""
        return self.call("configure", **settings)

    def error_next(self, n: int = 1) -> None:
        """The next ``n`` ADDs finish with a scheduler-built ERROR at the next step."""
        self.call("error_next", count=n)

    def abort_all(self) -> int:
        """Engine-initiated ABORT of everything in flight; returns how many."""
        return self.call("abort_all")["aborted"]

    def script(self, *entries: dict[str, Any]) -> int:
        """Add scripted outputs (engine_core/mock/scripts.py); returns how many are set.

        ``script({"prompt_token_ids": [...], "output_token_ids": [...]})``; an
        entry without ``prompt_token_ids`` serves every other prompt.
        """
        return self.call("script", entries=list(entries))["scripts"]

    def clear_scripts(self) -> None:
        """Forget every script: requests generate their usual tokens again."""
        self.call("clear_scripts")
