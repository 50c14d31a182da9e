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
from typing import Callable

import zmq

from protocol import handshake as hs
from protocol.errors import ProtocolError

log = logging.getLogger("frontend.engine")


def rank_of(identity: bytes) -> int | None:
    """The data-parallel rank an engine's identity names (None if malformed)."""
    return int.from_bytes(identity, "little") if len(identity) == 2 else None


class HandshakeServer:
    def __init__(self, address: str, inputs: list[str], outputs: list[str],
                 data_parallel_size: int = 1,
                 on_status: Callable[[str], None] | None = None) -> None:
        self.address = address
        self.data_parallel_size = data_parallel_size
        self._init = hs.encode_init(inputs, outputs)
        self._on_status = on_status
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
        sock = self._socket
        while True:
            try:
                frames = sock.recv_multipart(zmq.NOBLOCK)
            except zmq.Again:
                return
            self._on_message(frames)

    def _on_message(self, frames: list[bytes]) -> None:
        identity = frames[0]
        try:
            status = hs.decode_status(frames[1] if len(frames) > 1 else b"")
        except ProtocolError as e:
            log.warning("ignoring a bad message on the handshake socket: %s", e)
            return
        rank = rank_of(identity)
        if rank is None or rank >= self.data_parallel_size:
            log.warning("an engine with identity %s said %s, but this frontend serves "
                        "--data-parallel-size %d (ranks 0..%d); ignored", identity.hex(),
                        status.status, self.data_parallel_size, self.data_parallel_size - 1)
            return
        if status.status == "HELLO":
            log.info("engine rank %d said HELLO; sending addresses", rank)
            self._socket.send_multipart([identity, self._init])
            self._status(f"engine rank {rank} said HELLO; waiting for it to load the model")
        elif status.status == "READY":
            log.info("engine rank %d is ready", rank)

    def _status(self, text: str) -> None:
        if self._on_status is not None:
            self._on_status(text)

    async def close(self) -> None:
        if self._socket is not None:
            try:
                self._loop.remove_reader(self._socket.getsockopt(zmq.FD))
            except Exception:
                pass
            self._socket.close(linger=100)
            self._socket = None
