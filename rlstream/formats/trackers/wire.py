"""A minimal protobuf wire-format decoder and CRC32C, enough for trackers' records.

`fields(data)` yields `(number, wire_type, value)`: an int for varints, bytes for
length-delimited fields, raw 4 or 8 bytes for fixed32/fixed64. Malformed input raises
`ValueError`. `crc32c` is the Castagnoli CRC (table-driven, pure Python) and
`masked_crc32c` the TFRecord masking of it.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator


def _table() -> list[int]:
    out = []
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        out.append(c)
    return out


_T = _table()


def crc32c(data: bytes) -> int:
    c = 0xFFFFFFFF
    t = _T
    for b in data:
        c = t[(c ^ b) & 0xFF] ^ (c >> 8)
    return c ^ 0xFFFFFFFF


def masked_crc32c(data: bytes) -> int:
    c = crc32c(data)
    return (((c >> 15) | (c << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def varint(data: bytes, i: int) -> tuple[int, int]:
    shift = result = 0
    while True:
        if i >= len(data) or shift > 63:
            raise ValueError("truncated varint")
        b = data[i]
        i += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, i
        shift += 7


def fields(data: bytes) -> Iterator[tuple[int, int, int | bytes]]:
    i, n = 0, len(data)
    while i < n:
        key, i = varint(data, i)
        num, wt = key >> 3, key & 7
        if wt == 0:
            v, i = varint(data, i)
            yield num, wt, v
        elif wt == 2:
            size, i = varint(data, i)
            if i + size > n:
                raise ValueError("truncated field")
            yield num, wt, data[i : i + size]
            i += size
        elif wt in (1, 5):
            size = 8 if wt == 1 else 4
            if i + size > n:
                raise ValueError("truncated fixed field")
            yield num, wt, data[i : i + size]
            i += size
        else:
            raise ValueError(f"unsupported wire type {wt}")


def f64(raw: int | bytes) -> float:
    return struct.unpack("<d", raw)[0]  # type: ignore[arg-type]


def f32(raw: int | bytes) -> float:
    return struct.unpack("<f", raw)[0]  # type: ignore[arg-type]


def signed(v: int | bytes) -> int:
    """An int64 varint as signed (negative values are 10-byte two's complement)."""
    assert isinstance(v, int)
    return v - (1 << 64) if v >= 1 << 63 else v


def zigzag(v: int | bytes) -> int:
    assert isinstance(v, int)
    return (v >> 1) ^ -(v & 1)


def text(v: int | bytes) -> str:
    assert isinstance(v, bytes)
    return v.decode("utf-8", errors="replace")
