"""Beam search (``use_beam_search``): the search itself, then through our frontend.

The first tests drive ``frontend.openai.beam_search.search`` with made-up
logprob dicts, to pin vLLM 0.32's rules where they surprise: an EOS anywhere
among a beam's candidates completes a sequence, the length penalty counts the
prompt, equal candidates keep their order, an engine abort ends the search.
The rest run against the mock engine: the shapes of the answers, how many
engine requests a search costs (``1 + (max_tokens - 1) * n`` per prompt, as in
vLLM), and that a client leaving (or an engine error) mid-search frees every
engine request the search started. Parity of the results with vLLM's own
server on a real engine: tests/test_parity_lora_beam.py.
"""

from __future__ import annotations

import asyncio
import time
from types import SimpleNamespace
from typing import Iterator

import pytest

from frontend.openai import beam_search
from frontend.openai.beam_search import Beam, BeamParams
from harness.frontend import MockStack
from harness.waits import wait_for
from tests.support.http_client import (
    MODEL,
    RawRequest,
    completion,
    metric,
    post,
    scrape,
    stream,
)

EOS = 2


def params(width: int = 2, **kw) -> BeamParams:
    fields = dict(width=width, ignore_eos=False, temperature=0.0, length_penalty=1.0,
                  include_stop_str_in_output=False, skip_special_tokens=True)
    return BeamParams(**{**fields, **kw})


def run_search(steps: dict[tuple[int, ...], dict[int, float]], prompt: list[int],
               p: BeamParams, max_tokens: int, monkeypatch,
               abort_at: int | None = None) -> list[Beam]:
    """``search`` with each beam's step dict looked up by its tokens."""
    calls = []

    async def fake_step(state, request_id, beams, step, lora, cache_salt):
        calls.append(len(beams))
        if abort_at is not None and len(calls) == abort_at:
            return None
        return [{t: (lp, 0, "") for t, lp in steps[tuple(b.tokens)].items()} for b in beams]

    monkeypatch.setattr(beam_search, "run_step", fake_step)
    state = SimpleNamespace(model=SimpleNamespace(eos_token_id=EOS))
    return asyncio.run(beam_search.search(state, "r", prompt, p, None, max_tokens, None, None))


P = [7, 8, 9, 10, 11]
STEPS = {
    # EOS ranks last, still completes [P] (cum -3.0).
    (*P,): {21: -0.1, 22: -0.2, 23: -1.0, EOS: -3.0},
    (*P, 21): {24: -0.5, 25: -0.6, EOS: -0.05, 26: -2.0},   # EOS: [P, 21] at -0.15
    (*P, 22): {27: -0.01, 28: -0.3, 29: -0.4, 30: -0.5},
    (*P, 23): {31: -0.9, 32: -1.0, 33: -1.1, 34: -1.2},
}


def summary(beams: list[Beam], prompt: list[int]) -> list[tuple]:
    return [(b.tokens[len(prompt):], round(b.cumulative_logprob, 6), b.finish_reason,
             b.stop_reason) for b in beams]


def test_eos_completes_and_length_counts_the_prompt(monkeypatch):
    # Scores (length includes the 5 prompt tokens): [P,21]+EOS -0.15/6 = -0.025,
    # [P,22,27] -0.21/7 = -0.03, [P,22,28] -0.5/7, [P]+EOS -3.0/5. Counting
    # only generated tokens would put [P,22,27] (-0.105) before [P,21] (-0.15).
    # [P]+EOS came from an EOS ranked last among [P]'s candidates.
    beams = run_search(STEPS, P, params(2), 2, monkeypatch)
    assert summary(beams, P) == [([21], -0.15, "stop", EOS), ([22, 27], -0.21, None, None)]


def test_include_stop_keeps_the_eos_token(monkeypatch):
    beams = run_search(STEPS, P, params(2, include_stop_str_in_output=True), 2, monkeypatch)
    assert summary(beams, P)[0] == ([21, EOS], -0.15, "stop", EOS)


