"""Graceful drain on SIGTERM, and the sd_notify protocol (Type=notify, watchdog)."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import socket
import tempfile
import time

import aiohttp
import pytest

from frontend.ops.systemd import Notifier, watchdog_usec
from harness.frontend import SERVED_NAME
from harness.waits import wait_for_async
from tests.support.ops import (
    read_stream,
    run,
    stream_tokens,
)


async def _get_status(session: aiohttp.ClientSession, url: str) -> int:
    async with session.get(url) as r:
        return r.status


def _stream_body(max_tokens: int) -> dict:
    return {"model": SERVED_NAME, "prompt": "drain me", "max_tokens": max_tokens,
            "ignore_eos": True, "stream": True, "return_token_ids": True}


# ------------------------------------------------------------------------ drain
def test_sigterm_drains_running_stream_then_exits_0(start_ops_stack):
    stack = start_ops_stack("--shutdown-timeout", "30", engine_args=("--step-time", "0.05"))
    proc = stack.frontend.proc

    async def main():
        async with aiohttp.ClientSession() as s:
            async with s.post(stack.url + "/v1/completions", json=_stream_body(40)) as r:
                first = await r.content.readline()
                assert first.startswith(b"data: ")
                assert await _get_status(s, stack.url + "/health") == 200
                # The engine holds the stream until the test has seen the drain.
                stack.control().stall(None)
                proc.send_signal(signal.SIGTERM)

                async def health_503() -> bool:
                    return await _get_status(s, stack.url + "/health") == 503

                # /health turns 503 while the stream drains, and the listener stays open.
                await wait_for_async(health_503, 30, interval=0.01,
                                     message="/health did not turn 503 after SIGTERM")
                async with s.post(stack.url + "/v1/completions", json={
                        "model": SERVED_NAME, "prompt": "late", "max_tokens": 2}) as late:
                    late_status, late_body = late.status, await late.json()
                    late_close = late.headers.get("Connection")
                assert stack.control().stats()["running"] == 1  # still draining
                stack.control().stall(0)
                rest = await read_stream(r)
            return late_status, late_body, late_close, first, rest

    late_status, late_body, late_close, first, rest = run(main())
    assert late_status == 503 and late_body["error"]["code"] == 503
    assert late_close == "close"
    assert rest[-1] == "[DONE]"
    assert not any(isinstance(e, dict) and "error" in e for e in rest)
    events = [json.loads(first[len(b"data: "):])] + rest
    assert stream_tokens(events) == 40
    assert events[-2]["choices"][0]["finish_reason"] == "length"
    assert proc.wait(15) == 0
    stats = stack.control().stats()
    assert stats["aborted"] == 0 and stats["finished"]["length"] == 1
    log = stack.frontend.log()
    assert "shutting down: draining 1 engine requests" in log
    assert "aborting" not in log


def test_sigterm_aborts_what_outlives_shutdown_timeout_and_exits_0(start_ops_stack):
    stack = start_ops_stack("--shutdown-timeout", "0.5", engine_args=("--step-time", "0.05"))
    proc = stack.frontend.proc

    async def main():
        async with aiohttp.ClientSession() as s:
            async with s.post(stack.url + "/v1/completions", json=_stream_body(400)) as r:
                await r.content.readline()
                proc.send_signal(signal.SIGTERM)
                return await read_stream(r)

    # Cut by the shutdown timeout: 400 tokens would take 20 s.
    events = run(main())
    assert events[-1] == "[DONE]"
    errors = [e for e in events if isinstance(e, dict) and "error" in e]
    assert len(errors) == 1 and "shutting down" in errors[0]["error"]["message"]
    assert stream_tokens(events) < 400
    assert proc.wait(15) == 0
    stats = stack.wait_engine_idle()
    assert stats["aborted"] == 1
    assert "aborting 1 engine requests still running" in stack.frontend.log()


def test_sigterm_when_idle_exits_0_without_waiting_for_the_drain_timeout(start_ops_stack):
    stack = start_ops_stack("--shutdown-timeout", "120")
    # Within half the drain timeout, or stop() kills it (exit status -9).
    assert stack.frontend.stop(signal.SIGTERM, timeout=60) == 0
    assert stack.frontend.log().rstrip().endswith("stopped")


# ------------------------------------------------------------------------ sd_notify
WATCHDOG_USEC = 2_000_000  # pings every second: a loaded host's delays stay well inside

class NotifyListener:
    """A stand-in for systemd's notify socket."""

    def __init__(self) -> None:
        self.dir = tempfile.mkdtemp(prefix="ntf")  # short: sun_path holds 107 bytes
        self.path = os.path.join(self.dir, "notify.sock")
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(self.path)
        self.sock.settimeout(0.1)
        self.messages: list[tuple[float, dict[str, str]]] = []

    def poll(self, duration: float = 0.0) -> None:
        deadline = time.monotonic() + duration
        while True:
            try:
                data = self.sock.recv(4096)
            except (socket.timeout, BlockingIOError):
                if time.monotonic() >= deadline:
                    return
                continue
            fields = dict(line.split("=", 1) for line in data.decode().split("\n") if line)
            self.messages.append((time.monotonic(), fields))

    def wait_for(self, key: str, timeout: float = 30.0, count: int = 1) -> dict:
        """The ``count``-th message with ``key``."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.poll(0.1)
            found = [fields for _, fields in self.messages if key in fields]
            if len(found) >= count:
                return found[count - 1]
        raise AssertionError(f"no {count} x {key} in {[m for _, m in self.messages]}")

    def keys(self) -> list[str]:
        return [k for _, fields in self.messages for k in fields]

    def close(self) -> None:
        self.sock.close()
        shutil.rmtree(self.dir, ignore_errors=True)


@pytest.fixture
def notify_socket():
    listener = NotifyListener()
    yield listener
    listener.close()


def test_sd_notify_protocol(start_ops_stack, notify_socket):
    env = {"NOTIFY_SOCKET": notify_socket.path, "WATCHDOG_USEC": str(WATCHDOG_USEC)}
    stack = start_ops_stack(env=env, engine=False)  # the engine comes later
    waiting = notify_socket.wait_for("STATUS")
    assert waiting["STATUS"].startswith("waiting for an engine at tcp://127.0.0.1:")
    # Watchdog pings run from the start, every half WATCHDOG_USEC.
    notify_socket.wait_for("WATCHDOG", count=2)
    assert "READY" not in notify_socket.keys()

    stack.start_engine()
    ready = notify_socket.wait_for("READY")
    assert ready == {"READY": "1", "STATUS": f"serving on http://127.0.0.1:{stack.frontend.port}"}
    statuses = [f["STATUS"] for _, f in notify_socket.messages if "STATUS" in f]
    assert any("HELLO" in s for s in statuses[:-1])
    stack.frontend.wait_healthy(30)  # READY=1 came when HTTP was already serving

    before = len(notify_socket.messages)
    window = 3.5 * WATCHDOG_USEC / 1e6
    notify_socket.poll(window)
    pings = [t for t, f in notify_socket.messages[before:] if f.get("WATCHDOG") == "1"]
    # Every half WATCHDOG_USEC: never more often; a loaded host may delay one,
    # but systemd's deadline is a ping within WATCHDOG_USEC.
    assert 2 <= len(pings) <= window / (WATCHDOG_USEC / 2e6) + 1, pings
    gaps = [b - a for a, b in zip(pings, pings[1:])]
    assert max(gaps) < WATCHDOG_USEC / 1e6, gaps

    stack.frontend.proc.send_signal(signal.SIGTERM)
    stopping = notify_socket.wait_for("STOPPING")
    assert stopping["STOPPING"] == "1"
    assert stack.frontend.proc.wait(15) == 0
    keys = notify_socket.keys()
    assert keys.index("STATUS") < keys.index("READY") < keys.index("STOPPING")
    notify_socket.poll(0.5)
    last = max(i for i, (_, f) in enumerate(notify_socket.messages) if "STOPPING" in f)
    assert not any("WATCHDOG" in f for _, f in notify_socket.messages[last + 1:])


def test_no_notify_socket_is_a_no_op():
    n = Notifier.from_env({})
    assert not n.enabled
    assert n.send("READY=1") is False
    n.ready("x")
    n.stopping()
    n.close()


def test_notifier_abstract_socket_and_bad_targets(caplog):
    name = f"frontend-test-{os.getpid()}-{time.monotonic_ns()}"
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    listener.bind("\0" + name)
    listener.settimeout(2)
    try:
        n = Notifier.from_env({"NOTIFY_SOCKET": "@" + name})
        n.status("hello\nworld")
        assert listener.recv(100) == b"STATUS=hello world"
        n.ready("up")
        assert listener.recv(100) == b"READY=1\nSTATUS=up"
        n.stopping()
        assert listener.recv(100) == b"STOPPING=1"
    finally:
        listener.close()
    # A socket nobody listens on: no exception, one warning.
    gone = Notifier.from_env({"NOTIFY_SOCKET": "/nonexistent/notify.sock"})
    assert gone.send("READY=1") is False and gone.send("READY=1") is False
    assert len([r for r in caplog.records if "cannot notify" in r.message]) == 1
    assert not Notifier.from_env({"NOTIFY_SOCKET": "vsock:2:9"}).enabled


def test_watchdog_usec_respects_watchdog_pid():
    assert watchdog_usec({"WATCHDOG_USEC": "3000000"}) == 3000000
    assert watchdog_usec({"WATCHDOG_USEC": "3000000", "WATCHDOG_PID": str(os.getpid())}) == \
        3000000
    assert watchdog_usec({"WATCHDOG_USEC": "3000000", "WATCHDOG_PID": "1"}) == 0
    assert watchdog_usec({"WATCHDOG_USEC": "junk"}) == 0
    assert watchdog_usec({}) == 0


def test_watchdog_stops_when_the_loop_is_blocked():
    """Pings come from the event loop: a blocked loop sends none."""
    listener = NotifyListener()
    try:
        n = Notifier(listener.path, watchdog_usec=100_000)

        async def pinged(times: int) -> bool:
            listener.poll(0)
            return sum(1 for _, f in listener.messages if "WATCHDOG" in f) >= times

        async def main():
            n.start_watchdog()
            await wait_for_async(lambda: pinged(4), 30, interval=0.05)
            listener.poll(0)
            healthy = sum(1 for _, f in listener.messages if "WATCHDOG" in f)
            time.sleep(0.5)  # the loop is stuck
            listener.messages.clear()
            listener.poll(0)
            stuck = len(listener.messages)
            n.close()
            return healthy, stuck

        healthy, stuck = asyncio.run(main())
        assert healthy >= 4
        assert stuck == 0
    finally:
        listener.close()

