"""The soak tool (tools/soak.py): its answer checks catch what they are for,
and a short soak on the mock stack loses, leaks and cuts short nothing."""

from __future__ import annotations

import json
import random
import subprocess
import sys

import pytest

from harness.procs import REPO_ROOT
from tools.soak import Spec, check_full, check_stream, make_spec


def spec(kind: str = "completions", *, stream: bool = True, n: int = 2, max_tokens: int = 3,
         logprobs: int | None = None, token_ids: bool = True, include_usage: bool = True,
         prompt_len: int | None = None) -> Spec:
    return Spec(kind=kind, stream=stream, n=n, prompts=1, max_tokens=max_tokens,
                logprobs=logprobs, token_ids=token_ids, include_usage=include_usage,
                prompt_len=prompt_len, leave=None, body={})


def sse(*events: object) -> bytes:
    return b"".join(b"data: " + (e if isinstance(e, bytes) else json.dumps(e).encode())
                    + b"\n\n" for e in events)


def choice(index: int, token_ids: list[int], finish: str | None = None) -> dict:
    return {"choices": [{"index": index, "text": "x", "token_ids": token_ids,
                         "finish_reason": finish}]}


USAGE = {"choices": [], "usage": {"prompt_tokens": 4, "completion_tokens": 5,
                                  "total_tokens": 9}}
GOOD = [choice(0, [5]), choice(1, [6, 7]), choice(0, [8, 9], "length"), choice(1, [], "stop"),
        USAGE, b"[DONE]"]


def test_a_complete_stream_passes():
    assert check_stream(spec(), sse(*GOOD)) == []


@pytest.mark.parametrize("events, max_tokens, problem", [
    (GOOD[:-1], 3, "0 [DONE]"),
    (GOOD + [b"[DONE]"], 3, "2 [DONE]"),
    ([e for e in GOOD if e != choice(1, [], "stop")], 3, "choice 1: finish_reason missing"),
    (GOOD[:4] + [{"choices": [], "usage": {**USAGE["usage"], "completion_tokens": 6,
                                           "total_tokens": 10}}, b"[DONE]"], 3,
     "usage.completion_tokens 6, the choices have 5"),
    (GOOD[:2] + [{"error": {"message": "boom"}}, b"[DONE]"], 3, "error event"),
    (GOOD, 4, "choice 0: length after 3 of 4 tokens"),
    (GOOD, 2, "choice 0: 3 tokens > max_tokens 2"),
    (GOOD[:4] + [b"[DONE]"], 3, "0 usage chunks"),
])
def test_a_broken_stream_is_caught(events, max_tokens, problem):
    problems = check_stream(spec(max_tokens=max_tokens), sse(*events))
    assert any(problem in p for p in problems), problems


def test_a_stream_cut_in_the_middle_is_caught():
    raw = sse(*GOOD)
    assert "ends without a blank line" in check_stream(spec(), raw[:len(raw) // 2])[0]


def test_logprobs_must_cover_every_token():
    s = spec("chat", n=1, logprobs=1, include_usage=False)
    lp = {"content": [{"token": "a"}]}
    ok = [{"choices": [{"index": 0, "token_ids": [4], "logprobs": lp,
                        "finish_reason": "stop"}]}, b"[DONE]"]
    assert check_stream(s, sse(*ok)) == []
    ok[0]["choices"][0]["token_ids"] = [4, 5]
    assert "1 logprobs for 2 tokens" in check_stream(s, sse(*ok))[0]


def test_full_answers():
    s = spec("generate", stream=False, n=2, max_tokens=2, prompt_len=3)
    body = {"choices": [{"index": 0, "token_ids": [1, 2], "finish_reason": "length"},
                        {"index": 1, "token_ids": [1], "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 3, "completion_tokens": 3, "total_tokens": 6}}
    assert check_full(s, json.dumps(body).encode()) == []
    assert "1 choices, expected 2" in check_full(
        s, json.dumps({**body, "choices": body["choices"][:1]}).encode())[0]
    body["usage"]["prompt_tokens"] = 4
    assert "usage.prompt_tokens 4, expected 3" in check_full(s, json.dumps(body).encode())[0]
    assert "invalid JSON" in check_full(s, b'{"choices": [')[0]


def test_requests_are_valid_and_reproducible():
    specs = [make_spec(random.Random(7), "m", 16, 0.3) for _ in range(2)]
    assert specs[0] == specs[1]
    rng = random.Random(1)
    many = [make_spec(rng, "m", 16, 0.3) for _ in range(500)]
    for s in many:
        sampling = s.body.get("sampling_params", s.body)
        assert sampling["n"] == 1 or sampling["temperature"] > 0  # vLLM's rule
        assert 1 <= s.max_tokens <= 16
        assert s.leave in (None, "before_headers", "mid_stream" if s.stream else "before_body")
    left = sum(s.leave is not None for s in many) / len(many)
    assert 0.2 < left < 0.4
    assert {s.label for s in many} == {"completions", "completions-stream", "chat",
                                       "chat-stream", "generate", "generate-stream"}


def test_short_soak_on_the_mock(tiny_model_dir, tmp_path):
    """300 requests (and a warm-up), 30 % of the clients leaving."""
    out = tmp_path / "soak.json"
    proc = subprocess.run(
        [sys.executable, "-m", "tools.soak", "--engine", "mock", "--model", str(tiny_model_dir),
         "--requests", "300", "--concurrency", "8", "--seed", "3", "--logdir", str(tmp_path),
         "--json", str(out)],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=240)
    assert out.exists(), proc.stderr[-3000:]
    summary = json.loads(out.read_text())
    assert summary["requests"]["main"] == 300
    assert summary["outcomes"]["complete"] > 100 and summary["left"] > 30, summary["outcomes"]
    assert summary["lost"] == 0 and summary["truncated"] == 0, summary["problems"]
    assert summary["leaked"]["table"] == 0 and summary["leaked"]["engine_has_work"] is False
    assert summary["rss"]["growth_pct"] is not None
