"""What a rank's state may change on, in process: the handshake window, the
registration's checks, ROUTER_HANDOVER only while nothing serves, the re-attach
answered from the address the rank registered from, ENGINE_CORE_DEAD believed
only when a rank stops answering. ``RankLiveness`` (the shipped class) around a
link that records what it is asked; the same attacks on the real sockets are in
tests/test_engine_link_attacks.py."""

from __future__ import annotations

import asyncio
import time

import pytest
import zmq

from frontend import engine_ranks
from frontend.engine_addresses import EngineAddresses, beyond_loopback, derive_addresses
from frontend.engine_client import EngineClient
from frontend.engine_ranks import RankLiveness
from frontend.engine_rejections import LOG_EVERY_S, REASONS, Rejections
from harness.ports import HOST, free_port_triple
from protocol import handshake as hs
from protocol import wire

READY = hs.ReadyResponse(max_model_len=1024, vllm_version="0.32.0", num_gpu_blocks=8)
IDENTITY = hs.engine_identity(0)


class FakeLink:
    """Answers probes as told; records the handover switch."""

    def __init__(self) -> None:
        self.answers: dict[int, str | None] = {}  # rank -> the answering address
        self.handover: list[bool] = []
        self.probed: list[int] = []
        self.unreachable: set[int] = set()
        self.answer_now = asyncio.Event()  # probes wait for it when ``hold`` is set
        self.hold = False

    def reachable(self, rank) -> bool:
        return rank.index not in self.unreachable

    async def probe(self, rank, timeout, give_up) -> str | None:
        self.probed.append(rank.index)
        await asyncio.sleep(0)
        if self.hold:
            await self.answer_now.wait()
        return self.answers.get(rank.index)

    def set_handover(self, on: bool) -> None:
        self.handover.append(on)

    def fail_calls(self, rank, reason: str) -> None:
        pass


def liveness(link: FakeLink, dp: int = 1, **kw) -> tuple[RankLiveness, list, Rejections]:
    lost: list = []
    rejected = Rejections()
    live = RankLiveness(dp, link, on_rank_lost=lambda i, why: lost.append((i, why)),
                        reject=rejected, **kw)
    return live, lost, rejected


def say_hello(live: RankLiveness, rank: int = 0) -> None:
    """What the handshake server does on a HELLO."""
    live.hellos[rank] = time.monotonic()
    live.hello(rank)


def run(coro_fn):
    return asyncio.run(coro_fn())


def test_a_registration_needs_a_hello_before_it_and_counts_once():
    async def go():
        link = FakeLink()
        live, _, rejected = liveness(link)
        live.register(IDENTITY, hs.encode_ready_response(READY))
        assert not live.ranks[0].alive
        assert rejected.counts == {"unexpected_registration": 1}
        say_hello(live)
        live.register(IDENTITY, hs.encode_ready_response(READY), "10.0.0.7")
        assert live.ranks[0].alive and live.ranks[0].peer == "10.0.0.7"
        # The same window does not attach a second time (a copy of the message).
        live.register(IDENTITY, hs.encode_ready_response(READY))
        assert rejected.counts == {"unexpected_registration": 2}
    run(go)


def test_a_window_ends():
    async def go():
        live, _, rejected = liveness(FakeLink(), window_s=0.0)
        live.hellos[0] = time.monotonic() - 1.0
        live.hello(0)
        live.register(IDENTITY, hs.encode_ready_response(READY))
        assert not live.ranks[0].alive
        assert rejected.counts == {"unexpected_registration": 1}
    run(go)


@pytest.mark.parametrize("payload", [b"", b"\x00", b"\x81\xa1x\x01", b"\xc1" * 40])
def test_a_bad_registration_leaves_the_serving_rank_alone(payload):
    async def go():
        link = FakeLink()
        link.answers[0] = "127.0.0.1"
        live, lost, rejected = liveness(link)
        say_hello(live)
        live.register(IDENTITY, hs.encode_ready_response(READY))
        say_hello(live)  # a new window (a HELLO as rank 0; the rank still answers)
        live.register(IDENTITY, payload)
        assert live.ranks[0].alive and live.ranks[0].ready == READY and lost == []
        assert rejected.counts["bad_registration"] == 1
    run(go)


