"""Property-based HTTP fuzzing of our frontend from its own /openapi.json.

Schemathesis turns the served OpenAPI document (the JSON Schemas of the
request structs the handlers decode) into Hypothesis strategies: *positive*
cases that fit the schema and *negative* ones that break it (wrong types,
missing fields, bodies that are not JSON). Every route gets cases; the
generation routes get most. Each response is checked:

* no 5xx, ever (bad input is the client's fault: a 4xx);
* every 4xx in OpenAI's error shape, ``{"error": {"message": str, "type": str,
  "param": str | null, "code": <the status>}}``, except what no route takes:
  ``{"detail": "Not Found"}`` (404) or ``{"detail": "Method Not Allowed"}``
  (405), as from vLLM's server;
* a 200 stream ends with exactly one ``data: [DONE]`` (Schemathesis stops
  reading a long stream after some events and closes it: a client that goes
  away, counted); a 200 JSON body parses.

Afterwards the frontend and the engine must be alive and idle (fan-out table
empty, engine without work: an invalid request that reached a real engine
would have killed its input thread), the frontend's log free of errors, and a
plain request must still succeed::

    python -m tools.fuzz --engine mock --requests 20000
    python -m tools.fuzz --engine real --requests 500 --max-tokens-cap 16
    python -m tools.fuzz --url http://127.0.0.1:8000 --requests 1000

The started frontend gets ``--max-concurrent-requests 64``: requests for more
choices get a 400 instead of tens of thousands of engine requests (``n`` may
be 16384, as in vLLM). Prints the JSON summary; ``--json`` and ``--markdown``
write it and a section for docs/reliability.md. Exit status 0 when every
check passed.
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
import tempfile
import time
from collections import Counter, defaultdict
from http import HTTPStatus
from pathlib import Path
from typing import Any

import requests

from harness.frontend import SERVED_NAME
from harness.stack import Stack, log
from tools.soak import ERROR_LINE

FRONTEND_ARGS = ("--max-concurrent-requests", "64")
GET_CASES = 10  # per GET route: they take no input, a few requests say enough


def error_shape_problem(status: int, body: bytes) -> str | None:
    """What is wrong with a 4xx body, or None if it is OpenAI's error shape."""
    try:
        data = json.loads(body)
    except ValueError:
        return f"not JSON: {body[:200]!r}"
    if status in (404, 405) and data == {"detail": HTTPStatus(status).phrase}:
        return None  # no such route or method: Starlette's answer, as vLLM's
    err = data.get("error") if isinstance(data, dict) else None
    if not isinstance(err, dict) or set(data) != {"error"}:
        return f"not {{'error': {{...}}}}: {body[:200]!r}"
    if set(err) != {"message", "type", "param", "code"}:
        return f"error keys {sorted(err)}"
    if not (isinstance(err["message"], str) and isinstance(err["type"], str)
            and (err["param"] is None or isinstance(err["param"], str))):
        return f"error field types: {err!r:.300}"
    if err["code"] != status:
        return f"error code {err['code']!r} for status {status}"
    return None


# Anthropic's Messages API (frontend/anthropic): errors after the body is read
# in its own shape, streams of named events ending with message_stop (or an
# error event), as vLLM's server sends them.
MESSAGES_PATHS = ("/v1/messages", "/v1/messages/count_tokens")


def messages_error_problem(status: int, body: bytes) -> str | None:
    """None for a Messages API error: ``{"type": "error", "error": {type, message}}``."""
    try:
        data = json.loads(body)
    except ValueError:
        return f"not JSON: {body[:200]!r}"
    if not isinstance(data, dict) or data.get("type") != "error":
        return f"not a Messages API error: {body[:200]!r}"
    err = data.get("error")
    if not isinstance(err, dict) or set(err) != {"type", "message"}:
        return f"not a Messages API error: {body[:200]!r}"
    return None


