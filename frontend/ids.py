"""Random hex for request and engine ids, without a system call for each."""

from __future__ import annotations

import os

_POOL_BYTES = 4096


class _RandomPool:
    """``secrets.token_hex``, served from urandom bytes read a page at a time:
    one getrandom call per few hundred ids instead of one per id (two per
    request). Event-loop thread only; the frontend's processes are spawned,
    never forked, so no two share a pool."""

    def __init__(self) -> None:
        self._buf = b""
        self._pos = 0

    def hex(self, nbytes: int) -> str:
        pos = self._pos
        if pos + nbytes > len(self._buf):
            self._buf, pos = os.urandom(_POOL_BYTES), 0
        self._pos = pos + nbytes
        return self._buf[pos : pos + nbytes].hex()


random_hex = _RandomPool().hex
