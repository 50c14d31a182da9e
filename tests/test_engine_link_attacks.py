"""The engine link under attack, on the mock and on a real engine: rogue peers
on the frontend's three engine ports, as any process that reaches them could
be, while a real client streams. The client's stream completes, /health stays
200 and the engine stays attached; what reached the frontend is counted in
``vllm_frontend_engine_messages_rejected_total``.

The first two are issue 29's: one empty frame from a DEALER with identity
0x0000 on the input port used to detach the engine for good (ROUTER_HANDOVER
gave it the engine's route; serving died when it left), and a second
connection claiming a serving rank's identity used to replace it.
"""

from __future__ import annotations

import os
import threading
import time
from typing import Iterator

import pytest
import zmq

from frontend.engine_ranks import DISCONNECT_GRACE_S
from protocol import handshake as hs
from protocol import wire
from tests.support.http_client import MODEL, client, completion, get, metric, scrape
from harness.waits import wait_for

STREAM_TOKENS = 1000  # long enough to stream through an attack and what follows it
# The empty-frame attack ended serving DISCONNECT_GRACE_S after the rogue left.
QUIET_S = 2 * DISCONNECT_GRACE_S + 0.5
REJECTED = "vllm_frontend_engine_messages_rejected_total"


class StreamingClient(threading.Thread):
    """A user's streaming completion, read to its end by the openai client."""

    def __init__(self, url: str, max_tokens: int = STREAM_TOKENS) -> None:
        super().__init__(daemon=True)
        self.url = url
        self.max_tokens = max_tokens
        self.started = threading.Event()
        self.tokens = 0
        self.finish_reason: str | None = None
        self.usage = None
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            stream = client(self.url).completions.create(
                model=MODEL, prompt="Hello", max_tokens=self.max_tokens, temperature=0,
                stream=True, stream_options={"include_usage": True},
                extra_body={"ignore_eos": True, "return_token_ids": True})
            for chunk in stream:
                for choice in chunk.choices:
                    self.tokens += len(getattr(choice, "token_ids", None) or [])
                    self.finish_reason = choice.finish_reason or self.finish_reason
                if chunk.usage is not None:
                    self.usage = chunk.usage
                self.started.set()
        except BaseException as e:  # shown by complete()
            self.error = e
        finally:
            self.started.set()

    def __enter__(self) -> StreamingClient:
        self.start()
        assert self.started.wait(60) and self.error is None, self.error
        return self

    def __exit__(self, *exc: object) -> None:
        self.join(120)

    def complete(self) -> None:
        """Every token came, the stream ended normally."""
        assert not self.is_alive(), "the stream did not end"
        assert self.error is None, self.error
        assert self.finish_reason == "length" and self.tokens == self.max_tokens
        assert self.usage.completion_tokens == self.max_tokens


class Rogue:
    """Sockets on the frontend's engine ports, none of them an engine."""

    def __init__(self, engine_addr: str) -> None:
        host, _, port = engine_addr.rpartition(":")
        self.handshake, self.input, self.output = (f"{host}:{int(port) + i}" for i in range(3))
        self.ctx = zmq.Context()

    def dealer(self, address: str, identity: bytes | None) -> zmq.Socket:
        sock = self.ctx.socket(zmq.DEALER)
        if identity is not None:
            sock.setsockopt(zmq.IDENTITY, identity)
        sock.setsockopt(zmq.LINGER, 0)
        sock.connect(address)
        return sock

    def push(self) -> zmq.Socket:
        sock = self.ctx.socket(zmq.PUSH)
        sock.setsockopt(zmq.LINGER, 1000)
        sock.connect(self.output)
        return sock

    def close(self) -> None:
        self.ctx.destroy(linger=0)


@pytest.fixture
def rogue(stack) -> Iterator[Rogue]:
    r = Rogue(stack.frontend.engine_addr)
    yield r
    r.close()


def rejected(url: str) -> dict[str, float]:
    return {dict(labels)["reason"]: value for (name, labels), value in scrape(url).items()
            if name == REJECTED}


def wait_rejected(url: str, before: dict[str, float], **more: int) -> None:
    """Until each reason counted ``more[reason]`` more than ``before``."""
    now: dict[str, float] = {}

    def counted() -> bool:
        nonlocal now
        now = rejected(url)
        return all(now[r] >= before[r] + n for r, n in more.items())

    wait_for(counted, 30, message=lambda: f"rejected {now}, before {before}, want +{more}")


def rank_states(url: str) -> dict[str, float]:
    return {state: metric(scrape(url), "vllm_frontend_engine_ranks", state=state)
            for state in ("serving", "stalled", "dead")}


def received(sock: zmq.Socket) -> list[bytes]:
    """The request types a rogue was sent (the first frame of each message)."""
    kinds = []
    while sock.poll(100):
        kinds.append(sock.recv_multipart()[0])
    return kinds


def serving_throughout(url: str, seconds: float = QUIET_S) -> None:
    """/health 200 and the rank serving at every look for ``seconds``."""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        assert get(url, "/health").status == 200
        assert metric(scrape(url), "vllm_frontend_engine_ranks", state="serving") == 1
        time.sleep(0.1)