def response_problem(status: int, content_type: str, body: bytes,
                     path: str = "") -> str | None:
    messages = path in MESSAGES_PATHS
    if status >= 500:
        return f"status {status}: {body[:300]!r}"
    if status >= 400:
        if messages and messages_error_problem(status, body) is None:
            return None
        return error_shape_problem(status, body)
    if status == 200 and content_type.startswith("text/event-stream") and messages:
        last = body.rstrip(b"\n").rpartition(b"\n\n")[2]
        if not body.endswith(b"\n\n") or not last.startswith(
                (b"event: message_stop\n", b"event: error\n")):
            return f"stream does not end with message_stop or an error: {body[-200:]!r}"
    elif status == 200 and content_type.startswith("text/event-stream"):
        if body.count(b"data: [DONE]\n\n") != 1 or not body.endswith(b"data: [DONE]\n\n"):
            return f"stream does not end with one [DONE]: {body[-200:]!r}"
    elif status == 200 and content_type.startswith("application/json"):
        try:
            json.loads(body)
        except ValueError:
            return f"invalid JSON: {body[:200]!r}"
    return None


class Fuzzer:
    def __init__(self, url: str, args: argparse.Namespace) -> None:
        self.url = url.rstrip("/")
        self.args = args
        self.session = requests.Session()
        self.sent = 0
        self.cut_short = 0  # streams the client left before [DONE]
        self.by_route: dict[str, Counter[str]] = defaultdict(Counter)
        self.problems: list[dict] = []
        self.problem_count: Counter[str] = Counter()

    def send(self, case: Any) -> None:
        label = f"{case.operation.method.upper()} {case.operation.path}"
        if self.args.max_tokens_cap is not None:
            cap_max_tokens(case.body, self.args.max_tokens_cap)
        self.sent += 1
        try:
            resp = case.call(base_url=self.url, session=self.session,
                             timeout=self.args.request_timeout)
        except requests.RequestException as e:
            self.note(label, "no response", f"{type(e).__name__}: {e}", case)
            self.session = requests.Session()
            return
        self.by_route[label][str(resp.status_code)] += 1
        if getattr(resp, "stream_cut_short", False):
            # Schemathesis stops reading a long stream after some events and
            # closes it: a client that goes away (the frontend must abort).
            self.cut_short += 1
            return
        content_type = next((v[0] for k, v in resp.headers.items()
                             if k.lower() == "content-type" and v), "")
        problem = response_problem(resp.status_code, content_type, resp.content or b"",
                                   case.operation.path)
        if problem:
            kind = "5xx" if resp.status_code >= 500 else (
                "4xx shape" if resp.status_code >= 400 else "2xx body")
            self.note(label, kind, problem, case)

    def note(self, label: str, kind: str, problem: str, case: Any) -> None:
        self.problem_count[kind] += 1
        if len(self.problems) < 30:
            body = case.body
            self.problems.append({"route": label, "kind": kind, "problem": problem,
                                  "body": body if isinstance(body, (dict, list, str, int,
                                                                    float, bool)) or body is None
                                  else repr(body)[:500]})

    def run_operation(self, op: Any, mode: Any, target: int) -> int:
        """Send ``target`` generated cases for ``op`` (fewer if Hypothesis runs out)."""
        from hypothesis import HealthCheck, Phase, given, seed, settings
        from hypothesis.errors import Unsatisfiable

        sent_before = self.sent
        for round_ in range(20):
            missing = target - (self.sent - sent_before)
            if missing <= 0:
                break

            @seed(self.args.seed * 1000 + round_)
            @settings(max_examples=missing, phases=[Phase.generate], database=None,
                      deadline=None, suppress_health_check=list(HealthCheck))
            @given(op.as_strategy(generation_mode=mode))
            def fuzz(case: Any) -> None:
                self.send(case)

            try:
                fuzz()
            except Unsatisfiable:
                break
        return self.sent - sent_before


