"""A frontend's whole engine link in one object, for protocol-level tests: the
handshake server and the engine client, as ``frontend/server.py`` wires them."""

from __future__ import annotations

from typing import Any, Callable

import zmq

from frontend.engine_addresses import derive_addresses
from frontend.engine_client import EngineClient
from frontend.engine_handshake import HandshakeServer


class EngineLink:
    def __init__(self, handshake_addr: str, *, on_outputs: Callable,
                 on_rank_lost: Callable[[int, str], None],
                 data_parallel_size: int = 1) -> None:
        addresses = derive_addresses(handshake_addr)
        self._on_status: Callable[[str], None] | None = None
        self.client = EngineClient(addresses.inputs[0], addresses.outputs[0],
                                   data_parallel_size=data_parallel_size,
                                   on_outputs=on_outputs, on_rank_lost=on_rank_lost)
        liveness = self.client.liveness
        self.handshake = HandshakeServer(addresses.handshake, addresses.inputs,
                                         addresses.outputs, data_parallel_size,
                                         on_status=self._status, hellos=liveness.hellos,
                                         on_hello=liveness.hello,
                                         rejections=self.client.rejections)

    def _status(self, text: str) -> None:
        if self._on_status is not None:
            self._on_status(text)

    async def start(self, timeout: float | None = 600.0,
                    progress: Callable[[str], None] | None = None):
        self._on_status = progress
        self.handshake.start(zmq.Context.instance())
        return await self.client.start(timeout=timeout, progress=progress)

    def send_add(self, frames: list[bytes], rank: int = 0) -> None:
        self.client.send_add(frames, rank)

    async def call_utility(self, method: str, *args: Any, **kwargs: Any) -> Any:
        return await self.client.call_utility(method, *args, **kwargs)

    async def close(self) -> None:
        await self.handshake.close()
        await self.client.close()
