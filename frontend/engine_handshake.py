"""The handshake socket: where engines say HELLO and learn where the frontend is.

The frontend binds a ROUTER at ``--engine-addr``; every engine rank connects
with the identity ``rank.to_bytes(2, "little")`` and says HELLO; the answer
(INIT) carries the input and output addresses of every frontend client, so
one engine serves several frontend processes, each on its own pair
(``client_index``). The engine then registers on each input socket (the
engine link, ``engine_client.py``, attaches it there) and says READY here.

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

POLL_S = 0.05


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
        self._task: asyncio.Task | None = None

    def start(self, ctx: zmq.Context) -> None:
        sock = ctx.socket(zmq.ROUTER)
        sock.setsockopt(zmq.LINGER, 0)
        try:
            sock.bind(self.address)
        except zmq.ZMQError as e:
            sock.close()
            raise OSError(f"cannot bind {self.address}: {e}") from e
        self._socket = sock
        self._task = asyncio.get_running_loop().create_task(self._serve())

    async def _serve(self) -> None:
        sock = self._socket
        assert sock is not None
        while True:
            if not sock.poll(0):
                await asyncio.sleep(POLL_S)
                continue
            frames = sock.recv_multipart()
            identity = frames[0]
            try:
                status = hs.decode_status(frames[1] if len(frames) > 1 else b"")
            except ProtocolError as e:
                log.warning("ignoring a bad message on the handshake socket: %s", e)
                continue
            rank = rank_of(identity)
            if rank is None or rank >= self.data_parallel_size:
                log.warning("an engine with identity %s said %s, but this frontend serves "
                            "--data-parallel-size %d (ranks 0..%d); ignored", identity.hex(),
                            status.status, self.data_parallel_size,
                            self.data_parallel_size - 1)
                continue
            if status.status == "HELLO":
                log.info("engine rank %d said HELLO; sending addresses", rank)
                sock.send_multipart([identity, self._init])
                self._status(f"engine rank {rank} said HELLO; waiting for it to load the model")
            elif status.status == "READY":
                log.info("engine rank %d is ready", rank)

    def _status(self, text: str) -> None:
        if self._on_status is not None:
            self._on_status(text)

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except BaseException:
                pass
        if self._socket is not None:
            self._socket.close(linger=100)
