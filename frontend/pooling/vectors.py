"""Pooling outputs as clients get them, without numpy or torch.

``float``: the values (nested rows for a 2-D output, as ``tensor.tolist()``);
``base64`` and ``bytes``: the values cast to ``embed_dtype`` with torch's
rounding (float16 and bfloat16 round to nearest even, the fp8 formats as
c10's converters do) in the requested byte order; Cohere's ``binary`` and
``ubinary``: sign bits packed MSB first, as numpy's ``packbits``.
"""

from __future__ import annotations

import base64
import math
import struct
import sys

from frontend.errors import ApiError

F32 = struct.Struct("<I")


def nested(values: list[float], shape: list[int]) -> list:
    """``tensor.tolist()``: a flat list for 1-D (and 0-D), rows for 2-D."""
    if len(shape) < 2:
        return values
    width = shape[-1]
    return [values[i : i + width] for i in range(0, len(values), width)]


def to_bytes(values: list[float], embed_dtype: str, endianness: str) -> bytes:
    """vLLM's ``tensor2binary``: cast, flatten, byte order ("native": the host's)."""
    big = endianness == "big" or (endianness == "native" and sys.byteorder == "big")
    order = ">" if big else "<"
    n = len(values)
    if embed_dtype == "float32":
        return struct.pack(f"{order}{n}f", *values)
    if embed_dtype == "float16":
        return struct.pack(f"{order}{n}H", *(_half_bits(v) for v in values))
    if embed_dtype == "bfloat16":
        return struct.pack(f"{order}{n}H", *(_bfloat16_bits(v) for v in values))
    if embed_dtype == "fp8_e4m3":
        return bytes(_fp8_bits(v, e4m3=True) for v in values)
    if embed_dtype == "fp8_e5m2":
        return bytes(_fp8_bits(v, e4m3=False) for v in values)
    raise ApiError(f"unsupported embed_dtype {embed_dtype!r}")


def to_base64(values: list[float], embed_dtype: str, endianness: str) -> str:
    return base64.b64encode(to_bytes(values, embed_dtype, endianness)).decode("ascii")


def cohere_base64(values: list[float]) -> str:
    """Cohere's ``base64`` type: little-endian float32."""
    return base64.b64encode(struct.pack(f"<{len(values)}f", *values)).decode("ascii")


def packed_bits(values: list[float], signed: bool) -> list[int]:
    """``np.packbits(values >= 0)`` (MSB first), minus 128 per byte if ``signed``."""
    if len(values) % 8:
        raise ApiError(
            "Embedding dimension must be a multiple of 8 for binary embedding "
            f"types, but got {len(values)}."
        )
    out = []
    for i in range(0, len(values), 8):
        byte = 0
        for v in values[i : i + 8]:
            byte = (byte << 1) | (v >= 0)
        out.append(byte - 128 if signed else byte)
    return out


def cosine(a: list[float], b: list[float]) -> float:
    """``F.cosine_similarity`` of two vectors (computed in double, reported as
    the float32 vLLM returns; eps 1e-8 as torch's)."""
    dot = math.fsum(x * y for x, y in zip(a, b))
    norms = math.sqrt(max(math.fsum(x * x for x in a) * math.fsum(y * y for y in b), 1e-16))
    return _float32(dot / norms)


def _float32(value: float) -> float:
    return struct.unpack("<f", struct.pack("<f", value))[0]


def _f32_bits(value: float) -> int:
    return F32.unpack(struct.pack("<f", value))[0]


def _half_bits(value: float) -> int:
    try:
        return struct.unpack("<H", struct.pack("<e", value))[0]
    except OverflowError:  # beyond float16: infinity, as torch
        return 0xFC00 if value < 0 else 0x7C00


def _bfloat16_bits(value: float) -> int:
    """c10's round_to_nearest_even (torch's CPU cast writes every NaN as 0xFFFF)."""
    if math.isnan(value):
        return 0xFFFF
    bits = _f32_bits(value)
    return ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16) & 0xFFFF


def _fp8_bits(value: float, *, e4m3: bool) -> int:
    """c10's fp8e4m3fn_from_fp32_value / fp8e5m2_from_fp32_value; e4m3 as torch's
    CPU cast: out-of-range values and infinities saturate to +-448, NaN stays NaN."""
    bits = _f32_bits(value)
    sign = bits & 0x80000000
    bits ^= sign
    if e4m3:
        fp8_max, denorm_mask, min_normal, shift, bias = 1087 << 20, 141 << 23, 121 << 23, 20, 7
    else:
        fp8_max, denorm_mask, min_normal, shift, bias = 143 << 23, 134 << 23, 113 << 23, 21, 15
    if bits >= fp8_max:
        if e4m3:
            result = 0x7F if bits > (255 << 23) else 0x7E
        else:
            result = 0x7F if bits > (255 << 23) else 0x7C
    elif bits < min_normal:  # subnormal: a float32 addition does the rounding
        magic = struct.unpack("<f", struct.pack("<I", denorm_mask))[0]
        plain = struct.unpack("<f", struct.pack("<I", bits))[0]
        result = (_f32_bits(plain + magic) - denorm_mask) & 0xFF
    else:
        odd = (bits >> shift) & 1
        bits += (((bias - 127) << 23) & 0xFFFFFFFF) + (1 << (shift - 1)) - 1 + odd
        result = ((bits & 0xFFFFFFFF) >> shift) & 0xFF
        if e4m3:  # 464..480 round to the NaN pattern: saturate instead
            result = min(result, 0x7E)
    return result | (sign >> 24)
