"""TensorBoard `events.out.tfevents.*` files: TFRecord-framed `Event` protobufs.

`read_events(data, start, final)` returns one row per `Event` that carries scalars:
`{"step": Event.step, "time": Event.wall_time, tag: value}`. A scalar is a
`Summary.Value.simple_value` (float32, tensorboardX and TF1) or a rank-0 numeric
tensor whose plugin is `scalars` or unnamed (TF2 and `tensorboard.summary.Writer`
write the plugin metadata on the first value of a tag only). Histograms, images,
text and other plugins are skipped. Field numbers: tensorboard's `event.proto`,
`summary.proto`, `tensor.proto`.
"""

from __future__ import annotations

import struct
from typing import Any

from rlstream.formats.trackers.common import Read, TrackerError
from rlstream.formats.trackers.framing import tfrecords
from rlstream.formats.trackers.wire import f32, f64, fields, signed, text, varint

# DataType -> (struct code, size) of tensorboard's types.proto.
_DTYPES = {1: ("f", 4), 2: ("d", 8), 3: ("i", 4), 9: ("q", 8), 19: ("e", 2)}


def _packed(raw: bytes, wt: int, code: str) -> list[float]:
    if wt == 2 and code in "fd":
        size = 4 if code == "f" else 8
        return list(struct.unpack(f"<{len(raw) // size}{code}", raw))
    if wt == 2:  # packed varints
        out, i = [], 0
        while i < len(raw):
            v, i = varint(raw, i)
            out.append(signed(v))
        return out
    return [f32(raw) if code == "f" else f64(raw)] if wt in (1, 5) else [signed(raw)]


def _tensor(data: bytes) -> float | None:
    dtype, shape, content, vals = 0, b"", b"", []
    for num, wt, v in fields(data):
        if num == 1:
            dtype = v
        elif num == 2:
            shape = v
        elif num == 4:
            content = v
        elif num in (5, 6, 7, 10, 13):
            code = {5: "f", 6: "d", 7: "i", 10: "q", 13: "e"}[num]
            if num == 13:  # half_val: float16 bits in int32s
                vals += [
                    struct.unpack("<e", struct.pack("<H", int(x) & 0xFFFF))[0]
                    for x in _packed(v, wt, "i")
                ]
            else:
                vals += _packed(v, wt, code)
    if dtype not in _DTYPES or any(num == 2 for num, _, _ in fields(shape)):
        return None  # not numeric, or not rank 0
    code, size = _DTYPES[dtype]
    if content:
        return float(struct.unpack_from(f"<{code}", content)[0]) if len(content) >= size else None
    return float(vals[0]) if len(vals) == 1 else None


def _value(data: bytes) -> tuple[str, float] | None:
    tag, simple, tensor, plugin = "", None, None, ""
    for num, wt, v in fields(data):
        if num == 1:
            tag = text(v)
        elif num == 2 and wt == 5:
            simple = f32(v)
        elif num == 8:
            tensor = v
        elif num == 9:
            for n2, _, v2 in fields(v):
                if n2 == 1:
                    for n3, _, v3 in fields(v2):
                        if n3 == 1:
                            plugin = text(v3)
    if simple is not None:
        return tag, simple
    if tensor is not None and plugin in ("", "scalars"):
        x = _tensor(tensor)
        if x is not None:
            return tag, x
    return None


def parse_event(data: bytes) -> dict[str, Any] | None:
    """The row of one serialized `Event`, or None when it holds no scalar."""
    row: dict[str, Any] = {"step": 0, "time": None}
    found = False
    for num, wt, v in fields(data):
        if num == 1 and wt == 1:
            row["time"] = f64(v)
        elif num == 2 and wt == 0:
            row["step"] = signed(v)
        elif num == 5:
            for n2, _, v2 in fields(v):
                if n2 == 1:
                    got = _value(v2)
                    if got is not None:
                        row[got[0]] = got[1]
                        found = True
    return row if found else None


def read_events(data: bytes, start: int = 0, final: bool = False) -> Read:
    payloads, cursor, errors = tfrecords(data, start, final)
    rows = []
    for offset, body in payloads:
        try:
            row = parse_event(body)
        except ValueError as e:
            errors.append(TrackerError(offset, "bad_record", f"Event does not decode: {e}"))
            continue
        if row is not None:
            rows.append(row)
    return Read(rows, cursor, sorted(errors, key=lambda e: e.offset))