def test_length_penalty_zero_ranks_by_cumulative_logprob(monkeypatch):
    beams = run_search(STEPS, P, params(3, length_penalty=0.0), 2, monkeypatch)
    assert [round(b.cumulative_logprob, 6) for b in beams] == [-0.15, -0.21, -0.5]


def test_ignore_eos_makes_eos_an_ordinary_candidate(monkeypatch):
    steps = {(*P,): {21: -0.1, EOS: -0.2, 23: -1.0, 24: -2.0},
             (*P, 21): {25: -0.1, 26: -0.2, 27: -0.3, 28: -0.4},
             (*P, EOS): {29: -0.05, 30: -0.2, 31: -0.3, 32: -0.4}}
    beams = run_search(steps, P, params(2, ignore_eos=True), 2, monkeypatch)
    assert summary(beams, P) == [([21, 25], -0.2, None, None), ([EOS, 29], -0.25, None, None)]


def test_equal_candidates_keep_their_order(monkeypatch):
    steps = {(1,): {5: -1.0, 6: -1.0, 7: -1.0, 8: -1.0}}
    beams = run_search(steps, [1], params(2), 1, monkeypatch)
    assert [b.tokens for b in beams] == [[1, 5], [1, 6]]


def test_an_engine_abort_ends_the_search(monkeypatch):
    beams = run_search(STEPS, P, params(2), 5, monkeypatch, abort_at=2)
    assert summary(beams, P) == [([21], -0.1, "abort", None), ([22], -0.2, "abort", None)]


# ---------------------------------------------------------------- through the frontend

@pytest.fixture
def mock(module_mock_stack: MockStack) -> Iterator[MockStack]:
    yield module_mock_stack
    module_mock_stack.frontend.wait_idle()
    stats = module_mock_stack.control().stats()
    assert stats["aborts_unknown"] == 0 and stats["aborts_after_finish"] == 0, stats
    assert stats["input_alive"], stats


def beam(**body) -> dict:
    return {"model": MODEL, "prompt": "Hello", "max_tokens": 4, "n": 2, "temperature": 0,
            "use_beam_search": True, **body}


def test_completions_beam_search_choices_usage_and_engine_requests(mock):
    adds = mock.control().stats()["adds"]
    reply = completion(mock.url, beam(prompt=["Hello", "The quick"], n=3, max_tokens=5,
                                      return_token_ids=True, logprobs=1))
    assert [c["index"] for c in reply["choices"]] == list(range(6))
    assert mock.control().stats()["adds"] - adds == 2 * (1 + 4 * 3)
    generated = 0
    for c in reply["choices"]:
        assert c["finish_reason"] in ("length", "stop")
        assert len(c["logprobs"]["tokens"]) == len(c["token_ids"])
        generated += len(c["token_ids"])
    assert reply["usage"]["completion_tokens"] == generated
    prompts = {tuple(c["prompt_token_ids"]) for c in reply["choices"]}
    assert len(prompts) == 2
    again = completion(mock.url, beam(prompt=["Hello", "The quick"], n=3, max_tokens=5,
                                      return_token_ids=True, logprobs=1))
    assert again["choices"] == reply["choices"]


def test_chat_beam_search_stream_is_the_result_at_once(mock):
    body = {"model": MODEL, "messages": [{"role": "user", "content": "Hi"}],
            "max_tokens": 5, "n": 2, "temperature": 0, "use_beam_search": True}
    whole = post(mock.url, "/v1/chat/completions", body).json
    streamed = stream(mock.url, "/v1/chat/completions",
                      {**body, "stream": True, "stream_options": {"include_usage": True}})
    streamed.check_framing()
    chunks = streamed.chunks
    assert [c["choices"][0]["delta"] for c in chunks[:2]] == [
        {"role": "assistant", "content": ""}] * 2
    finals = [c["choices"][0] for c in chunks[2:4]]
    assert [(f["index"], f["delta"]["content"], f["finish_reason"]) for f in finals] == [
        (c["index"], c["message"]["content"], c["finish_reason"]) for c in whole["choices"]]
    assert chunks[4]["choices"] == []
    assert chunks[4]["usage"] == {k: whole["usage"][k] for k in
                                  ("prompt_tokens", "total_tokens", "completion_tokens")}
    assert len(chunks) == 5


