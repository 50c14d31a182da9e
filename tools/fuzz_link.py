"""Fuzzing of the engine link: rogue peers on the frontend's three engine
ports while real clients stream.

The link has no authentication (vLLM's engine speaks plain ZMQ), so anyone who
reaches the ports can send there. Rogue sockets, made again every
``--churn`` frames (each connect and disconnect makes the frontend check its
ranks), send random and mutated frames and valid-looking msgpack built from
the protocol's own structs:

* handshake port (DEALER): HELLO and READY as rank 0 (the engine's identity),
  as ranks that do not exist and as nobody; random bytes; mutated messages;
* input port (DEALER): empty frames (issue 29's attack), ready responses
  (a context of 7 tokens), random and mutated ones, extra frames;
* output port (PUSH): ENGINE_CORE_DEAD, outputs for requests nobody sent
  (finished or not, from rank 0 and ranks that do not exist), utility replies
  nobody asked for, random bytes, mutated valid messages, extra frames.

Meanwhile ``--streams`` clients stream completions (``--max-tokens`` tokens,
``ignore_eos``) one after another. Checked: every client request completed
with all its tokens; the frontend answered /health 200 and had its rank
serving at every look; afterwards the frontend and the engine run, the engine
is attached and idle. The rejected messages are read from
``vllm_frontend_engine_messages_rejected_total``::

    python -m tools.fuzz_link --engine mock --frames 50000
    python -m tools.fuzz_link --engine real --frames 10000 --max-tokens 64

Prints the JSON summary; ``--json`` and ``--markdown`` write it and a section
for docs/reliability.md. Exit status 0 when every check passed.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import shlex
import sys
import tempfile
import threading
import time
import urllib.request
from collections import Counter
from pathlib import Path
from typing import Callable

import zmq

from protocol import handshake as hs
from protocol import wire
from tools.chaos import Stream, completion_body, idle, run_stream
from harness.stack import Stack, log

REJECTED = "vllm_frontend_engine_messages_rejected_total"
SOCKETS = ("handshake", "input", "output")


# ------------------------------------------------------------------ frames

def mutate(rng: random.Random, data: bytes) -> bytes:
    """A valid message with a few bytes flipped, cut short or grown."""
    out = bytearray(data)
    how = rng.random()
    if how < 0.5 and out:
        for _ in range(rng.randint(1, 4)):
            out[rng.randrange(len(out))] = rng.randrange(256)
    elif how < 0.75:
        del out[rng.randrange(len(out) + 1):]
    else:
        out += rng.randbytes(rng.randint(1, 32))
    return bytes(out)


def forged_outputs(rng: random.Random) -> list[bytes]:
    """Outputs for requests nobody sent: ids shaped like the frontend's."""
    index = rng.choice((0, 0, 0, 1, 7, 65535))
    outputs = [wire.EngineCoreOutput(
        f"{rng.choice(('cmpl', 'chatcmpl', 'gen'))}-{rng.randbytes(16).hex()}-0",
        [rng.randrange(1000) for _ in range(rng.randint(0, 4))],
        finish_reason=rng.choice((None, None, wire.FinishReason.LENGTH,
                                  wire.FinishReason.STOP)))
        for _ in range(rng.randint(1, 3))]
    return wire.encode_outputs(wire.EngineCoreOutputs(engine_index=index, outputs=outputs,
                                                      timestamp=time.time()))


def utility_reply(rng: random.Random) -> list[bytes]:
    return wire.encode_outputs(wire.utility_reply(
        rng.randrange(2**63), rng.choice((["generate"], None, 1)),
        engine_index=rng.choice((0, 0, 1))))


READY = hs.encode_ready_response(hs.ReadyResponse(max_model_len=7, vllm_version="0.32.0"))


def handshake_frames(rng: random.Random) -> tuple[str, list[bytes]]:
    pick = rng.random()
    if pick < 0.25:
        return "hello_or_ready", [hs.encode_status(rng.choice(("HELLO", "READY")))]
    if pick < 0.35:
        return "other_status", [hs.encode_status(rng.choice(("BYE", "", "HELLO" * 100)))]
    if pick < 0.65:
        return "mutated", [mutate(rng, hs.encode_status(rng.choice(("HELLO", "READY"))))]
    if pick < 0.9:
        return "random", [rng.randbytes(rng.randint(0, 128))]
    return "extra_frames", [hs.encode_status("HELLO"), rng.randbytes(8)]


def input_frames(rng: random.Random) -> tuple[str, list[bytes]]:
    pick = rng.random()
    if pick < 0.3:
        return "empty", [b""]
    if pick < 0.45:
        return "ready_response", [READY]
    if pick < 0.65:
        return "mutated", [mutate(rng, READY)]
    if pick < 0.9:
        return "random", [rng.randbytes(rng.randint(1, 256))]
    return "extra_frames", [READY, b""]


