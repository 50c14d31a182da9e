"""The per-request path alone, in process: body bytes -> ADD -> one engine output -> JSON.

Usage::

    .venv/bin/python -m tools.bench.request_path [--requests 2000] [--max-tokens 1]
                                                 [--repeats 5] [--route completions|chat]
                                                 [--profile] [--instructions]

No sockets and no engine: the shipped route handler (``create_completion`` or
``create_chat_completion``) runs on an aiohttp request built in process
(the body fed to its reader), with the shipped table,
renderer, sampling params, wire encoder (its checks and verifying decode
included) and metrics observer; the ADD goes to an engine link that only
counts it, and the request's outputs (``--max-tokens`` tokens in one message,
the last finishing it) are fed to the table as the engine reader would. Time
per request, best of ``--repeats``. What is not in it: aiohttp's HTTP parsing
and writing, middlewares, the event loop's socket work and zmq (the end-to-end
benchmark, tools/bench/run.py, has them). ``--profile`` prints where the time
goes (cProfile, its overhead included).

With ``--instructions`` the same requests run again in child processes under
callgrind, counted inside ``operator.call`` only (tools/bench/callgrind.py):
once the requests, once only building them and the engine's outputs; the
difference per request is our per-request code's instruction count (repeats
agree within 0.2 %). Compare two versions of the code by running this with
``PYTHONPATH`` pointing at each.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import operator
import pstats
import shutil
import sys
import time
from pathlib import Path

import msgspec
from aiohttp import streams, web
from aiohttp.http import HttpVersion11, RawRequestMessage
from multidict import CIMultiDict, CIMultiDictProxy
from yarl import URL

from frontend.model import load_model_info
from frontend.openai.chat import create_chat_completion
from frontend.openai.completions import create_completion
from frontend.ops.stats_recorder import StatsRecorder
from harness.models import tiny_model_dir
from harness.state import SCHEDULER_STATS, NullEngine, make_state
from protocol import wire
from tools.bench.callgrind import operator_call_instructions
from tools.bench.prompts import make_prompts

ROUTES = {"completions": ("/v1/completions", create_completion),
          "chat": ("/v1/chat/completions", create_chat_completion)}


class KeepingEngine(NullEngine):
    """An engine link that counts the ADDs it is given."""

    added = 0
    harness_time = 0.0  # building the requests and the engine's outputs

    def send_add(self, frame: list[bytes], rank: int, on_failed=None) -> None:
        self.added += 1


def bodies(prompts: list[str], route: str, max_tokens: int) -> list[bytes]:
    out = []
    for prompt in prompts:
        body: dict = {"model": "tiny", "max_tokens": max_tokens, "temperature": 0.0,
                      "ignore_eos": True}
        if route == "chat":
            body["messages"] = [{"role": "user", "content": prompt}]
        else:
            body["prompt"] = prompt
        out.append(msgspec.json.encode(body))
    return out


def output_frames(request_id: str, max_tokens: int) -> list[bytes]:
    outs = [wire.EngineCoreOutput(request_id, list(range(100, 100 + max_tokens)),
                                  finish_reason=wire.FinishReason.LENGTH)]
    outs[0].prefill_stats = {"num_prompt_tokens": 128, "num_cached_tokens": 0}
    return wire.encode_outputs(wire.EngineCoreOutputs(
        outputs=outs, scheduler_stats=SCHEDULER_STATS, timestamp=time.monotonic()))


_HEADERS = CIMultiDictProxy(CIMultiDict({"Content-Type": "application/json"}))


class _Peer:
    """The parts of aiohttp's connection handler a request reads (no socket)."""

    ssl_context = None
    peername = ("127.0.0.1", 40000)
    sockname = ("127.0.0.1", 8000)
    transport = None

    def pause_reading(self) -> None: ...

    def resume_reading(self, resume_parser: bool = True) -> None: ...


def make_request(path: str, body: bytes) -> web.Request:
    """An aiohttp request for ``path`` whose reader holds ``body``."""
    loop = asyncio.get_running_loop()
    peer = _Peer()
    payload = streams.StreamReader(peer, 2**16, loop=loop)
    payload.feed_data(body)
    payload.feed_eof()
    message = RawRequestMessage("POST", path, HttpVersion11, _HEADERS, (), False, None, False,
                                False, URL(path))
    return web.Request(message, payload, peer, None, None, loop)