def test_a_registration_from_outside_the_ranks_is_counted():
    async def go():
        live, _, rejected = liveness(FakeLink(), dp=2)
        for identity in (b"", b"\x02\x00", b"\xff\xff", b"\x00\x00\x00"):
            live.register(identity, hs.encode_ready_response(READY))
        assert rejected.counts == {"unknown_rank": 4}
    run(go)


def test_an_unsupported_version_after_the_start_is_refused_not_fatal():
    async def go():
        live, _, rejected = liveness(FakeLink(), dp=2)
        say_hello(live, 0)
        live.register(hs.engine_identity(0), hs.encode_ready_response(READY))
        say_hello(live, 1)
        live.register(hs.engine_identity(1), hs.encode_ready_response(READY))
        assert live.all_attached.is_set()
        old = hs.ReadyResponse(max_model_len=1024, vllm_version="0.9.0")
        live.lose(live.ranks[1], "test")
        say_hello(live, 1)
        live.register(hs.engine_identity(1), hs.encode_ready_response(old))
        assert live.start_error is None and not live.ranks[1].alive
        assert rejected.counts["bad_registration"] == 1
    run(go)


def test_handover_only_in_a_window_while_no_rank_is_attached():
    async def go():
        link = FakeLink()
        live, _, _ = liveness(link, dp=2)
        say_hello(live, 0)
        assert link.handover == [True]  # nothing serves: a restarted engine may displace
        live.register(hs.engine_identity(0), hs.encode_ready_response(READY))
        assert link.handover == [True, False]  # rank 0 serves: nobody displaces it
        say_hello(live, 1)
        assert link.handover == [True, False]  # rank 1's window, but rank 0 serves
        live.register(hs.engine_identity(1), hs.encode_ready_response(READY))
        live.lose(live.ranks[0], "test")
        live.lose(live.ranks[1], "test")
        assert link.handover == [True, False]  # nothing serves, but no window is open
        say_hello(live, 1)
        assert link.handover == [True, False, True]
    run(go)


def test_a_hello_as_a_serving_rank_asks_it_first():
    async def go():
        link = FakeLink()
        live, lost, rejected = liveness(link)
        say_hello(live)
        live.register(IDENTITY, hs.encode_ready_response(READY))
        link.answers[0] = "127.0.0.1"
        say_hello(live)  # someone else's HELLO: the engine answers
        await asyncio.sleep(0.01)
        assert live.ranks[0].alive and rejected.counts == {"live_rank_hello": 1}
        link.answers[0] = None
        say_hello(live)  # a new engine, and the attached one is silent: it restarted
        await asyncio.sleep(0.01)
        assert not live.ranks[0].alive and lost and "said HELLO again" in lost[0][1]
    run(go)


def attached(live: RankLiveness, peers: list[str]) -> None:
    for rank, peer in enumerate(peers):
        say_hello(live, rank)
        live.register(hs.engine_identity(rank), hs.encode_ready_response(READY), peer)


def test_a_disconnect_asks_every_rank_whether_its_engine_still_answers():
    """Reachable is not enough after a disconnect: a stranger may hold the
    identity of an engine whose connection dropped at that moment."""
    async def go():
        link = FakeLink()
        live, lost, rejected = liveness(link, dp=3)
        attached(live, ["10.0.0.1", "10.0.0.2", "10.0.0.3"])
        link.answers = {0: "10.0.0.1", 1: None, 2: "10.6.6.6"}
        live.disconnected()
        await asyncio.sleep(0.01)
        assert live.ranks[0].alive and not live.ranks[1].alive and not live.ranks[2].alive
        assert all("does not answer as the engine" in why for _, why in lost)
        assert rejected.counts == {"wrong_peer": 1}
        live.close()
    run(go)


