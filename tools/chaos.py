"""Chaos runs: what the frontend does when its engine, or itself, fails under load.

One subcommand per run; each starts its own stack (harness/stack.py), prints a
JSON summary, and with ``--markdown`` writes a section for
docs/reliability.md. Exit status 0 when every check passed (``engine-stall``
without the frontend's ``--engine-stall-timeout`` documents today's hang
instead, and passes when the streams do hang and then resume).

``engine-kill``
    SIGKILL of the engine core (``VLLM::EngineCore``; the mock process itself)
    under N open streams: every stream ends with an error event and one
    ``[DONE]``, /health turns 503; kill -> last stream ended (goal < 1.5 s).
    Then a new engine on the same address, as systemd would start it: the
    frontend attaches it without a restart; engine ready (the frontend's
    "engine rank 0 attached" line) -> the first 200.
``frontend-kill``
    SIGKILL of the frontend under N open streams, then a new frontend on the
    same addresses: kill -> /health 200, and the new frontend aborts the
    orphaned engine requests (serving -> engine idle, goal < 1 s).
``engine-stall``
    SIGSTOP of the engine core with streams running. With
    ``--engine-stall-timeout T``: /health 503 and every stream ends with an
    error event within T (+ slack); after SIGCONT the frontend serves again.
``idle-connections``
    Frontend RSS and time to first token of reading clients: N streams alone,
    then the same N streams (a share of whose clients never read) next to M
    idle keep-alive connections; TTFT within 2x, memory bounded.

The three fault runs stream ``--max-tokens`` tokens with ``ignore_eos`` (long
enough that no engine, however fast, serves them before the fault) and record
``streams_open_at_fault``: a run passes only if the fault hit every stream
while it was open.

::

    python -m tools.chaos engine-kill --engine real --streams 64
    python -m tools.chaos frontend-kill --engine real --streams 64
    python -m tools.chaos engine-stall --engine real --streams 16
    python -m tools.chaos idle-connections --idle 2000 --streams 500
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shlex
import signal
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, Callable

from harness.frontend import SERVED_NAME
from harness.ports import HOST
from harness.stack import Stack, frontend_has_flag, log, raise_fd_limit

STALL_FLAG = "--engine-stall-timeout"
KILL_END_GOAL_S = 1.5
ORPHANS_IDLE_GOAL_S = 1.0
TTFT_RATIO_GOAL = 2.0


# ------------------------------------------------------------------ raw HTTP clients
# Plain asyncio sockets: thousands of them are cheap, and a stream's first
# event is timed from the request's last byte on an open connection.

@dataclass
class Stream:
    """One streaming request on its own connection, read to the end."""

    sent: float = 0.0
    first_event: float | None = None
    ended: float | None = None
    status: int | None = None
    body: bytearray = field(default_factory=bytearray)
    error: str | None = None

    @property
    def ttft(self) -> float | None:
        return None if self.first_event is None else self.first_event - self.sent

    def events(self) -> list[bytes]:
        """The SSE payloads (chunked framing stripped)."""
        return [line[len(b"data: "):] for line in bytes(self.body).split(b"\n")
                if line.startswith(b"data: ")]

    def ended_with_error_then_done(self) -> bool:
        ev = self.events()
        return (len(ev) >= 2 and ev[-1] == b"[DONE]" and ev.count(b"[DONE]") == 1
                and ev[-2].startswith(b'{"error"'))

    def completed(self) -> bool:
        ev = self.events()
        return (bool(ev) and ev[-1] == b"[DONE]" and ev.count(b"[DONE]") == 1
                and not any(e.startswith(b'{"error"') for e in ev))


def completion_body(max_tokens: int, *, stream: bool = True, prompt: str = "Hello") -> dict:
    return {"model": SERVED_NAME, "prompt": prompt, "max_tokens": max_tokens,
            "ignore_eos": True, "temperature": 0, "stream": stream}


def post_bytes(path: str, body: dict) -> bytes:
    data = json.dumps(body).encode()
    return (f"POST {path} HTTP/1.1\r\nHost: {HOST}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(data)}\r\n\r\n").encode() + data


async def open_connection(port: int) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    return await asyncio.open_connection(HOST, port, limit=1 << 20)


async def run_stream(port: int, body: dict, stream: Stream, timeout: float,
                     conn: tuple | None = None) -> Stream:
    """Send ``body`` (on ``conn`` if given) and read the answer to its end."""
    try:
        reader, writer = conn or await open_connection(port)
    except OSError as e:
        stream.error = f"connect: {e}"
        stream.ended = time.monotonic()
        return stream
    try:
        writer.write(post_bytes("/v1/completions", body))
        await writer.drain()
        stream.sent = time.monotonic()
        async with asyncio.timeout(timeout):
            while True:
                data = await reader.read(65536)
                if not data:
                    break
                stream.body += data
                if stream.status is None and b"\r\n" in stream.body:
                    stream.status = int(bytes(stream.body).split(b" ", 2)[1])
                if stream.first_event is None and b"data: " in stream.body:
                    stream.first_event = time.monotonic()
                if b"data: [DONE]\n\n" in stream.body or (
                        stream.status is not None and stream.status != 200
                        and b"\r\n\r\n" in stream.body):
                    break
    except TimeoutError:
        stream.error = f"no end within {timeout} s"
    except OSError as e:
        stream.error = f"{type(e).__name__}: {e}"
    finally:
        stream.ended = time.monotonic()
        writer.close()
    return stream


async def keep_alive_connection(port: int) -> tuple[asyncio.StreamReader,
                                                    asyncio.StreamWriter]:
    """A connection that served one GET /health and stays open, idle."""
    reader, writer = await open_connection(port)
    writer.write(f"GET /health HTTP/1.1\r\nHost: {HOST}\r\n\r\n".encode())
    await writer.drain()
    head = await reader.readuntil(b"\r\n\r\n")
    length = next((int(line.split(b":")[1]) for line in head.split(b"\r\n")
                   if line.lower().startswith(b"content-length:")), 0)
    if length:
        await reader.readexactly(length)
    return reader, writer


def still_open(reader: asyncio.StreamReader) -> bool:
    return not reader.at_eof() and reader.exception() is None


async def connect_many(port: int, count: int, make: Callable, batch: int = 100) -> list:
    """``count`` connections made by ``make(port)``, ``batch`` at a time (a burst
    larger than the listen backlog would wait for SYN retries)."""
    out: list = []
    while len(out) < count:
        n = min(batch, count - len(out))
        out += await asyncio.gather(*(make(port) for _ in range(n)))
    return out


def open_streams(streams: list[Stream]) -> int:
    """Streams not ended yet: taken just before a fault, it shows that the
    fault hit running streams (an engine that served them all already would
    leave nothing to detect)."""
    return sum(s.ended is None for s in streams)


async def start_streams(port: int, args: argparse.Namespace
                        ) -> tuple[list[Stream], list[asyncio.Task]]:
    """``args.streams`` streams of ``args.max_tokens`` tokens (``ignore_eos``: no
    early end), each with its first event."""
    streams = [Stream() for _ in range(args.streams)]
    body = completion_body(args.max_tokens)
    tasks = [asyncio.create_task(run_stream(port, body, s, args.stream_timeout))
             for s in streams]
    await wait_first_events(streams, args.start_timeout)
    await asyncio.sleep(0.2)
    return streams, tasks


async def wait_first_events(streams: list[Stream], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while any(s.first_event is None and s.ended is None for s in streams):
        if time.monotonic() > deadline:
            missing = sum(s.first_event is None for s in streams)
            raise TimeoutError(f"{missing} of {len(streams)} streams had no event "
                               f"after {timeout} s")
        await asyncio.sleep(0.01)
    failed = [s for s in streams if s.first_event is None]
    if failed:
        raise RuntimeError(f"{len(failed)} streams failed before their first event: "
                           f"{failed[0].error} {bytes(failed[0].body[:300])!r}")


# ------------------------------------------------------------------ HTTP helpers

def http_status(url: str, path: str = "/health", timeout: float = 2.0) -> int | None:
    import urllib.error
    import urllib.request

    try:
        with urllib.request.urlopen(url + path, timeout=timeout) as r:
            return r.status
    except urllib.error.HTTPError as e:
        return e.code
    except (urllib.error.URLError, ConnectionError, TimeoutError, OSError):
        return None


def post_status(url: str, body: dict, timeout: float = 30.0) -> int | None:
    import urllib.error
    import urllib.request

    req = urllib.request.Request(url + "/v1/completions", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            r.read()
            return r.status
    except urllib.error.HTTPError as e:
        return e.code
    except (urllib.error.URLError, ConnectionError, TimeoutError, OSError):
        return None


def debug_state(url: str) -> dict | None:
    import urllib.request

    try:
        with urllib.request.urlopen(url + "/debug/state", timeout=10) as r:
            return json.loads(r.read())
    except OSError:
        return None


def engine_aborts(url: str) -> float | None:
    """The frontend's ``vllm_frontend_engine_aborts_total`` (engine requests it aborted)."""
    import urllib.request

    try:
        with urllib.request.urlopen(url + "/metrics", timeout=10) as r:
            text = r.read().decode()
    except OSError:
        return None
    return next((float(line.split()[-1]) for line in text.splitlines()
                 if line.startswith("vllm_frontend_engine_aborts_total ")), None)