def output_frames(rng: random.Random) -> tuple[str, list[bytes]]:
    pick = rng.random()
    if pick < 0.01:
        return "engine_core_dead", [wire.ENGINE_CORE_DEAD]
    if pick < 0.35:
        return "forged_outputs", forged_outputs(rng)
    if pick < 0.45:
        return "utility_reply", utility_reply(rng)
    if pick < 0.7:
        return "mutated", [mutate(rng, rng.choice((forged_outputs, utility_reply))(rng)[0])]
    if pick < 0.9:
        return "random", [rng.randbytes(rng.randint(0, 256))]
    return "extra_frames", [*forged_outputs(rng), rng.randbytes(16)]


GENERATORS: dict[str, Callable[[random.Random], tuple[str, list[bytes]]]] = {
    "handshake": handshake_frames, "input": input_frames, "output": output_frames}


class Rogues:
    """Sockets on the three ports, none of them an engine; made again now and then."""

    def __init__(self, engine_addr: str, rng: random.Random) -> None:
        host, _, port = engine_addr.rpartition(":")
        self.addresses = dict(zip(SOCKETS, (f"{host}:{int(port) + i}" for i in range(3))))
        self.rng = rng
        self.ctx = zmq.Context()
        self.socks: dict[str, zmq.Socket] = {}
        self.identities: Counter = Counter()

    def renew(self) -> None:
        for sock in self.socks.values():
            sock.close(linger=0)
        for name, address in self.addresses.items():
            if name == "output":
                sock = self.ctx.socket(zmq.PUSH)
            else:
                sock = self.ctx.socket(zmq.DEALER)
                identity = self.rng.choice((hs.engine_identity(0), hs.engine_identity(1),
                                            self.rng.randbytes(2), None))
                self.identities[identity.hex() if identity else "none"] += 1
                if identity is not None:
                    sock.setsockopt(zmq.IDENTITY, identity)
            sock.setsockopt(zmq.LINGER, 0)
            sock.setsockopt(zmq.SNDHWM, 1000)
            sock.connect(address)
            self.socks[name] = sock

    def close(self) -> None:
        self.ctx.destroy(linger=0)


def fuzz(engine_addr: str, args: argparse.Namespace, stop: threading.Event) -> dict:
    """Send ``args.frames`` frames, round-robin over the sockets, at ``args.rate``/s."""
    rng = random.Random(args.seed)
    rogues = Rogues(engine_addr, rng)
    sent: dict[str, Counter] = {name: Counter() for name in SOCKETS}
    dropped = 0  # a rogue's own queue was full (nobody reads it): not sent
    started = time.monotonic()
    try:
        for n in range(args.frames):
            if stop.is_set():
                break
            if n % args.churn == 0:
                rogues.renew()
            name = SOCKETS[n % 3]
            kind, frames = GENERATORS[name](rng)
            try:
                rogues.socks[name].send_multipart(frames, zmq.NOBLOCK)
                sent[name][kind] += 1
            except zmq.Again:
                dropped += 1
            ahead = (n + 1) / args.rate - (time.monotonic() - started)
            if ahead > 0:
                time.sleep(ahead)
    finally:
        rogues.close()
    return {"frames": {name: sum(c.values()) for name, c in sent.items()},
            "by_kind": {name: dict(sorted(c.items())) for name, c in sent.items()},
            "not_sent_queue_full": dropped, "rogue_identities": dict(rogues.identities),
            "seconds": round(time.monotonic() - started, 1)}


# ------------------------------------------------------------------ the frontend's view

def metrics(url: str) -> str:
    with urllib.request.urlopen(url + "/metrics", timeout=10) as r:
        return r.read().decode()


def rejected(text: str) -> dict[str, int]:
    out = {}
    for line in text.splitlines():
        if line.startswith(REJECTED + "{"):
            labels, value = line[len(REJECTED):].rsplit(" ", 1)
            out[labels.split('reason="')[1].split('"')[0]] = int(float(value))
    return out


def serving_ranks(text: str) -> int:
    for line in text.splitlines():
        if line.startswith('vllm_frontend_engine_ranks{') and 'state="serving"' in line:
            return int(float(line.rsplit(" ", 1)[1]))
    return 0


def health(url: str) -> int | None:
    try:
        with urllib.request.urlopen(url + "/health", timeout=5) as r:
            return r.status
    except urllib.error.HTTPError as e:
        return e.code
    except OSError:
        return None


async def clients(stack: Stack, args: argparse.Namespace, stop: threading.Event) -> dict:
    """``args.streams`` clients streaming one completion after another until ``stop``."""
    results: list[Stream] = []

    async def one_client() -> None:
        while not stop.is_set():
            stream = Stream()
            results.append(stream)
            await run_stream(stack.port, {**completion_body(args.max_tokens),
                                          "stream_options": {"include_usage": True}},
                             stream, args.stream_timeout)

    await asyncio.gather(*(one_client() for _ in range(args.streams)))
    usage = f'"completion_tokens":{args.max_tokens}'.encode()
    bad = [s for s in results
           if not (s.completed() and (usage + b"}" in s.body or usage + b"," in s.body))]
    return {"requests": len(results), "completed": len(results) - len(bad),
            "problems": [s.error or bytes(s.body[-300:]).decode(errors="replace")
                         for s in bad[:5]]}


