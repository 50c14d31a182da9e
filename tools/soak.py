"""Soak test: a long, bounded run of mixed traffic against our frontend, where
some clients go away, checking that nothing is lost, leaked, cut short or
growing.

The mix: completions (single and batch prompts), chat and generate
(``/inference/v1/generate``), streamed or not, n up to 4, stop strings,
logprobs, token ids, usage in streams. A share of the clients
(``--disconnect-fraction``) goes away at a random moment: before the response
headers, in the middle of a stream, or before reading a JSON body. Every
response that was read to the end is checked: status 200, valid JSON or SSE
(exactly one ``[DONE]``, last), every choice present with a finish_reason,
token counts within max_tokens (exactly max_tokens for "length"), logprobs
for every token, usage consistent with the choices.

At the end: the fan-out table is empty and the engine has no work
(``GET /debug/state``, so the frontend needs ``--enable-debug-endpoints``),
no ERROR/CRITICAL/Traceback line in the logs, and the frontend's RSS at the
end vs after the warm-up (both measured idle).

Start a stack (``engine-core --mock`` or a real ``engine-core`` with the tiny
model, and ``frontend``), or attach to a running frontend::

    python -m tools.soak --engine mock --requests 10000 --concurrency 32
    python -m tools.soak --engine real --requests 2000 --concurrency 8 --max-tokens 16
    python -m tools.soak --url http://127.0.0.1:8000 --pid PID --log frontend.log

Prints the JSON summary; ``--json`` and ``--markdown`` write it, and a section
for docs/reliability.md, to files. Exit status 0 when every check passed.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import re
import shlex
import sys
import tempfile
import time
from collections import Counter, defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp

from harness import procs
from harness.stack import Stack

PATHS = {"completions": "/v1/completions", "chat": "/v1/chat/completions",
         "generate": "/inference/v1/generate"}
PROMPTS = ["Hello, world!", "The quick brown fox jumps over the lazy dog.", "and by",
           "Once upon a time", "Café crème, 東京 and 🙂", "1, 2, 3, 4,"]
STOPS = [" the", "e", ".", "ing", ", "]
STAYED = ("complete", "truncated", "failed", "lost")  # a client that read to the end
RSS_GROWTH_LIMIT_PCT = 10.0
ERROR_LINE = re.compile(r"\b(ERROR|CRITICAL)\b|Traceback|\"level\":\s*\"(error|critical)\"",
                        re.I)


# ------------------------------------------------------------------ requests

@dataclass
class Spec:
    """One request and what a correct answer to it looks like."""

    kind: str               # completions | chat | generate
    stream: bool
    n: int
    prompts: int            # completions: a batch of prompts; choices = prompts * n
    max_tokens: int
    logprobs: int | None
    token_ids: bool         # token ids in the answer (always for generate)
    include_usage: bool     # streams: the usage chunk before [DONE]
    prompt_len: int | None  # generate: the prompt's token count
    leave: str | None       # before_headers | mid_stream | before_body
    body: dict

    @property
    def label(self) -> str:
        return self.kind + ("-stream" if self.stream else "")

    @property
    def choices(self) -> int:
        return self.prompts * self.n


def make_spec(rng: random.Random, model: str, max_tokens: int,
              disconnect_fraction: float) -> Spec:
    kind = rng.choice(list(PATHS))
    stream = rng.random() < 0.5
    n = rng.choice((1, 1, 2, 4))
    prompts = rng.choice((1, 1, 2, 3)) if kind == "completions" else 1
    spec = Spec(kind=kind, stream=stream, n=n, prompts=prompts,
                max_tokens=rng.randint(1, max_tokens),
                logprobs=rng.choice((None, None, 0, 1, 3)),
                token_ids=kind == "generate" or rng.random() < 0.5,
                include_usage=stream and rng.random() < 0.7, prompt_len=None,
                leave=None, body={})
    if rng.random() < disconnect_fraction:
        spec.leave = rng.choice(("before_headers", "mid_stream" if stream else "before_body"))
    sampling: dict[str, Any] = {"n": n, "max_tokens": spec.max_tokens,
                                # vLLM refuses n > 1 with greedy sampling
                                "temperature": 0.8 if n > 1 else rng.choice((0.0, 0.8)),
                                "ignore_eos": rng.random() < 0.5}
    if rng.random() < 0.3:
        sampling["stop"] = rng.sample(STOPS, rng.randint(1, 2))
    body: dict[str, Any] = {"model": model, "stream": stream}
    if spec.include_usage:
        body["stream_options"] = {"include_usage": True}
    if kind == "generate":
        token_ids = [rng.randrange(10, 1000) for _ in range(rng.randint(1, 12))]
        spec.prompt_len = len(token_ids)
        if spec.logprobs is not None:
            sampling["logprobs"] = spec.logprobs
        body |= {"token_ids": token_ids, "sampling_params": sampling}
    else:
        body |= sampling
        body["return_token_ids"] = spec.token_ids
        if kind == "completions":
            texts = rng.sample(PROMPTS, prompts)
            body["prompt"] = texts[0] if prompts == 1 and rng.random() < 0.5 else texts
            if spec.logprobs is not None:
                body["logprobs"] = spec.logprobs
        else:
            body["messages"] = [{"role": "user", "content": rng.choice(PROMPTS)}]
            if spec.logprobs is not None:
                body |= {"logprobs": True, "top_logprobs": spec.logprobs}
    spec.body = body
    return spec


# ------------------------------------------------------------------ checks

def tokens_in(spec: Spec, choice: dict) -> int | None:
    """Tokens a choice (or a chunk's choice) carries, when the answer says."""
    if spec.token_ids:
        return len(choice.get("token_ids") or ())
    if spec.logprobs is not None:
        return logprob_count(spec, choice)
    return None


def logprob_count(spec: Spec, choice: dict) -> int:
    lp = choice.get("logprobs")
    if not lp:
        return 0
    return len(lp["tokens"] if spec.kind == "completions" else lp["content"] or ())


class Checker:
    """Collects what is wrong with one answer."""

    def __init__(self, spec: Spec) -> None:
        self.spec = spec
        self.problems: list[str] = []
        self.tokens: dict[int, int | None] = defaultdict(int)
        self.finishes: dict[int, list[str]] = defaultdict(list)

    def expect(self, ok: bool, problem: str) -> bool:
        if not ok:
            self.problems.append(problem)
        return ok

    def add_choice(self, choice: dict) -> None:
        spec, index = self.spec, choice.get("index")
        if not self.expect(isinstance(index, int) and 0 <= index < spec.choices,
                           f"choice index {index!r}"):
            return
        count = tokens_in(spec, choice)
        if spec.token_ids and spec.logprobs is not None:
            self.expect(logprob_count(spec, choice) == count,
                        f"choice {index}: {logprob_count(spec, choice)} logprobs for "
                        f"{count} tokens")
        if count is None or self.tokens[index] is None:
            self.tokens[index] = None
        else:
            self.tokens[index] += count
        if choice.get("finish_reason") is not None:
            self.finishes[index].append(choice["finish_reason"])

    def check_choices(self) -> int | None:
        """Every choice finished once, within max_tokens; the completion tokens."""
        spec, total = self.spec, 0
        for index in range(spec.choices):
            finishes = self.finishes.get(index, [])
            if not self.expect(len(finishes) == 1, f"choice {index}: finish_reason "
                                                   f"{finishes or 'missing'}"):
                continue
            self.expect(finishes[0] in ("stop", "length"),
                        f"choice {index}: finish_reason {finishes[0]!r}")
            count = self.tokens.get(index, 0)
            if count is None or total is None:
                total = None
                continue
            total += count
            self.expect(count <= spec.max_tokens,
                        f"choice {index}: {count} tokens > max_tokens {spec.max_tokens}")
            if finishes[0] == "length":
                self.expect(count == spec.max_tokens, f"choice {index}: length after "
                                                      f"{count} of {spec.max_tokens} tokens")
        return total

    def check_usage(self, usage: Any, completion: int | None, prompt: int | None) -> None:
        spec = self.spec
        if not self.expect(isinstance(usage, dict), f"usage {usage!r}"):
            return
        got = usage.get("completion_tokens")
        if completion is not None:
            self.expect(got == completion, f"usage.completion_tokens {got}, "
                                           f"the choices have {completion}")
        else:
            self.expect(isinstance(got, int) and got <= spec.choices * spec.max_tokens,
                        f"usage.completion_tokens {got!r}")
        p = usage.get("prompt_tokens")
        self.expect(isinstance(p, int) and p > 0 and (prompt is None or p == prompt),
                    f"usage.prompt_tokens {p!r}, expected {prompt}")
        self.expect(usage.get("total_tokens") == (p or 0) + (got or 0),
                    f"usage.total_tokens {usage.get('total_tokens')} != {p} + {got}")


def check_full(spec: Spec, body: bytes) -> list[str]:
    """A non-streamed JSON answer."""
    c = Checker(spec)
    try:
        data = json.loads(body)
    except ValueError as e:
        return [f"invalid JSON ({e}): {body[-200:]!r}"]
    choices = data.get("choices") if isinstance(data, dict) else None
    if not c.expect(isinstance(choices, list) and len(choices) == spec.choices,
                    f"{len(choices) if isinstance(choices, list) else choices!r} choices, "
                    f"expected {spec.choices}"):
        return c.problems
    for choice in choices:
        c.add_choice(choice)
    completion = c.check_choices()
    prompt = spec.prompt_len
    if spec.token_ids and spec.kind == "completions":
        by_index = {ch.get("index"): ch for ch in choices}
        prompt = sum(len(by_index.get(p * spec.n, {}).get("prompt_token_ids") or ())
                     for p in range(spec.prompts))
    elif spec.token_ids and spec.kind == "chat":
        prompt = len(data.get("prompt_token_ids") or ())
    c.check_usage(data.get("usage"), completion, prompt)
    return c.problems


def check_stream(spec: Spec, body: bytes) -> list[str]:
    """A streamed answer: SSE framing, one [DONE] last, every choice finished."""
    c = Checker(spec)
    try:
        text = body.decode()
    except UnicodeDecodeError as e:
        return [f"not UTF-8: {e}"]
    if not c.expect(text.endswith("\n\n"), f"ends without a blank line: {text[-200:]!r}"):
        return c.problems
    events = []
    for block in text.split("\n\n")[:-1]:
        if not c.expect(block.startswith("data: "), f"not an SSE data line: {block[:200]!r}"):
            return c.problems
        events.append(block[len("data: "):])
    if not c.expect(events.count("[DONE]") == 1 and events[-1] == "[DONE]",
                    f"{events.count('[DONE]')} [DONE], last event {events[-1][:200]!r}"):
        return c.problems
    try:
        chunks = [json.loads(e) for e in events[:-1]]
    except ValueError as e:
        return [f"invalid JSON event: {e}"]
    usage_chunks = []
    for chunk in chunks:
        if not c.expect("error" not in chunk, f"error event {chunk.get('error')}"):
            return c.problems
        if chunk.get("choices") == []:
            usage_chunks.append(chunk)
        for choice in chunk.get("choices") or ():
            c.add_choice(choice)
    completion = c.check_choices()
    if spec.include_usage:
        if c.expect(len(usage_chunks) == 1 and chunks[-1] is usage_chunks[0],
                    f"{len(usage_chunks)} usage chunks (expected 1, last)"):
            c.check_usage(usage_chunks[0].get("usage"), completion, spec.prompt_len)
    else:
        c.expect(not usage_chunks, "a usage chunk that was not asked for")
    return c.problems


# ------------------------------------------------------------------ the run

@dataclass
class Phase:
    name: str
    limit: int
    deadline: float
    issued: int = 0
    started: float = 0.0
    ended: float = 0.0


class Soak:
    def __init__(self, session: aiohttp.ClientSession, url: str, model: str,
                 args: argparse.Namespace) -> None:
        self.session = session
        self.url = url.rstrip("/")
        self.model = model
        self.args = args
        self.specs = random.Random(args.seed)           # the requests, in issue order
        self.timing = random.Random(args.seed + 1)      # when clients leave
        self.latency = 0.05                             # moving mean of complete answers (s)
        self.outcomes: Counter[str] = Counter()
        self.by_kind: dict[str, Counter[str]] = defaultdict(Counter)
        self.problems: list[dict] = []

    async def one(self, spec: Spec) -> tuple[str, str | None]:
        """Send ``spec``; (outcome, what was wrong)."""
        url = self.url + PATHS[spec.kind]
        started = time.monotonic()
        try:
            if spec.leave == "before_headers":
                delay = self.timing.uniform(0, 2 * self.latency)
                try:
                    resp = await asyncio.wait_for(self.session.post(url, json=spec.body), delay)
                except TimeoutError:
                    return "left before headers", None
                resp.close()
                return "left after headers", None
            async with self.session.post(url, json=spec.body) as resp:
                if spec.leave == "before_body":
                    resp.close()
                    return "left before body", None
                if resp.status != 200:
                    return "failed", f"status {resp.status}: {(await resp.read())[:300]!r}"
                if spec.leave == "mid_stream":
                    body, ended = await read_events(resp, self.timing.randint(1, 8))
                    if not ended:
                        resp.close()
                        return "left mid-stream", None
                else:
                    body = await resp.read()
        except TimeoutError:
            return "lost", f"no complete answer within {self.args.request_timeout} s"
        except aiohttp.ClientError as e:
            return "lost", f"{type(e).__name__}: {e}"
        problems = check_stream(spec, body) if spec.stream else check_full(spec, body)
        if problems:
            return "truncated", "; ".join(problems[:5])
        self.latency += 0.05 * (time.monotonic() - started - self.latency)
        return "complete", None

    async def worker(self, phase: Phase) -> None:
        while phase.issued < phase.limit and time.monotonic() < phase.deadline:
            phase.issued += 1
            spec = make_spec(self.specs, self.model, self.args.max_tokens,
                             self.args.disconnect_fraction)
            outcome, problem = await self.one(spec)
            self.outcomes[outcome] += 1
            self.by_kind[spec.label][outcome] += 1
            if problem and len(self.problems) < 20:
                self.problems.append({"outcome": outcome, "problem": problem,
                                      "leave": spec.leave, "body": spec.body})

    async def run_phase(self, name: str, limit: int, seconds: float) -> Phase:
        phase = Phase(name, limit, time.monotonic() + seconds, started=time.monotonic())
        await asyncio.gather(*(self.worker(phase) for _ in range(self.args.concurrency)))
        phase.ended = time.monotonic()
        log(f"{name}: {phase.issued} requests in {phase.ended - phase.started:.1f} s; "
            f"outcomes so far {dict(self.outcomes)}")
        return phase

    async def debug_state(self) -> dict:
        async with self.session.get(self.url + "/debug/state") as resp:
            if resp.status != 200:
                raise RuntimeError(f"GET /debug/state: {resp.status} (the frontend needs "
                                   f"--enable-debug-endpoints)")
            return await resp.json()

    async def wait_idle(self, timeout: float) -> tuple[dict, float]:
        """Until the table is empty and the engine has no work; (last state, seconds)."""
        started = time.monotonic()
        while True:
            state = await self.debug_state()
            took = time.monotonic() - started
            if (state["table"] == 0 and state["engine_has_work"] is False) or took > timeout:
                return state, took
            await asyncio.sleep(0.05)


async def read_events(resp: aiohttp.ClientResponse, count: int) -> tuple[bytes, bool]:
    """Read until ``count`` SSE events came (the client then leaves), or to the
    end if the stream finishes first; (bytes, whether it ended)."""
    buf = bytearray()
    async for data in resp.content.iter_any():
        buf += data
        if buf.count(b"\n\n") >= count and b"data: [DONE]\n\n" not in buf:
            return bytes(buf), False
    return bytes(buf), True


def rss_bytes(pid: int | None) -> int | None:
    """The process's resident set size; None without a pid (or a process)."""
    return (procs.rss_bytes([pid]) or None) if pid else None


def error_lines(path: Path | None, offset: int) -> list[str]:
    if path is None:
        return []
    with open(path, "rb") as f:
        f.seek(offset)
        text = f.read().decode(errors="replace")
    return [line for line in text.splitlines() if ERROR_LINE.search(line)]


def file_size(path: Path | None) -> int:
    return path.stat().st_size if path and path.exists() else 0


async def soak(url: str, pid: int | None, logs: dict[str, Path], args: argparse.Namespace
               ) -> dict:
    offsets = {name: file_size(path) for name, path in logs.items()}
    timeout = aiohttp.ClientTimeout(total=args.request_timeout)
    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(timeout=timeout, connector=connector) as session:
        async with session.get(url.rstrip("/") + "/v1/models") as resp:
            model = (await resp.json())["data"][0]["id"]
        s = Soak(session, url, model, args)
        await s.run_phase("warm-up", args.warmup, args.duration)
        warm_state, _ = await s.wait_idle(args.settle_timeout)
        rss_warm = rss_bytes(pid)
        main = await s.run_phase("main", args.requests, args.duration)
        end_state, settle_s = await s.wait_idle(args.settle_timeout)
        rss_end = rss_bytes(pid)
    stayed = sum(s.outcomes[o] for o in STAYED)
    errors = {name: error_lines(path, offsets[name]) for name, path in logs.items()}
    growth = (100.0 * (rss_end - rss_warm) / rss_warm) if rss_warm and rss_end else None
    leaked = {"table": end_state["table"], "engine_has_work": end_state["engine_has_work"],
              "settle_s": round(settle_s, 2)}
    summary = {
        "url": url, "model": model, "seed": args.seed, "concurrency": args.concurrency,
        "disconnect_fraction": args.disconnect_fraction, "max_tokens": args.max_tokens,
        "requests": {"warmup": args.warmup, "main": main.issued,
                     "total": args.warmup + main.issued},
        "duration_s": round(main.ended - main.started, 1),
        "requests_per_s": round(main.issued / max(main.ended - main.started, 1e-9), 1),
        "outcomes": dict(sorted(s.outcomes.items())),
        "by_kind": {k: dict(sorted(v.items())) for k, v in sorted(s.by_kind.items())},
        "stayed": stayed, "left": sum(s.outcomes.values()) - stayed,
        "lost": s.outcomes["lost"] + s.outcomes["failed"],
        "truncated": s.outcomes["truncated"],
        "leaked": leaked,
        "rss": {"warmup_bytes": rss_warm, "end_bytes": rss_end,
                "growth_pct": None if growth is None else round(growth, 2),
                "python_blocks_warmup": warm_state.get("python_blocks"),
                "python_blocks_end": end_state.get("python_blocks")},
        "error_log_lines": errors,
        "problems": s.problems,
    }
    summary["passed"] = (summary["lost"] == 0 and summary["truncated"] == 0
                         and leaked["table"] == 0 and leaked["engine_has_work"] is False
                         and not any(errors.values())
                         and (growth is None or growth < RSS_GROWTH_LIMIT_PCT))
    return summary


# ------------------------------------------------------------------ report

def markdown(summary: dict, engine: str, command: str) -> str:
    o, rss = summary["outcomes"], summary["rss"]
    mib = (lambda b: f"{b / 2**20:.1f} MiB" if b else "n/a")
    growth = "n/a" if rss["growth_pct"] is None else f"{rss['growth_pct']:+.1f} %"
    left = (f"{o.get('left before headers', 0)} / {o.get('left mid-stream', 0)} / "
            f"{o.get('left before body', 0)} / {o.get('left after headers', 0)}")
    leaked = summary["leaked"]
    errors = sum(len(v) for v in summary["error_log_lines"].values())
    lines = [
        f"### Soak: {engine} engine, {summary['requests']['total']:,} requests",
        "",
        f"`{command}`",
        "",
        "| engine | requests (warm-up + main) | main phase | complete | truncated | lost "
        "| left: before headers / mid-stream / before body / after headers "
        "| leaked (table, engine work) | error log lines | RSS warm-up → end |",
        "|---|---|---|---|---|---|---|---|---|---|",
        f"| {engine} | {summary['requests']['warmup']:,} + {summary['requests']['main']:,} "
        f"| {summary['duration_s']} s, {summary['requests_per_s']} req/s "
        f"| {o.get('complete', 0):,} | {summary['truncated']} | {summary['lost']} | {left} "
        f"| {leaked['table']}, {leaked['engine_has_work']} | {errors} "
        f"| {mib(rss['warmup_bytes'])} → {mib(rss['end_bytes'])} ({growth}) |",
        "",
        "| kind | " + " | ".join(sorted(o)) + " |",
        "|---|" + "---|" * len(o),
    ]
    for kind, counts in summary["by_kind"].items():
        lines.append(f"| {kind} | " + " | ".join(str(counts.get(k, 0)) for k in sorted(o))
                     + " |")
    lines += ["", f"Passed: **{'yes' if summary['passed'] else 'no'}**"
              f" (concurrency {summary['concurrency']}, disconnect fraction "
              f"{summary['disconnect_fraction']}, seed {summary['seed']})."]
    return "\n".join(lines) + "\n"


def log(message: str) -> None:
    print(f"soak: {message}", file=sys.stderr, flush=True)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m tools.soak",
                                description=__doc__.split("\n\n")[0])
    where = p.add_mutually_exclusive_group(required=True)
    where.add_argument("--engine", choices=("mock", "real"),
                       help="start engine-core (--mock, or real with the tiny model) "
                            "and a frontend")
    where.add_argument("--url", help="a running frontend (with --enable-debug-endpoints)")
    p.add_argument("--pid", type=int, help="with --url: the frontend's pid, for its RSS")
    p.add_argument("--log", type=Path, help="with --url: the frontend's log file")
    p.add_argument("--requests", type=int, default=1000, help="main phase, at most")
    p.add_argument("--duration", type=float, default=600.0,
                   help="main phase, at most (seconds)")
    p.add_argument("--warmup", type=int, default=None,
                   help="requests before the first RSS reading (default: a tenth of "
                        "--requests, 50 to 1000)")
    p.add_argument("--concurrency", type=int, default=16)
    p.add_argument("--disconnect-fraction", type=float, default=0.3)
    p.add_argument("--max-tokens", type=int, default=32,
                   help="each request asks for 1 to this many tokens")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--request-timeout", type=float, default=120.0)
    p.add_argument("--settle-timeout", type=float, default=10.0,
                   help="how long the table and the engine may take to become idle")
    p.add_argument("--model", type=Path, help="model directory (default: the tiny model)")
    p.add_argument("--mock-step-time", type=float, default=0.002)
    p.add_argument("--frontend-args", default="", help="extra frontend flags (one string)")
    p.add_argument("--start-timeout", type=float, default=600.0)
    p.add_argument("--logdir", type=Path, help="logs of the started stack (default: a "
                                               "temporary directory)")
    p.add_argument("--json", type=Path, help="write the JSON summary here")
    p.add_argument("--markdown", type=Path, help="write the markdown section here")
    args = p.parse_args(argv)
    if args.warmup is None:
        args.warmup = min(1000, max(50, args.requests // 10))
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    command = shlex.join(["python", "-m", "tools.soak",
                          *(sys.argv[1:] if argv is None else argv)])
    stack = None
    if args.engine:
        workdir = args.logdir or Path(tempfile.mkdtemp(prefix="soak-"))
        workdir.mkdir(parents=True, exist_ok=True)
        log(f"starting a {args.engine} stack, logs in {workdir}")
        stack = Stack(args.engine, workdir, model_dir=args.model,
                      frontend_args=shlex.split(args.frontend_args),
                      mock_step_time=args.mock_step_time)
        try:
            stack.start(args.start_timeout)
        except BaseException:
            stack.stop()
            raise
        url, pid = stack.url, stack.frontend.pid
        logs = {"frontend": stack.frontend.log_path, "engine": stack.engine.log_path}
    else:
        url, pid, logs = args.url, args.pid, {"frontend": args.log} if args.log else {}
    try:
        import uvloop

        summary = uvloop.run(soak(url, pid, logs, args))
    finally:
        if stack is not None:
            stack.stop()
    summary["command"] = command
    text = json.dumps(summary, indent=1, ensure_ascii=False)
    print(text)
    if args.json:
        args.json.write_text(text + "\n")
    if args.markdown:
        args.markdown.write_text(markdown(summary, args.engine or "attached", command))
    log("passed" if summary["passed"] else "FAILED")
    return 0 if summary["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