async def until(predicate: Callable[[], bool], timeout: float, poll: float = 0.01
                ) -> float | None:
    """time.monotonic() when ``predicate()`` (run in a thread) first held; None on timeout."""
    deadline = time.monotonic() + timeout
    while True:
        if await asyncio.to_thread(predicate):
            return time.monotonic()
        if time.monotonic() > deadline:
            return None
        await asyncio.sleep(poll)


def idle(url: str) -> bool:
    state = debug_state(url)
    return bool(state) and state["table"] == 0 and state["engine_has_work"] is False


def log_wall_time(path: Path, needle: str, after: float) -> float | None:
    """Wall-clock time of the first log line with ``needle`` at or after ``after``
    (the frontend's text log: "YYYY-mm-dd HH:MM:SS,mmm LEVEL ...")."""
    for line in path.read_text(errors="replace").splitlines():
        if needle not in line:
            continue
        try:
            t = datetime.strptime(" ".join(line.split()[:2]), "%Y-%m-%d %H:%M:%S,%f").timestamp()
        except ValueError:
            continue
        if t >= after - 0.002:
            return t
    return None


def r3(x: float | None) -> float | None:
    return None if x is None else round(x, 3)


def percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))]


# ------------------------------------------------------------------ runs

async def engine_kill(stack: Stack, args: argparse.Namespace) -> dict:
    streams, tasks = await start_streams(stack.port, args)
    open_at_kill = open_streams(streams)
    t_kill = time.monotonic()
    pid = stack.signal_engine_core(signal.SIGKILL)
    log(f"SIGKILL to the engine core (pid {pid}) under {len(streams)} streams")
    await asyncio.gather(*tasks)
    last_end = max(s.ended for s in streams) - t_kill
    health_after = await asyncio.to_thread(http_status, stack.url)
    exit_status = await asyncio.to_thread(stack.wait_engine_exit, 60)
    ended_ok = sum(s.ended_with_error_then_done() for s in streams)
    # As systemd would: a new engine on the same address.
    t_restart_wall = time.time()
    stack.start_engine()
    t_restart = time.monotonic()
    got_200 = await until(lambda: post_status(stack.url, completion_body(1, stream=False),
                                              timeout=10) == 200,
                          args.start_timeout, poll=0.01)
    first_200_wall = time.time()
    attached = log_wall_time(stack.frontend.log_path, "engine rank 0 attached", t_restart_wall)
    settled = await until(lambda: idle(stack.url), 10)
    summary = {
        "streams": len(streams), "max_tokens": args.max_tokens, "engine_core_pid": pid,
        "streams_open_at_fault": open_at_kill,
        "streams_ended_with_error_and_done": ended_ok,
        "stream_problems": [s.error or bytes(s.body[-200:]).decode(errors="replace")
                            for s in streams if not s.ended_with_error_then_done()][:5],
        "kill_to_last_stream_end_s": r3(last_end),
        "kill_to_first_stream_end_s": r3(min(s.ended for s in streams) - t_kill),
        "health_after_kill": health_after,
        "engine_exit_status": exit_status,
        "restart_to_first_200_s": r3(got_200 - t_restart) if got_200 else None,
        "engine_ready_to_first_200_s": r3(first_200_wall - attached)
        if got_200 and attached else None,
        "same_frontend_serving": stack.frontend.alive() and stack.starts["frontend"] == 1,
        "idle_after": settled is not None,
    }
    summary["passed"] = (open_at_kill == ended_ok == len(streams) and last_end < KILL_END_GOAL_S
                         and health_after == 503 and got_200 is not None
                         and summary["same_frontend_serving"] and summary["idle_after"])
    return summary