def table_size(stack: MockStack) -> float:
    return metric(scrape(stack.url), "vllm_frontend_fanout_entries")


@pytest.mark.parametrize("path, body", [
    ("/v1/completions", beam(max_tokens=500)),
    ("/v1/chat/completions", {"model": MODEL, "messages": [{"role": "user", "content": "x"}],
                              "max_tokens": 500, "n": 2, "temperature": 0,
                              "use_beam_search": True, "stream": True}),
], ids=["completions", "chat-stream"])
def test_client_leaving_mid_search_frees_every_engine_request(mock, path, body):
    control = mock.control()
    control.configure(step_time=0.02)
    try:
        before = control.stats()
        req = RawRequest(mock.url, path, body)
        wait_for(lambda: control.stats()["adds"] - before["adds"] >= 5, 10,
                 message="the search did not get going")
        # Freeze the engine so that the client leaves while a step is in flight
        # (not in the instant between a step's end and the next one's start).
        # (/debug/state asks the engine, so the table size comes from /metrics.)
        control.stall(None)
        wait_for(lambda: table_size(mock) > 0, 30)
        req.hang_up()
        wait_for(lambda: table_size(mock) == 0, 30,
                 message="table not empty after the client left")
        control.stall(0)
        wait_for(lambda: control.stats()["running"] == 0, 30)
        stopped = control.stats()
        time.sleep(0.3)
        after = control.stats()
        assert after["adds"] == stopped["adds"], "the search went on without its client"
        assert after["running"] == after["waiting"] == 0
        assert after["aborted"] > before["aborted"]
        # Every step request was finished by the engine or aborted by us.
        assert (after["adds"] - before["adds"]
                == after["aborted"] - before["aborted"]
                + after["finished"]["total"] - before["finished"]["total"])
    finally:
        control.stall(0)
        control.configure(step_time=0.002)


def test_an_engine_error_mid_search_is_a_500_and_frees_the_rest(mock):
    control = mock.control()
    completion(mock.url, beam(max_tokens=2))  # warm
    control.call("error_next", count=1)
    reply = post(mock.url, "/v1/completions", beam(max_tokens=3))
    assert (reply.status, reply.error["type"]) == (500, "InternalServerError")


@pytest.mark.parametrize("body, status, message, param", [
    (beam(stream=True), 400, "Streaming is not currently supported with beam search", None),
    (beam(n=11), 400, "Requested sample logprobs of 22, which is greater than max allowed: "
                      "20 (parameter=logprobs, value=22)", "logprobs"),
    (beam(n=0), 400, "beam_width must be at least 1, got 0.", None),
    (beam(temperature=3.0), 400, "temperature must be in [0, 2], got 3.0. "
                                 "(parameter=temperature, value=3.0)", "temperature"),
    (beam(echo=True, logprobs=1), 400, "`echo` with `logprobs` is not supported with beam "
     "search because beam search does not compute prompt logprobs. (parameter=echo)", "echo"),
    (beam(logprobs=1, logprob_token_ids=[3]), 400, "`logprob_token_ids` is not supported "
     "with beam search. (parameter=logprob_token_ids)", "logprob_token_ids"),
], ids=["stream", "too-wide", "n0", "temperature", "echo-logprobs", "logprob-token-ids"])
def test_refused_before_any_engine_request(mock, body, status, message, param):
    adds = mock.control().stats()["adds"]
    reply = post(mock.url, "/v1/completions", body)
    assert (reply.status, reply.error["message"], reply.error["param"]) == \
        (status, message, param)
    assert mock.control().stats()["adds"] == adds
