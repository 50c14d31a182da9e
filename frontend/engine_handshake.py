"""The handshake socket: where engines say HELLO and learn where the frontend is.

The frontend binds a ROUTER at ``--engine-addr``; every engine rank connects
with the identity ``rank.to_bytes(2, "little")`` and says HELLO; the answer
(INIT) carries the input and output addresses of every frontend client, so
one engine serves several frontend processes, each on its own pair
(``client_index``). The engine then registers on each input socket (the
engine link, ``engine_client.py``, receives it; ``engine_ranks.py`` checks and
attaches it) and says READY here.

The socket stays bound for the frontend's life: an engine restarted by
systemd says HELLO again and is answered like the first time.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, MutableSequence
from typing import cast

import zmq

from frontend.engine_rejections import Rejections
from protocol import handshake as hs
from protocol.errors import ProtocolError

log = logging.getLogger("frontend.engine")


def rank_of(identity: bytes) -> int | None:
    """The data-parallel rank an engine's identity names (None if malformed)."""
    return int.from_bytes(identity, "little") if len(identity) == 2 else None


class HandshakeServer:
    def __init__(
        self,
        address: str,
        inputs: list[str],
        outputs: list[str],
        data_parallel_size: int = 1,
        on_status: Callable[[str], None] | None = None,
        *,
        hellos: MutableSequence[float] | None = None,
        on_hello: Callable[[int], None] | None = None,
        rejections: Rejections | None = None,
    ) -> None:
        """``hellos[rank]``: when that rank last said HELLO (``time.monotonic()``);
        ``on_hello``: told at once (the engine link of this process)."""
        self.address = address
        self.data_parallel_size = data_parallel_size
        self.hellos = hellos if hellos is not None else [0.0] * data_parallel_size
        self._init = hs.encode_init(inputs, outputs)
        self._on_status = on_status
        self._on_hello = on_hello
        self._reject = rejections or Rejections()
        self._socket: zmq.Socket | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    def start(self, ctx: zmq.Context) -> None:
        sock = ctx.socket(zmq.ROUTER)
        sock.setsockopt(zmq.LINGER, 0)
        try:
            sock.bind(self.address)
        except zmq.ZMQError as e:
            sock.close()
            raise OSError(f"cannot bind {self.address}: {e}") from e
        self._socket = sock
        self._loop = asyncio.get_running_loop()
        self._loop.add_reader(sock.getsockopt(zmq.FD), self._on_readable)
        # zmq's FD is edge-triggered: drain once so that the next message wakes us.
        self._on_readable()

    def _on_readable(self) -> None:
        sock = cast(zmq.Socket, self._socket)  # (bound before any read)
        while True:
            try:
                frames = sock.recv_multipart(zmq.NOBLOCK)
            except zmq.Again:
                return
            try:
                self._on_message(frames)
            except Exception as e:  # whatever it was, the socket must be drained
                self._reject("malformed", f"handshake socket: {type(e).__name__}: {e}")

    def _on_message(self, frames: list[bytes]) -> None:
        identity = frames[0]
        if len(frames) != 2:
            self._reject("bad_handshake", f"{len(frames) - 1} frames from {identity.hex()}")
            return
        try:
            status = hs.decode_status(frames[1])
        except ProtocolError as e:
            self._reject("bad_handshake", str(e))
            return
        rank = rank_of(identity)
        if rank is None or rank >= self.data_parallel_size:
            self._reject(
                "unknown_rank",
                f"identity {identity.hex()} said {status.status[:20]!r}, but this "
                f"frontend serves --data-parallel-size {self.data_parallel_size} "
                f"(ranks 0..{self.data_parallel_size - 1})",
            )
            return
        if status.status == "HELLO":
            log.info("engine rank %d said HELLO; sending addresses", rank)
            self.hellos[rank] = time.monotonic()  # before the engine can register
            cast(zmq.Socket, self._socket).send_multipart([identity, self._init], zmq.NOBLOCK)
            self._status(f"engine rank {rank} said HELLO; waiting for it to load the model")
            if self._on_hello is not None:
                self._on_hello(rank)
        elif status.status == "READY":
            log.info("engine rank %d is ready", rank)
        else:
            self._reject("bad_handshake", f"rank {rank} said {status.status[:20]!r}")

    def _status(self, text: str) -> None:
        if self._on_status is not None:
            self._on_status(text)

    async def close(self) -> None:
        if self._socket is not None:
            try:
                loop = cast(asyncio.AbstractEventLoop, self._loop)  # (set with the socket)
                loop.remove_reader(cast(int, self._socket.getsockopt(zmq.FD)))
            except Exception:
                pass
            self._socket.close(linger=100)
            self._socket = None