async def frontend_kill(stack: Stack, args: argparse.Namespace) -> dict:
    streams, tasks = await start_streams(stack.port, args)
    busy = debug_state(stack.url)
    open_at_kill = open_streams(streams)
    t_kill = time.monotonic()
    await asyncio.to_thread(stack.kill_frontend)
    log(f"SIGKILL to the frontend under {len(streams)} streams")
    await asyncio.gather(*tasks)
    cut = sum(not s.completed() for s in streams)
    stack.start_frontend()
    t_start = time.monotonic()
    serving = await until(lambda: http_status(stack.url, timeout=0.5) == 200,
                          args.start_timeout, poll=0.005)
    idle_at = await until(lambda: idle(stack.url), 30, poll=0.01)
    # The new process's count: every ABORT it sent went to an orphan.
    orphans_aborted = engine_aborts(stack.url)
    after = post_status(stack.url, completion_body(4, stream=False))
    # The new frontend's own view: sockets bound -> the running engine answered.
    bound = log_wall_time(stack.frontend.log_path, "engine link (client", 0)
    attached = log_wall_time(stack.frontend.log_path, "re-attached to running engine", 0)
    summary = {
        "streams": len(streams), "max_tokens": args.max_tokens,
        "engine_had_work_before_kill": busy and busy["engine_has_work"],
        "streams_open_at_fault": open_at_kill,
        "streams_cut_by_the_kill": cut,
        "orphans_aborted_by_the_new_frontend": orphans_aborted,
        "kill_to_serving_s": r3(serving - t_kill) if serving else None,
        "start_to_serving_s": r3(serving - t_start) if serving else None,
        "reattach_s": r3(attached - bound) if bound and attached else None,
        "serving_to_engine_idle_s": r3(idle_at - serving) if serving and idle_at else None,
        "request_after_restart": after,
    }
    summary["passed"] = (bool(summary["engine_had_work_before_kill"])
                         and open_at_kill == cut == len(streams)
                         and serving is not None and idle_at is not None
                         and idle_at - serving < ORPHANS_IDLE_GOAL_S and after == 200)
    return summary