def cap_max_tokens(body: Any, cap: int) -> None:
    """Ask for at most ``cap`` tokens (a real engine on a CPU is slow): a larger
    ``max_tokens`` (or ``max_completion_tokens``), or none at all (the default is
    the rest of the context), becomes ``cap``; other values stay as generated."""
    if not isinstance(body, dict):
        return
    target = body.get("sampling_params") if "token_ids" in body else body
    if not isinstance(target, dict):
        return
    keys = ("max_tokens", "max_completion_tokens") if "messages" in body else ("max_tokens",)
    for key in keys:
        value = target.get(key)
        if value is None or (isinstance(value, int) and not isinstance(value, bool)
                             and value > cap):
            target[key] = cap


def plan(operations: list, total: int) -> list[tuple[Any, str, int]]:
    """(operation, mode, cases): GET routes a few positive cases each, the rest
    split evenly over the POST routes, half positive, half negative."""
    gets = [op for op in operations if op.method.upper() == "GET"]
    posts = [op for op in operations if op.method.upper() != "GET"]
    out = [(op, "positive", GET_CASES) for op in gets]
    left = max(total - GET_CASES * len(gets), 2 * len(posts))
    share, extra = divmod(left, 2 * len(posts))
    for i, op in enumerate(posts):
        for j, mode in enumerate(("positive", "negative")):
            out.append((op, mode, share + (1 if 2 * i + j < extra else 0)))
    return out


def fuzz(url: str, args: argparse.Namespace, log_path: Path | None) -> dict:
    import schemathesis
    from schemathesis import GenerationMode

    offset = log_path.stat().st_size if log_path and log_path.exists() else 0
    doc = requests.get(url + "/openapi.json", timeout=10).json()
    schema = schemathesis.openapi.from_dict(doc)
    operations = [result.ok() for result in schema.get_all_operations()]
    f = Fuzzer(url, args)
    started = time.monotonic()
    per_op = []
    for op, mode, target in plan(operations, args.requests):
        t0 = time.monotonic()
        sent = f.run_operation(op, GenerationMode(mode), target)
        per_op.append({"route": f"{op.method.upper()} {op.path}", "mode": mode,
                       "requests": sent, "seconds": round(time.monotonic() - t0, 1)})
        log(f"{per_op[-1]}; problems so far {dict(f.problem_count)}")
    duration = time.monotonic() - started
    after = check_after(url, args.settle_timeout)
    errors = error_lines(log_path, offset)
    summary = {
        "url": url, "seed": args.seed, "requests": f.sent, "duration_s": round(duration, 1),
        "routes": len(operations), "per_operation": per_op,
        "statuses": {k: dict(sorted(v.items())) for k, v in sorted(f.by_route.items())},
        "server_errors": f.problem_count["5xx"],
        "bad_error_shapes": f.problem_count["4xx shape"],
        "bad_2xx_bodies": f.problem_count["2xx body"],
        "no_response": f.problem_count["no response"],
        "streams_left_mid_way": f.cut_short,
        "after": after, "error_log_lines": errors[:20], "problems": f.problems,
    }
    summary["passed"] = (not f.problem_count and after["idle"] and after["engine_alive"]
                         and after["plain_request_status"] == 200 and not errors)
    return summary


def check_after(url: str, timeout: float) -> dict:
    """Alive and idle: the table empty, the engine alive without work; a plain
    request still served."""
    deadline = time.monotonic() + timeout
    while True:
        state = requests.get(url + "/debug/state", timeout=10).json()
        idle = state["table"] == 0 and state["engine_has_work"] is False
        if idle or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    plain = requests.post(url + "/v1/completions", timeout=60, json={
        "model": SERVED_NAME, "prompt": "Hello", "max_tokens": 4})
    return {"idle": idle, "table": state["table"], "engine_has_work": state["engine_has_work"],
            "engine_alive": state["engine_alive"], "plain_request_status": plain.status_code}


