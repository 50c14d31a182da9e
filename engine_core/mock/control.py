"""The control channel (``--control-addr``): a REP socket for tests and benchmarks.

One msgpack map ``{"cmd": NAME, ...}`` in, one map with ``"ok"`` out (client:
``engine_core.mock_control.MockControl``). Commands: ``stats``; faults
``crash`` (ENGINE_CORE_DEAD, exit 1), ``exit`` (silent, like SIGKILL),
``stall`` (``seconds``; null: forever, 0: resume), ``error_next`` (``count``),
``abort_all``; ``configure`` (``step_time``, ``tokens_per_step``, ``eos_rate``);
scripted output: ``script`` (``entries``, see scripts.py) and ``clear_scripts``.
A bad command gets ``{"ok": false, "error": ...}`` and changes nothing.
"""

from __future__ import annotations

import math
import os
import time
from typing import Any

import msgspec
import zmq

from engine_core.mock.engine import MockEngine
from engine_core.mock.errors import EngineDead, SilentExit


class Control:
    """Bound by the CLI and handed to its engine, which serves it between steps."""

    def __init__(self, engine: MockEngine, addr: str) -> None:
        self.engine = engine
        self.socket = engine.ctx.socket(zmq.REP)
        self.socket.setsockopt(zmq.LINGER, 0)
        self.socket.bind(addr)

    def serve(self) -> None:
        """Answer one command (the socket is readable)."""
        try:
            reply = self._handle(msgspec.msgpack.decode(self.socket.recv()))
        except (EngineDead, SilentExit):  # acknowledge, then die
            self.socket.send(msgspec.msgpack.encode({"ok": True}))
            raise
        except Exception as e:  # noqa: BLE001 - a bad command must not kill the mock
            reply = {"ok": False, "error": f"{type(e).__name__}: {e}"}
        self.socket.send(msgspec.msgpack.encode(reply))

    def _handle(self, cmd: Any) -> dict:
        engine = self.engine
        name = cmd.get("cmd") if isinstance(cmd, dict) else None
        if name == "stats":
            return {"ok": True, **self._stats()}
        if name == "crash":
            raise EngineDead("crash requested on the control channel")
        if name == "exit":
            raise SilentExit
        if name == "stall":
            seconds = cmd.get("seconds")
            engine.stalled_until = math.inf if seconds is None else time.monotonic() + seconds
            return {"ok": True}
        if name == "configure":
            return {"ok": True, **self._configure(cmd)}
        if name == "error_next":
            engine.error_next = int(cmd.get("count", 1))
            return {"ok": True}
        if name == "abort_all":
            count = len(engine.sched.live)
            engine.abort_in_flight()
            return {"ok": True, "aborted": count}
        if name == "script":
            return {"ok": True, "scripts": engine.scripts.add(cmd.get("entries"))}
        if name == "clear_scripts":
            engine.scripts.clear()
            return {"ok": True}
        raise ValueError(f"unknown control command {name!r}")

    def _configure(self, cmd: dict) -> dict:
        s = self.engine.settings
        if "step_time" in cmd:
            s.step_time = max(0.0, float(cmd["step_time"]))
        if "tokens_per_step" in cmd:
            s.tokens_per_step = max(1, int(cmd["tokens_per_step"]))
        if "eos_rate" in cmd:
            s.eos_rate = min(1.0, max(0.0, float(cmd["eos_rate"])))
        return {
            "step_time": s.step_time,
            "tokens_per_step": s.tokens_per_step,
            "eos_rate": s.eos_rate,
        }

    def _stats(self) -> dict:
        engine = self.engine
        c, sched = engine.counters, engine.sched
        return {
            "running": len(sched.running),
            "waiting": len(sched.waiting) + len(sched.erroring),
            "finished": {"total": sum(c.finished.values()), **c.finished},
            "aborted": c.aborted,
            "aborts_unknown": c.aborts_unknown,
            "aborts_after_finish": c.aborts_after_finish,
            "adds": c.adds,
            "adds_by_client": c.adds_by_client,
            "scripted": engine.scripts.matched,
            "steps": c.steps,
            "utility_calls": c.utility_calls,
            "lora_adds": engine.loras.adds_with_lora,
            "loras": engine.loras.list_loras(),
            "input_alive": engine.input_alive,
            "paused": engine.utils.is_scheduler_paused(),
            "rank": engine.rank,
            "pid": os.getpid(),
        }