async def engine_stall(stack: Stack, args: argparse.Namespace, detector: bool) -> dict:
    streams, tasks = await start_streams(stack.port, args)
    open_at_stop = open_streams(streams)
    t_stop = time.monotonic()
    pid = stack.signal_engine_core(signal.SIGSTOP)
    log(f"SIGSTOP to the engine core (pid {pid}); detector {'on' if detector else 'off'}")
    summary: dict[str, Any] = {"streams": len(streams), "max_tokens": args.max_tokens,
                               "detector": detector, "engine_core_pid": pid,
                               "streams_open_at_fault": open_at_stop}
    try:
        if detector:
            limit = args.stall_timeout + args.stall_slack
            unhealthy = await until(lambda: http_status(stack.url) == 503, limit)
            done, _ = await asyncio.wait(tasks, timeout=max(0.1, t_stop + limit
                                                                - time.monotonic()))
            summary |= {
                "stall_timeout_s": args.stall_timeout,
                "stop_to_health_503_s": r3(unhealthy - t_stop) if unhealthy else None,
                "streams_ended_with_error_and_done": sum(
                    s.ended_with_error_then_done() for s in streams),
                "stop_to_last_stream_end_s": r3(max(s.ended for s in streams) - t_stop)
                if len(done) == len(tasks) else None,
                "error_message": next((json.loads(s.events()[-2])["error"]["message"]
                                       for s in streams if s.ended_with_error_then_done()),
                                      None),
            }
        else:
            await asyncio.sleep(args.hang_seconds)
            summary |= {
                "watched_s": args.hang_seconds,
                "streams_still_open": sum(s.ended is None for s in streams),
                "health_while_stopped": await asyncio.to_thread(http_status, stack.url),
            }
    finally:
        t_cont = time.monotonic()
        stack.signal_engine_core(signal.SIGCONT)
    serving = await until(lambda: http_status(stack.url) == 200, 30)
    after = await asyncio.to_thread(post_status, stack.url, completion_body(4, stream=False))
    results = await asyncio.gather(*tasks)
    settled = await until(lambda: idle(stack.url), 30)
    summary |= {"cont_to_health_200_s": r3(serving - t_cont) if serving else None,
                "request_after_cont": after, "idle_after": settled is not None}
    if detector:
        summary["passed"] = (open_at_stop == len(streams)
                             and summary["stop_to_health_503_s"] is not None
                             and summary["streams_ended_with_error_and_done"] == len(streams)
                             and summary["stop_to_last_stream_end_s"] is not None
                             and after == 200 and settled is not None)
    else:
        summary["streams_completed_after_cont"] = sum(s.completed() for s in results)
        summary["passed"] = (open_at_stop == summary["streams_still_open"] == len(streams)
                             and summary["streams_completed_after_cont"] == len(streams)
                             and after == 200 and settled is not None)
    return summary


