"""A client that leaves a 256-input embeddings batch on the real engine.

Every input is one engine request. The client sends 256 inputs of 1024 tokens
(about a second of work for the CPU engine), waits until they are in the
fan-out table, and hangs up before the answer comes. Afterwards every one of the 256 engine requests has
either finished or been aborted (``vllm:request_success_total`` and
``vllm_frontend_engine_aborts_total`` add up to 256; vLLM does not count
requests whose client left as successes), the table is empty and the engine
has nothing running. The same on the mock, where no input can finish first
(so all 256 are aborted), is in tests/test_pooling.py.
"""

from __future__ import annotations

import json
import socket
import urllib.request

import pytest

from harness.waits import wait_for
from tests.support.exposition import parse

pytestmark = [pytest.mark.real_engine, pytest.mark.vllm_frontend]
INPUTS = 256


def counts(url: str) -> tuple[float, float]:
    """(stop successes, ABORTed engine ids) so far."""
    with urllib.request.urlopen(url + "/metrics", timeout=10) as r:
        text = r.read().decode()
    families = parse(text, prefix="")
    success, aborts = families.get("vllm:request_success"), \
        families.get("vllm_frontend_engine_aborts")
    return (success.total("_total", finished_reason="stop") if success else 0.0,
            aborts.total("_total") if aborts else 0.0)


def test_client_leaving_a_batch_aborts_what_has_not_finished(embed_servers):
    ours = embed_servers.ours
    success_before, aborts_before = counts(ours.url)
    body = json.dumps({"input": [[5 + i % 7] * 1024 for i in range(INPUTS)]}).encode()
    host, port = ours.url.removeprefix("http://").split(":")
    sock = socket.create_connection((host, int(port)))
    try:
        sock.sendall(f"POST /v1/embeddings HTTP/1.1\r\nHost: x\r\nContent-Type: "
                     f"application/json\r\nContent-Length: {len(body)}\r\n\r\n".encode() + body)
        sock.setblocking(False)

        def answer_started() -> bool:
            try:
                return bool(sock.recv(1, socket.MSG_PEEK))
            except BlockingIOError:
                return False

        # Leave as soon as the batch is in the table (on a fast engine some
        # inputs may have finished by then, or all of them before a poll saw
        # the table: then the answer has started).
        wait_for(lambda: ours.debug_state()["table"] > 0 or answer_started(), 30,
                 interval=0.005, message="the batch never reached the fan-out table")
        answered = answer_started()
    finally:
        sock.close()
    state = ours.wait_idle(timeout=60)  # table empty, engine without work
    assert state["table"] == 0 and state["engine_has_work"] is False

    def settled() -> bool:
        success, aborts = counts(ours.url)
        return success - success_before + aborts - aborts_before == INPUTS

    wait_for(settled, 30, message=lambda: f"counts {counts(ours.url)} vs before "
                                          f"{(success_before, aborts_before)}")
    if not answered:  # (an engine that did it all before the client left aborts nothing)
        assert counts(ours.url)[1] - aborts_before > 0