def error_lines(path: Path | None, offset: int) -> list[str]:
    if path is None:
        return []
    with open(path, "rb") as f:
        f.seek(offset)
        return [line for line in f.read().decode(errors="replace").splitlines()
                if ERROR_LINE.search(line)]


def markdown(summary: dict, engine: str, command: str) -> str:
    statuses = sorted({s for v in summary["statuses"].values() for s in v})
    after = summary["after"]
    lines = [
        f"### Fuzzing: {engine} engine, {summary['requests']:,} requests",
        "",
        f"`{command}`",
        "",
        "| engine | requests | routes | time | 5xx | 4xx not in OpenAI's shape "
        "| bad 2xx bodies | no response | streams left mid-way | afterwards |",
        "|---|---|---|---|---|---|---|---|---|---|",
        f"| {engine} | {summary['requests']:,} | {summary['routes']} "
        f"| {summary['duration_s']} s | {summary['server_errors']} "
        f"| {summary['bad_error_shapes']} | {summary['bad_2xx_bodies']} "
        f"| {summary['no_response']} | {summary['streams_left_mid_way']} "
        f"| table {after['table']}, engine alive "
        f"{after['engine_alive']}, engine has work {after['engine_has_work']}, "
        f"a plain request {after['plain_request_status']} |",
        "",
        "| route | " + " | ".join(statuses) + " |",
        "|---|" + "---|" * len(statuses),
    ]
    for route, counts in summary["statuses"].items():
        lines.append(f"| `{route}` | " + " | ".join(f"{counts.get(s, 0):,}" for s in statuses)
                     + " |")
    lines += ["", f"Passed: **{'yes' if summary['passed'] else 'no'}** (seed "
              f"{summary['seed']}; half of each POST route's cases fit the schema, half "
              "break it)."]
    return "\n".join(lines) + "\n"


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m tools.fuzz",
                                description=__doc__.split("\n\n")[0])
    where = p.add_mutually_exclusive_group(required=True)
    where.add_argument("--engine", choices=("mock", "real"))
    where.add_argument("--url", help="a running frontend (with --enable-debug-endpoints)")
    p.add_argument("--log", type=Path, help="with --url: the frontend's log file")
    p.add_argument("--requests", type=int, default=1000)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--request-timeout", type=float, default=60.0)
    p.add_argument("--max-tokens-cap", type=int, default=None,
                   help="generation requests ask for at most this many tokens (a real "
                        "engine on a CPU)")
    p.add_argument("--settle-timeout", type=float, default=10.0)
    p.add_argument("--model", type=Path, help="model directory (default: the tiny model)")
    p.add_argument("--mock-step-time", type=float, default=0.0)
    p.add_argument("--logdir", type=Path)
    p.add_argument("--json", type=Path)
    p.add_argument("--markdown", type=Path)
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    command = shlex.join(["python", "-m", "tools.fuzz",
                          *(sys.argv[1:] if argv is None else argv)])
    stack = None
    if args.engine:
        workdir = args.logdir or Path(tempfile.mkdtemp(prefix="fuzz-"))
        workdir.mkdir(parents=True, exist_ok=True)
        log(f"starting a {args.engine} stack, logs in {workdir}")
        stack = Stack(args.engine, workdir, model_dir=args.model, frontend_args=FRONTEND_ARGS,
                      mock_step_time=args.mock_step_time)
        stack.start()
        url, log_path = stack.url, stack.frontend.log_path
    else:
        url, log_path = args.url, args.log
    try:
        summary = fuzz(url, args, log_path)
    finally:
        if stack is not None:
            stack.stop()
    summary["command"] = command
    text = json.dumps(summary, indent=1, ensure_ascii=False, default=repr)
    print(text)
    if args.json:
        args.json.write_text(text + "\n")
    if args.markdown:
        args.markdown.write_text(markdown(summary, args.engine or "attached", command))
    log("passed" if summary["passed"] else "FAILED")
    return 0 if summary["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