async def idle_connections(stack: Stack, args: argparse.Namespace) -> dict:
    rss_samples: list[int] = []
    sampling = asyncio.Event()

    async def sample_rss() -> None:
        while not sampling.is_set():
            rss_samples.append(stack.frontend_rss())
            await asyncio.sleep(0.05)

    async def wave(reading: int, silent: int) -> dict:
        """``reading`` streams read to the end, ``silent`` never read; TTFT of the former."""
        conns = await connect_many(stack.port, reading + silent, open_connection)
        streams = [Stream() for _ in range(reading)]
        body = completion_body(args.max_tokens)
        rss_samples.clear()
        sampling.clear()
        sampler = asyncio.create_task(sample_rss())
        for reader, writer in conns[reading:]:  # never read: the frontend's writes pile up
            writer.write(post_bytes("/v1/completions", body))
        started = time.monotonic()
        await asyncio.gather(*(run_stream(stack.port, body, s, args.stream_timeout, conn)
                               for s, conn in zip(streams, conns)))
        took = time.monotonic() - started
        sampling.set()
        await sampler
        for _, writer in conns[reading:]:
            writer.close()
        ttfts = [s.ttft for s in streams if s.ttft is not None]
        return {"reading": reading, "not_reading": silent, "seconds": round(took, 2),
                "completed": sum(s.completed() for s in streams),
                "ttft_p50_ms": r3(1000 * percentile(ttfts, 0.5)) if ttfts else None,
                "ttft_p99_ms": r3(1000 * percentile(ttfts, 0.99)) if ttfts else None,
                "rss_peak_mib": round(max(rss_samples) / 2**20, 1)}

    await asyncio.to_thread(post_status, stack.url, completion_body(4, stream=False))
    rss_start = stack.frontend_rss()
    silent = round(args.streams * args.not_reading)
    reading = args.streams - silent
    alone: list[dict] = []
    loaded: list[dict] = []
    rss: dict[str, float] = {"start": round(rss_start / 2**20, 1)}
    open_after: list[int] = []
    settled = True
    # Alternate the two conditions: a shared host's noise hits both alike.
    for _ in range(args.repeats):
        alone.append(await wave(reading, 0))
        settled &= await until(lambda: idle(stack.url), 30) is not None
        t0 = time.monotonic()
        idle_conns = await connect_many(stack.port, args.idle, keep_alive_connection)
        connect_s = time.monotonic() - t0
        rss["with_idle_connections"] = round(stack.frontend_rss() / 2**20, 1)
        loaded.append(await wave(reading, silent))
        settled &= await until(lambda: idle(stack.url), 30) is not None
        open_after.append(sum(still_open(reader) for reader, _ in idle_conns))
        rss["after_the_streams_with_idle_connections"] = round(stack.frontend_rss() / 2**20, 1)
        for _, writer in idle_conns:
            writer.close()
        await asyncio.sleep(1.0)
    rss["end_all_closed"] = round(stack.frontend_rss() / 2**20, 1)

    def median(runs: list[dict], key: str) -> float | None:
        values = [r[key] for r in runs if r[key] is not None]
        return r3(statistics.median(values)) if values else None

    figures = {cond: {"ttft_p50_ms": median(runs, "ttft_p50_ms"),
                      "ttft_p99_ms": median(runs, "ttft_p99_ms"),
                      "rss_peak_mib": max(r["rss_peak_mib"] for r in runs)}
               for cond, runs in (("alone", alone), ("with_idle_and_silent", loaded))}
    ratio = {k: (figures["with_idle_and_silent"][k] / figures["alone"][k]
                 if figures["alone"][k] and figures["with_idle_and_silent"][k] else None)
             for k in ("ttft_p50_ms", "ttft_p99_ms")}
    summary = {
        "idle_connections": args.idle, "reading_streams": reading, "silent_streams": silent,
        "max_tokens": args.max_tokens, "repeats": args.repeats,
        "connect_idle_s": round(connect_s, 2), "idle_still_open_after": min(open_after),
        "alone (medians)": figures["alone"],
        "with idle and silent clients (medians)": figures["with_idle_and_silent"],
        "ttft_ratio_p50": r3(ratio["ttft_p50_ms"]), "ttft_ratio_p99": r3(ratio["ttft_p99_ms"]),
        "rss_mib": rss, "idle_after": settled,
        "runs": {"alone": alone, "with_idle_and_silent": loaded},
    }
    summary["passed"] = (all(r["completed"] == r["reading"] for r in alone + loaded)
                         and min(open_after) == args.idle and settled
                         and all(r is not None and r <= TTFT_RATIO_GOAL for r in ratio.values())
                         and figures["with_idle_and_silent"]["rss_peak_mib"]
                         <= 2 * figures["alone"]["rss_peak_mib"])
    return summary


