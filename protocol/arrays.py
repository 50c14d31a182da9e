"""numpy / torch arrays as vLLM puts them on the wire, read without numpy.

vLLM encodes an array as ``[dtype, shape, data]``: ``dtype`` is a numpy dtype
string (``"<i4"``) or a torch dtype name (``"int32"``); ``data`` is either the
raw little-endian bytes (msgpack ext type 3) or an int index into the frames of
the multipart message (index 0 is the msgpack payload itself). The frontend only
needs these as small Python lists (logprobs), so ``memoryview.cast`` does the
conversion in C without pulling numpy into the frontend.
"""

from __future__ import annotations

import struct
import sys
from collections.abc import Sequence
from typing import Any, Literal

import msgspec

from protocol.errors import ProtocolError

RAW_VIEW_EXT = 3  # vLLM's CUSTOM_TYPE_RAW_VIEW
INLINE_THRESHOLD = 256  # vLLM's VLLM_MSGPACK_ZERO_COPY_THRESHOLD default

if sys.byteorder != "little":  # pragma: no cover - every supported host is LE
    raise ImportError("protocol.arrays assumes a little-endian host")

# dtype string -> (memoryview format, item size). numpy strings and torch names.
_Format = Literal["b", "B", "?", "h", "i", "q", "e", "f", "d"]
_FORMATS: dict[str, tuple[_Format, int]] = {
    "<i1": ("b", 1),
    "|i1": ("b", 1),
    "int8": ("b", 1),
    "<u1": ("B", 1),
    "|u1": ("B", 1),
    "uint8": ("B", 1),
    "|b1": ("?", 1),
    "bool": ("?", 1),
    "<i2": ("h", 2),
    "int16": ("h", 2),
    "<i4": ("i", 4),
    "int32": ("i", 4),
    "<i8": ("q", 8),
    "int64": ("q", 8),
    "<f2": ("e", 2),
    "float16": ("e", 2),
    "<f4": ("f", 4),
    "float32": ("f", 4),
    "<f8": ("d", 8),
    "float64": ("d", 8),
}
# Reverse map used when we encode (mock engine, tests): format -> numpy dtype str.
_NUMPY_DTYPE = {"i": "<i4", "q": "<i8", "f": "<f4", "d": "<f8", "?": "|b1"}
_TORCH_DTYPE = {"i": "int32", "q": "int64", "f": "float32", "d": "float64", "?": "bool"}


class NDArray(msgspec.Struct, array_like=True, gc=False):
    """``[dtype, shape, data]``; ``data`` is an inline buffer or a frame index."""

    dtype: str
    shape: list[int]
    data: Any

    def buffer(self, frames: Sequence[Any]) -> memoryview:
        data = self.data
        if isinstance(data, int):
            if not 0 < data < len(frames):
                raise ProtocolError(f"array refers to missing frame {data}")
            data = frames[data]
        elif isinstance(data, msgspec.msgpack.Ext):
            data = data.data
        return memoryview(data).cast("B")

    def flat(self, frames: Sequence[Any] = ()) -> list:
        """All elements as a flat Python list."""
        buf = self.buffer(frames)
        if self.dtype == "bfloat16":
            halves = buf.cast("H")
            return list(
                struct.unpack(
                    f"<{len(halves)}f", b"".join((h << 16).to_bytes(4, "little") for h in halves)
                )
            )
        try:
            fmt, size = _FORMATS[self.dtype]
        except KeyError:
            raise ProtocolError(f"unsupported array dtype {self.dtype!r}") from None
        if len(buf) % size:
            raise ProtocolError(f"array buffer of {len(buf)} bytes is not {self.dtype}")
        if fmt == "e":  # memoryview.cast has no half-precision format
            return list(struct.unpack(f"<{len(buf) // 2}e", buf))
        return buf.cast(fmt).tolist()

    def rows(self, frames: Sequence[Any] = ()) -> list[list]:
        """A 2-D array as a list of rows (a 1-D array as one row per element)."""
        values = self.flat(frames)
        if len(self.shape) < 2:
            return values
        width = self.shape[-1]
        return [values[i : i + width] for i in range(0, len(values), width)]


def ext_hook(code: int, data: memoryview) -> Any:
    """msgspec ext hook: keep raw array views, refuse pickles (ext 1 and 2)."""
    if code == RAW_VIEW_EXT:
        return bytes(data)  # inline arrays are < 256 bytes; own them
    raise ProtocolError(
        f"engine sent msgpack extension type {code}; pickled payloads are refused "
        "(is the engine running with VLLM_ALLOW_INSECURE_SERIALIZATION=1?)"
    )


def make_array(
    values: Sequence, shape: Sequence[int], fmt: str, aux: list[bytes], *, torch_names: bool = False
) -> NDArray:
    """Build an NDArray the way vLLM's encoder would.

    Arrays of at least INLINE_THRESHOLD bytes go out-of-band: their bytes are
    appended to ``aux`` (whose element 0 is the payload slot) and ``data`` is the
    frame index.
    """
    raw = struct.pack(f"<{len(values)}{fmt}", *values)
    dtype = (_TORCH_DTYPE if torch_names else _NUMPY_DTYPE)[fmt]
    if len(raw) < INLINE_THRESHOLD or not shape:
        data: Any = msgspec.msgpack.Ext(RAW_VIEW_EXT, raw)
    else:
        data = len(aux)
        aux.append(raw)
    return NDArray(dtype, list(shape), data)
