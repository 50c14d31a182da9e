"""Messages between the frontend and its multimodal processor workers.

Each message is a 4-byte little-endian length and a msgpack map, over the
worker's stdin (requests) and stdout (answers); see engine_core/mm_processor.py
for what they hold.
"""

from __future__ import annotations

import struct
from typing import Any

import msgspec

HEADER = struct.Struct("<I")


def encode(message: Any) -> bytes:
    payload = msgspec.msgpack.encode(message)
    return HEADER.pack(len(payload)) + payload


def decode(payload: bytes) -> Any:
    return msgspec.msgpack.decode(payload)