# ------------------------------------------------------------------ report

TITLES = {
    "engine-kill": "engine core killed (SIGKILL) under open streams, then restarted",
    "frontend-kill": "frontend killed (SIGKILL) under load, then restarted",
    "engine-stall": "engine core stopped (SIGSTOP) with requests running",
    "idle-connections": "idle keep-alive connections and clients that never read",
}
CHECKS = {
    "engine-kill": "every stream ends with an error event and one [DONE]; /health 503; "
                   f"kill → last stream ended < {KILL_END_GOAL_S} s; the same frontend "
                   "serves the restarted engine; nothing left in flight",
    "frontend-kill": "a new frontend on the same addresses re-attaches; the orphaned engine "
                     f"requests are aborted (serving → engine idle < {ORPHANS_IDLE_GOAL_S} s)",
    "engine-stall": "with the stall detector: /health 503 and every stream ends with an "
                    "error event; after SIGCONT, serving again. Without it: the streams "
                    "hang, /health stays 200",
    "idle-connections": f"every reading stream completes; reading clients' TTFT p50/p99 "
                        f"within {TTFT_RATIO_GOAL}x of the run without the idle and silent "
                        "clients; peak RSS within 2x; the idle connections stay open",
}


def markdown(run: str, summary: dict, engine: str, command: str) -> str:
    figures = {k: v for k, v in summary.items()
               if k not in ("passed", "command", "stream_problems", "engine_core_pid", "runs",
                            "logs", "run", "engine")}
    lines = [f"### Chaos: {TITLES[run]} ({engine} engine)", "", f"`{command}`", "",
             f"Checked: {CHECKS[run]}.", "", "| figure | value |", "|---|---|"]
    for key, value in figures.items():
        if isinstance(value, dict):
            value = ", ".join(f"{k} {v}" for k, v in value.items())
        lines.append(f"| {key.replace('_', ' ')} | {value} |")
    lines += ["", f"Passed: **{'yes' if summary['passed'] else 'no'}**."]
    return "\n".join(lines) + "\n"