async def serve(state, engine: KeepingEngine, handler, path: str, body: bytes,
                max_tokens: int) -> bytes:
    t0 = time.perf_counter()
    request = make_request(path, body)
    engine.harness_time += time.perf_counter() - t0  # (aiohttp's work: not counted)
    task = asyncio.ensure_future(handler(state, request))
    added = engine.added
    while engine.added == added and not task.done():
        await asyncio.sleep(0)
    if engine.added > added:  # the one engine request in the table
        engine_id = next(iter(state.table.entries))
        t0 = time.perf_counter()
        frames = output_frames(engine_id, max_tokens)
        engine.harness_time += time.perf_counter() - t0  # (the engine's work: not counted)
        state.table.on_outputs([wire.decode_step(frames)])
    response = await task
    return response.body


async def run_once(state, engine, args, request_bodies: list[bytes]) -> float:
    path, handler = ROUTES[args.route]
    engine.harness_time = 0.0
    t0 = time.perf_counter()
    for i in range(args.requests):
        await serve(state, engine, handler, path, request_bodies[i % len(request_bodies)],
                    args.max_tokens)
    elapsed = time.perf_counter() - t0 - engine.harness_time
    assert not state.table.entries, "every request must have finished"
    return elapsed / args.requests


async def build_only(engine, args, request_bodies: list[bytes]) -> None:
    """What ``run_once`` does besides the handler: the requests and the outputs."""
    path = ROUTES[args.route][0]
    for i in range(args.requests):
        make_request(path, request_bodies[i % len(request_bodies)])
        output_frames(f"0_cmpl-{i}-0-abcdef01", args.max_tokens)


def window_instructions(args, window: str) -> int:
    """Callgrind's count inside ``operator.call`` of a child running ``window``."""
    return operator_call_instructions(
        "tools.bench.request_path", "--model", str(args.model), "--route", args.route,
        "--requests", str(args.requests), "--max-tokens", str(args.max_tokens),
        "--window", window)


def setup(model_dir: Path, route: str, max_tokens: int):
    """(state, engine link, request bodies): the shipped table and renderer
    around an engine link that keeps nothing, 256 prompts of 128 tokens."""
    model = load_model_info(str(model_dir), served_names=["tiny"])
    state = make_state(model, observer=StatsRecorder(lambda: 4096))
    engine = state.table.engine = state.engine = KeepingEngine()
    return state, engine, bodies(make_prompts(model_dir, 256, 128), route, max_tokens)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model", type=Path, default=None,
                   help="model directory (default: the tiny test model, built if missing)")
    p.add_argument("--requests", type=int, default=2000)
    p.add_argument("--max-tokens", type=int, default=1)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--route", choices=tuple(ROUTES), default="completions")
    p.add_argument("--profile", action="store_true")
    p.add_argument("--instructions", action="store_true",
                   help="also count instructions per request under callgrind")
    p.add_argument("--window", choices=("requests", "building"), help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    args.model = args.model or tiny_model_dir()
    state, engine, request_bodies = setup(args.model, args.route, args.max_tokens)
    path, handler = ROUTES[args.route]
    loop = asyncio.new_event_loop()
    first = loop.run_until_complete(serve(state, engine, handler, path, request_bodies[0],
                                          args.max_tokens))
    assert b'"choices"' in first, first[:300]
    if args.instructions and not shutil.which("valgrind"):
        sys.exit("--instructions needs valgrind (apt-get install valgrind)")
    if args.window == "requests":  # a child under callgrind: only this is counted
        operator.call(loop.run_until_complete, run_once(state, engine, args, request_bodies))
        return
    if args.window == "building":
        operator.call(loop.run_until_complete, build_only(engine, args, request_bodies))
        return
    if args.profile:
        prof = cProfile.Profile()
        prof.enable()
        loop.run_until_complete(run_once(state, engine, args, request_bodies))
        prof.disable()
        pstats.Stats(prof).sort_stats("tottime").print_stats(35)
        return
    best = min(loop.run_until_complete(run_once(state, engine, args, request_bodies))
               for _ in range(args.repeats))
    print(f"{args.route} max_tokens={args.max_tokens}: {best * 1e6:6.2f} us per request "
          f"(best of {args.repeats} x {args.requests})", flush=True)
    if args.instructions:
        counted = window_instructions(args, "requests") - window_instructions(args, "building")
        print(f"  {counted / args.requests / 1e3:,.1f} k instructions per request (callgrind)")


if __name__ == "__main__":
    main()