async def watch(url: str, stop: threading.Event) -> dict:
    """/health and the serving ranks, every 0.2 s."""
    looks, unhealthy, not_serving = 0, 0, 0
    while not stop.is_set():
        status = await asyncio.to_thread(health, url)
        text = await asyncio.to_thread(metrics, url)
        looks += 1
        unhealthy += status != 200
        not_serving += serving_ranks(text) != 1
        await asyncio.sleep(0.2)
    return {"looks": looks, "health_not_200": unhealthy, "rank_not_serving": not_serving}


async def run(stack: Stack, args: argparse.Namespace) -> dict:
    url = stack.url
    before = rejected(metrics(url))
    stop = threading.Event()
    client_task = asyncio.create_task(clients(stack, args, stop))
    watch_task = asyncio.create_task(watch(url, stop))
    try:
        sent = await asyncio.to_thread(fuzz, stack.engine_addr, args, stop)
    finally:
        stop.set()
    served, watched = await client_task, await watch_task
    await asyncio.sleep(1.0)  # the last frames are read, the last checks answered
    text = metrics(url)
    after = {"frontend_alive": stack.frontend.proc.poll() is None,
             "engine_alive": stack.engine.proc.poll() is None,
             "health": health(url), "rank_serving": serving_ranks(text) == 1,
             "idle": await asyncio.to_thread(idle, url)}
    now = rejected(text)
    counted = {r: now[r] - before.get(r, 0) for r in now if now[r] - before.get(r, 0)}
    passed = (served["requests"] > 0 and served["completed"] == served["requests"]
              and watched["health_not_200"] == 0 and watched["rank_not_serving"] == 0
              and after["frontend_alive"] and after["engine_alive"]
              and after["health"] == 200 and after["rank_serving"] and after["idle"])
    return {"passed": passed, **sent, "clients": served, "watch": watched,
            "rejected": counted, "after": after}


def markdown(summary: dict, command: str) -> str:
    frames, c, w, a = summary["frames"], summary["clients"], summary["watch"], summary["after"]
    lines = [f"### Fuzz: the engine link ({summary['engine']} engine)", "", f"`{command}`", "",
             "| frames sent: handshake / input / output | client requests completed | "
             "/health not 200, rank not serving (of looks) | frontend alive | engine alive, "
             "attached, idle |", "|---|---|---|---|---|",
             f"| {frames['handshake']:,} / {frames['input']:,} / {frames['output']:,} | "
             f"{c['completed']:,} / {c['requests']:,} | {w['health_not_200']}, "
             f"{w['rank_not_serving']} (of {w['looks']}) | {a['frontend_alive']} | "
             f"{a['engine_alive']}, {a['rank_serving']}, {a['idle']} |", "",
             "| rejected (reason) | messages |", "|---|---|",
             *(f"| {reason} | {n:,} |" for reason, n in sorted(summary["rejected"].items())),
             "", "| socket | frames sent by kind |", "|---|---|",
             *(f"| {name} | " + ", ".join(f"{k} {v:,}" for k, v in kinds.items()) + " |"
               for name, kinds in summary["by_kind"].items()),
             "", f"Passed: **{'yes' if summary['passed'] else 'no'}**."]
    return "\n".join(lines) + "\n"


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m tools.fuzz_link",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("--engine", choices=("mock", "real"), default="mock")
    p.add_argument("--model", type=Path, help="model directory (default: the tiny model)")
    p.add_argument("--frames", type=int, default=50_000)
    p.add_argument("--rate", type=float, default=1000.0, help="frames a second, at most")
    p.add_argument("--churn", type=int, default=300,
                   help="new rogue sockets every this many frames")
    p.add_argument("--streams", type=int, default=8)
    p.add_argument("--max-tokens", type=int, default=128)
    p.add_argument("--mock-step-time", type=float, default=0.005)
    p.add_argument("--stream-timeout", type=float, default=120.0)
    p.add_argument("--start-timeout", type=float, default=600.0)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--logdir", type=Path)
    p.add_argument("--json", type=Path)
    p.add_argument("--markdown", type=Path)
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    command = shlex.join(["python", "-m", "tools.fuzz_link",
                          *(sys.argv[1:] if argv is None else argv)])
    workdir = args.logdir or Path(tempfile.mkdtemp(prefix="fuzz-link-"))
    workdir.mkdir(parents=True, exist_ok=True)
    log(f"starting a {args.engine} stack, logs in {workdir}")
    stack = Stack(args.engine, workdir, model_dir=args.model,
                  mock_step_time=args.mock_step_time)
    try:
        stack.start(args.start_timeout)
        summary = asyncio.run(run(stack, args))
    finally:
        stack.stop()
    summary = {"engine": args.engine, **summary, "command": command, "logs": str(workdir)}
    print(json.dumps(summary, indent=1))
    if args.json:
        args.json.write_text(json.dumps(summary, indent=1) + "\n")
    if args.markdown:
        args.markdown.write_text(markdown(summary, command))
    log("passed" if summary["passed"] else "FAILED")
    return 0 if summary["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