def test_a_rank_back_after_its_grace_is_routed_to_once_its_engine_answers(monkeypatch):
    monkeypatch.setattr(engine_ranks, "DISCONNECT_GRACE_S", 0.01)

    async def go():
        link = FakeLink()
        live, lost, _ = liveness(link, dp=2)
        attached(live, ["10.0.0.1", "10.0.0.2"])
        link.answers = {0: "10.0.0.1", 1: "10.0.0.2"}
        link.hold = True
        link.unreachable = {0, 1}
        live.check()
        assert live.routable_ranks() == []  # in their grace
        link.unreachable = set()  # something holds both identities again
        await asyncio.sleep(0.05)
        assert live.routable_ranks() == [] and all(r.alive for r in live.ranks)
        link.answers[1] = None  # rank 1's identity is held by a stranger
        link.answer_now.set()
        await asyncio.sleep(0.01)
        assert live.routable_ranks() == [0] and [i for i, _ in lost] == [1]
        live.close()
    run(go)


def test_engine_core_dead_is_believed_only_when_a_rank_stops_answering():
    async def go():
        link = FakeLink()
        live, lost, rejected = liveness(link, dp=2)
        for rank in (0, 1):
            say_hello(live, rank)
            live.register(hs.engine_identity(rank), hs.encode_ready_response(READY))
        link.answers = {0: "a", 1: "b"}
        for _ in range(3):  # one round of questions for a burst
            live.engine_core_dead()
        await asyncio.sleep(0.01)
        assert lost == [] and rejected.counts == {"false_engine_dead": 3}
        assert link.probed == [0, 1]
        link.answers = {0: "a", 1: None}
        live.engine_core_dead()
        await asyncio.sleep(0.01)
        assert [i for i, _ in lost] == [1] and "ENGINE_CORE_DEAD" in lost[0][1]
        assert live.ranks[0].alive
        live.close()
    run(go)


def test_reattach_needs_the_address_the_rank_registered_from(tmp_path):
    async def go():
        state = str(tmp_path / "engine.state")
        link = FakeLink()
        live, _, _ = liveness(link, state_file=state)
        say_hello(live)
        live.register(IDENTITY, hs.encode_ready_response(READY), "10.0.0.7")
        assert live.state_file.load().peers == {0: "10.0.0.7"}

        class Rogue(FakeLink):
            """Holds the rank's identity first and answers every probe."""
            calls = 0

            async def probe(self, rank, timeout, give_up):
                self.calls += 1
                await asyncio.sleep(0)
                return "10.6.6.6" if self.calls <= 3 else "10.0.0.7"

        rogue = Rogue()
        restarted, _, rejected = liveness(rogue, state_file=state)
        await restarted.reattach()
        assert rejected.counts == {"wrong_peer": 3}
        assert restarted.ranks[0].alive and restarted.ranks[0].ready == READY
    run(go)


def test_rejections_count_every_reason_and_log_a_flood_once(caplog):
    rejected = Rejections()
    with caplog.at_level("WARNING", logger="frontend.engine"):
        for _ in range(1000):
            rejected("malformed", "garbage")
    assert rejected.counts == {"malformed": 1000}
    assert len(caplog.records) == 1  # one line per reason per LOG_EVERY_S
    assert LOG_EVERY_S >= 1 and len(REASONS) == len(set(REASONS))


def test_state_files_of_earlier_versions_still_load(tmp_path):
    path = tmp_path / "old.state"
    path.write_bytes(hs.encode_ready_response(READY))  # the single-engine file
    state = engine_ranks.StateFile(str(path), 1).load()
    assert state.ranks == {0: READY} and state.peers == {}


def test_engine_ports_listen_only_where_the_engines_connect():
    for flag, args in (("--engine-addr", ("tcp://0.0.0.0:5000",)),
                       ("--engine-addr", ("tcp://*:5000",)),
                       ("--engine-input-addr", ("tcp://127.0.0.1:5000", "tcp://[::]:6000")),
                       ("--engine-output-addr", ("tcp://127.0.0.1:5000", None, "tcp://0.0.0.0:6000"))):
        with pytest.raises(ValueError, match=flag):
            derive_addresses(*args)
    assert beyond_loopback(derive_addresses("tcp://127.0.0.1:5000")) == []
    assert beyond_loopback(derive_addresses("ipc:///run/engine")) == []
    assert beyond_loopback(EngineAddresses("tcp://localhost:1", ["tcp://[::1]:2"],
                                           ["ipc:///x"])) == []
    assert beyond_loopback(derive_addresses("tcp://10.0.0.5:5000")) == [
        "tcp://10.0.0.5:5000", "tcp://10.0.0.5:5001", "tcp://10.0.0.5:5002"]