# ------------------------------------------------------------------ main

def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m tools.chaos",
                                description=__doc__.split("\n\n")[0])
    runs = p.add_subparsers(dest="run", required=True)
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--model", type=Path, help="model directory (default: the tiny model)")
    common.add_argument("--logdir", type=Path)
    common.add_argument("--json", type=Path)
    common.add_argument("--markdown", type=Path)
    common.add_argument("--start-timeout", type=float, default=600.0)
    common.add_argument("--stream-timeout", type=float, default=120.0)
    defaults = {"engine-kill": ("real", 64, 1000), "frontend-kill": ("real", 64, 1000),
                "engine-stall": ("real", 16, 1000), "idle-connections": ("mock", 500, 32)}
    for name, (engine, streams, max_tokens) in defaults.items():
        sp = runs.add_parser(name, parents=[common], help=TITLES[name])
        sp.add_argument("--engine", choices=("mock", "real"), default=engine)
        sp.add_argument("--streams", type=int, default=streams)
        sp.add_argument("--max-tokens", type=int, default=max_tokens)
        sp.add_argument("--mock-step-time", type=float, default=0.01)
    stall = runs.choices["engine-stall"]
    stall.add_argument("--stall-timeout", type=float, default=2.0,
                       help=f"the frontend's {STALL_FLAG} (when it has the flag)")
    stall.add_argument("--stall-slack", type=float, default=3.0)
    stall.add_argument("--hang-seconds", type=float, default=5.0,
                       help="without the detector: how long to watch the streams hang")
    idle_ = runs.choices["idle-connections"]
    idle_.add_argument("--idle", type=int, default=2000)
    idle_.add_argument("--not-reading", type=float, default=0.1,
                       help="share of the streams whose clients never read")
    idle_.add_argument("--repeats", type=int, default=3,
                       help="runs of each condition, alternating; medians are compared")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    command = shlex.join(["python", "-m", "tools.chaos",
                          *(sys.argv[1:] if argv is None else argv)])
    workdir = args.logdir or Path(tempfile.mkdtemp(prefix=f"chaos-{args.run}-"))
    workdir.mkdir(parents=True, exist_ok=True)
    frontend_args: list[str] = []
    engine_args: list[str] = []
    detector = False
    if args.run == "engine-stall":
        detector = frontend_has_flag(STALL_FLAG)
        if detector:
            frontend_args += [STALL_FLAG, str(args.stall_timeout)]
    if args.run == "idle-connections":
        raise_fd_limit()
        frontend_args += ["--timeout-keep-alive", "3600"]
        if args.engine == "mock":  # room for every stream at once
            engine_args += ["--max-num-seqs", str(max(256, args.streams))]
    log(f"{args.run}: starting a {args.engine} stack, logs in {workdir}")
    stack = Stack(args.engine, workdir, model_dir=args.model, frontend_args=frontend_args,
                  engine_args=engine_args, mock_step_time=args.mock_step_time)
    try:
        stack.start(args.start_timeout)
        run = {"engine-kill": engine_kill, "frontend-kill": frontend_kill,
               "idle-connections": idle_connections}.get(args.run)
        coro = run(stack, args) if run else engine_stall(stack, args, detector)
        summary = asyncio.run(coro)
    finally:
        stack.stop()
    summary = {"run": args.run, "engine": args.engine, **summary, "command": command,
               "logs": str(workdir)}
    print(json.dumps(summary, indent=1))
    if args.json:
        args.json.write_text(json.dumps(summary, indent=1) + "\n")
    if args.markdown:
        args.markdown.write_text(markdown(args.run, summary, args.engine, command))
    log("passed" if summary["passed"] else "FAILED")
    return 0 if summary["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
