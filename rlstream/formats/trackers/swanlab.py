"""SwanLab (>= 0.8) `run-<id>.swanlab` files: a 7-byte header (`:SWL`, 0xE1D6,
version 2), then the LevelDB-log framing W&B uses, of `swanlab.record.v1.Record`
protobufs with one record per scalar.

`read_swanlab(data, start, final)`: scalar records become rows
`{"step", "time", key: value}` (one key each); the start record gives `info`
(`run_id`, `name`, `project`). Field numbers: swanlab's `record.proto` (Record:
start 10, scalar 13; StartRecord: project 1, name 4, id 10; ScalarRecord: key 1,
step 2, timestamp 4, value 5 {number 1 double}). The config is `files/config.yaml`
beside the log (`{key: {value: ..}}`, read with `config_from_yaml`). A file whose
header is not SwanLab's raises `BadRecord`. The older JSON-lines `backup.swanlab` is
not read.
"""

from __future__ import annotations

import struct
from typing import Any

from rlstream.formats.trackers.common import Read, TrackerError
from rlstream.formats.trackers.framing import leveldb_file
from rlstream.formats.trackers.wire import f64, fields, signed, text

HEADER = struct.pack("<4sHB", b":SWL", 0xE1D6, 2)


def _time(data: bytes) -> float:
    parts = {n: v for n, _, v in fields(data)}
    return signed(parts.get(1, 0)) + parts.get(2, 0) / 1e9


def parse_scalar(data: bytes) -> dict[str, Any] | None:
    key, row = None, {"step": 0, "time": None}
    value = None
    for num, _, v in fields(data):
        if num == 1:
            key = text(v)
        elif num == 2:
            row["step"] = signed(v)
        elif num == 4:
            row["time"] = _time(v)
        elif num == 5:
            value = 0.0  # proto3 omits a zero number
            for n2, wt, v2 in fields(v):
                if n2 == 1 and wt == 1:
                    value = f64(v2)
    if key is None or value is None:
        return None
    row[key] = value
    return row


def read_swanlab(data: bytes, start: int = 0, final: bool = False) -> Read:
    payloads, cursor, errors = leveldb_file(data, start, final, HEADER, "swanlab")
    rows, info = [], {}
    for offset, body in payloads:
        try:
            for num, _, v in fields(body):
                if num == 13:
                    row = parse_scalar(v)
                    if row is not None:
                        rows.append(row)
                elif num == 10:
                    names = {1: "project", 4: "name", 10: "run_id"}
                    info.update({names[n]: text(x) for n, _, x in fields(v) if n in names})
        except ValueError as e:
            errors.append(TrackerError(offset, "bad_record", f"Record does not decode: {e}"))
    return Read(rows, cursor, sorted(errors, key=lambda e: e.offset), info)


def config_from_yaml(data: bytes) -> dict[str, Any]:
    import yaml  # only identity needs it

    doc = yaml.safe_load(data) or {}
    return {k: (v.get("value") if isinstance(v, dict) else v) for k, v in doc.items()}