def test_a_registration_that_arrives_during_a_send_is_read():
    """The input socket's FD is edge-triggered: a send to one rank processes the
    socket's pending commands and with them can take the edge of a restarted
    rank's registration that arrived meanwhile. It must still be read (on real
    engines: a data-parallel rank killed under load came back, registered, and
    was never attached)."""
    async def go():
        port = free_port_triple()
        client = EngineClient(f"tcp://{HOST}:{port + 1}", f"tcp://{HOST}:{port + 2}",
                              data_parallel_size=2, on_outputs=lambda batch: None,
                              on_rank_lost=lambda rank, why: None)
        client.bind()
        dealers = []
        try:
            for index in (0, 1):
                client.liveness.hellos[index] = time.monotonic()
                dealer = zmq.Context.instance().socket(zmq.DEALER)
                dealer.setsockopt(zmq.IDENTITY, hs.engine_identity(index))
                dealer.connect(client.input_address)
                dealers.append(dealer)
                if index == 0:
                    dealer.send(hs.encode_ready_response(READY))
                    await wait_until(lambda: client.ranks[0].alive)
            # Rank 1 registers while the loop is busy; the next thing the loop
            # does on the socket is a send to rank 0.
            dealers[1].send(hs.encode_ready_response(READY))
            time.sleep(0.3)  # (blocking on purpose: the message lands, unread)
            assert client.reachable(client.ranks[0])
            await wait_until(lambda: client.ranks[1].alive)
        finally:
            for dealer in dealers:
                dealer.close(linger=0)
            await client.close()

    run(go)


async def wait_until(predicate, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "not true in time"
        await asyncio.sleep(0.01)


def test_adds_of_one_iteration_leave_together_before_its_aborts(monkeypatch):
    """ADDs are queued and sent at the end of the loop iteration, with the
    iteration's ABORTs after them: an id aborted right after its ADD reaches the
    engine in that order. A send the ROUTER refuses later (the rank's DEALER
    gone, within its disconnect grace) fails the request through ``on_failed``."""
    monkeypatch.setattr(engine_ranks, "DISCONNECT_GRACE_S", 60.0)

    async def go():
        port = free_port_triple()
        client = EngineClient(f"tcp://{HOST}:{port + 1}", f"tcp://{HOST}:{port + 2}",
                              on_outputs=lambda batch: None, on_rank_lost=lambda rank, why: None)
        client.bind()
        client.liveness.hellos[0] = time.monotonic()
        dealer = zmq.Context.instance().socket(zmq.DEALER)
        dealer.setsockopt(zmq.IDENTITY, IDENTITY)
        dealer.connect(client.input_address)
        try:
            dealer.send(hs.encode_ready_response(READY))
            await wait_until(lambda: client.ranks[0].alive)
            failures: list[str] = []
            for i in range(3):
                client.send_add([b"\x00", b"add-%d" % i], 0, failures.append)
            client.abort(0, ["add-2"])
            received = []
            while len(received) < 4:
                assert await _recv_ready(dealer)
                received.append(dealer.recv_multipart(zmq.NOBLOCK))
            assert received[:3] == [[b"\x00", b"add-%d" % i] for i in range(3)]
            assert received[3][0] == b"\x01" and wire.decode_abort(received[3][1]) == ["add-2"]
            assert failures == []

            dealer.close(linger=0)
            await wait_until(lambda: not client.reachable(client.ranks[0]))
            assert client.ranks[0].alive  # (in its grace)
            client.send_add([b"\x00", b"late"], 0, failures.append)
            await wait_until(lambda: failures)
            assert len(failures) == 1 and "cannot send to engine rank 0" in failures[0]
        finally:
            dealer.close(linger=0)
            await client.close()

    run(go)


async def _recv_ready(sock, timeout: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout
    while not sock.poll(0):
        if time.monotonic() > deadline:
            return False
        await asyncio.sleep(0.005)
    return True