def test_an_empty_frame_on_the_input_port_does_not_detach_the_engine(stack, rogue):
    url = stack.url
    before = rejected(url)
    with stack.mock_step_time(0.01), StreamingClient(url) as user:
        as_rank_0 = rogue.dealer(rogue.input, hs.engine_identity(0))  # issue 29's attack
        as_rank_0.send(b"")
        strangers = [rogue.dealer(rogue.input, identity) for identity in (b"\x01\x00", None)]
        for sock in strangers:
            sock.send(b"")
        assert user.is_alive(), "the stream ended before the attack: make it longer"
        # The strangers' frames reach the frontend, are counted and dropped; the
        # one as rank 0 is not even delivered: rank 0's route is the engine's.
        wait_rejected(url, before, unknown_rank=2)
        for sock in (as_rank_0, *strangers):
            sock.close()
        serving_throughout(url)
    user.complete()
    assert completion(url, {"prompt": "Hello", "max_tokens": 4})["usage"]["completion_tokens"] == 4


def test_a_second_connection_claiming_a_serving_rank_never_replaces_it(stack, rogue):
    url = stack.url
    max_model_len = get(url, "/v1/models").json["data"][0]["max_model_len"]
    adds = stack.adds()
    before = rejected(url)
    with stack.mock_step_time(0.01), StreamingClient(url) as user:
        # The whole handshake, as rank 0: HELLO, then a registration that would
        # shrink the context to 7 tokens, then READY.
        shake = rogue.dealer(rogue.handshake, hs.engine_identity(0))
        shake.send(hs.encode_status("HELLO"))
        assert shake.poll(10_000), "the HELLO got no addresses"
        shake.recv()
        claim = rogue.dealer(rogue.input, hs.engine_identity(0))
        claim.send(hs.encode_ready_response(hs.ReadyResponse(
            max_model_len=7, vllm_version="0.32.0")))
        shake.send(hs.encode_status("READY"))
        assert user.is_alive(), "the stream ended before the attack: make it longer"
        # The engine answers the question a HELLO as a serving rank raises.
        wait_rejected(url, before, live_rank_hello=1)
        serving_throughout(url)
    user.complete()
    # Requests still reach the engine, not the rogue; the context is the engine's.
    assert completion(url, {"prompt": "Hello", "max_tokens": 4})["usage"]["completion_tokens"] == 4
    assert claim.poll(100) == 0, "a request went to the rogue"
    assert get(url, "/v1/models").json["data"][0]["max_model_len"] == max_model_len
    if adds is not None:
        assert stack.adds() == adds + 2


def test_garbage_and_forged_outputs_on_the_output_port(stack, rogue):
    url = stack.url
    before = rejected(url)
    with stack.mock_step_time(0.01), StreamingClient(url) as user:
        push = rogue.push()
        for frames in (
            [wire.ENGINE_CORE_DEAD],                       # names no rank: the ranks are asked
            [b""], [os.urandom(64)], [b"\x93\x00\xc1", b"aux"],
            wire.encode_outputs(wire.EngineCoreOutputs(    # finished: nothing to abort
                engine_index=0, outputs=[wire.EngineCoreOutput(
                    "cmpl-forged-0", [5], finish_reason=wire.FinishReason.LENGTH)])),
            wire.encode_outputs(wire.EngineCoreOutputs(engine_index=7)),
            wire.encode_outputs(wire.utility_reply(12345, ["generate"])),
        ):
            push.send_multipart(frames)
        assert user.is_alive(), "the stream ended before the attack: make it longer"
        wait_rejected(url, before, false_engine_dead=1, malformed=3, unknown_request=1,
                      unknown_rank=1, unexpected_utility=1)
        serving_throughout(url)
    user.complete()


@pytest.mark.parametrize("death", ["crash", "exit"])
def test_a_squatter_on_a_dead_engines_identity_gets_no_requests(start_mock_stack, death):
    """The engine dies and a rogue connects as it at once, to keep the rank
    "reachable" and be sent its requests: the rank is lost all the same (what
    holds the identity does not answer as the engine), the rogue's registration
    without a HELLO attaches nothing, and the restarted engine's HELLO lets its
    connection take the identity over (nothing else serves). ``crash``: the
    engine says ENGINE_CORE_DEAD first; ``exit``: it dies without a word."""
    stack = start_mock_stack(engine_args=("--step-time", "0.01"))
    url = stack.url
    rogue = Rogue(stack.engine_addr)
    try:
        before = rejected(url)
        getattr(stack.control(), death)()
        assert stack.engine.wait(10) != 0
        claim = hs.encode_ready_response(hs.ReadyResponse(max_model_len=7,
                                                          vllm_version="0.32.0"))
        squatters: list[zmq.Socket] = []
        sent = [0]

        def registration_refused() -> bool:
            # A connection made while the engine's still held the identity is
            # refused by ZMQ for good: connect again until one gets through.
            if len(squatters) < 10 and (not squatters or sent[0] % 5 == 0):
                squatters.append(rogue.dealer(rogue.input, hs.engine_identity(0)))
            squatters[-1].send(claim)
            sent[0] += 1
            return rejected(url)["unexpected_registration"] > before["unexpected_registration"]

        wait_for(registration_refused, 30, interval=0.2)
        wait_for(lambda: rank_states(url)["dead"] == 1, 30,
                 message=lambda: f"rank 0 is {rank_states(url)} with a squatter on it")
        assert get(url, "/health").status == 503
        stack.start_engine()
        wait_for(lambda: get(url, "/health").status == 200, 30,
                 message="the restarted engine was not attached")
        reply = completion(url, {"prompt": "Hello", "max_tokens": 4})
        assert reply["usage"]["completion_tokens"] == 4
        assert get(url, "/v1/models").json["data"][0]["max_model_len"] == 1024
        for squatter in squatters:
            assert wire.RequestType.ADD.value not in received(squatter), \
                "a request went to the squatter"
    finally:
        rogue.close()
