"""W&B `run-<id>.wandb` files: a 7-byte header (`:W&B`, 0xBEE1, version 0), then
LevelDB-log framing (`framing.leveldb_records`) of `wandb_internal.Record` protobufs.

`read_wandb(data, start, final)`: history records become rows `{"step": _step,
"time": _timestamp, key: value}` (`_runtime` kept as a key; a key is `key`, or
`nested_key` joined by "/"; values from `value_json` or the typed `number`/`integer`
fields; non-numeric values skipped); the run record gives `info` (`run_id`, `name`,
`project`, `config`, `start_time`). Field numbers: wandb's `wandb_internal.proto`
(Record: history 2, run 17; HistoryItem: key 1, nested_key 2, integer 5 (sint64),
number 6, value_json 16; RunRecord: run_id 1, project 3, config 4, display_name 8,
start_time 17). A file whose header is not W&B's raises `BadRecord`.
"""

from __future__ import annotations

import json
import struct
from typing import Any

from rlstream.formats.trackers.common import Read, TrackerError, number
from rlstream.formats.trackers.framing import leveldb_file
from rlstream.formats.trackers.wire import f64, fields, signed, text, zigzag

HEADER = struct.pack("<4sHB", b":W&B", 0xBEE1, 0)


def _item(data: bytes) -> tuple[str, Any]:
    key, nested, value = "", [], None
    for num, wt, v in fields(data):
        if num == 1:
            key = text(v)
        elif num == 2:
            nested.append(text(v))
        elif num == 5:
            value = zigzag(v)
        elif num == 6 and wt == 1:
            value = f64(v)
        elif num in (8, 16):
            value = json.loads(text(v))
    return key or "/".join(nested), value


def _flat(key: str, value: Any, row: dict[str, Any]) -> None:
    if isinstance(value, dict) and "_type" not in value:
        for k, v in value.items():
            _flat(f"{key}/{k}", v, row)
        return
    x = number(value)
    if x is not None:
        row[key] = x


def parse_history(data: bytes) -> dict[str, Any]:
    items: dict[str, Any] = {}
    step = None
    for num, _, v in fields(data):
        if num == 1:
            k, val = _item(v)
            _flat(k, val, items)
        elif num == 2:
            for n2, _, v2 in fields(v):
                if n2 == 1:
                    step = signed(v2)
    row: dict[str, Any] = {"step": int(items.pop("_step", step if step is not None else 0))}
    row["time"] = items.pop("_timestamp", None)
    row.update(items)
    return row


def parse_run(data: bytes) -> dict[str, Any]:
    info: dict[str, Any] = {"config": {}}
    for num, _, v in fields(data):
        if num == 1:
            info["run_id"] = text(v)
        elif num == 3:
            info["project"] = text(v)
        elif num == 8:
            info["name"] = text(v)
        elif num == 4:
            for n2, _, v2 in fields(v):
                if n2 == 1:
                    k, val = _item(v2)
                    info["config"][k] = val
        elif num == 17:
            secs = dict((n, x) for n, _, x in fields(v))
            info["start_time"] = signed(secs.get(1, 0)) + secs.get(2, 0) / 1e9
    return info


def read_wandb(data: bytes, start: int = 0, final: bool = False) -> Read:
    payloads, cursor, errors = leveldb_file(data, start, final, HEADER, "wandb")
    rows, info = [], {}
    for offset, body in payloads:
        try:
            for num, _, v in fields(body):
                if num == 2:
                    rows.append(parse_history(v))
                elif num == 17:
                    info.update(parse_run(v))
        except (ValueError, TypeError) as e:
            errors.append(TrackerError(offset, "bad_record", f"Record does not decode: {e}"))
    return Read(rows, cursor, sorted(errors, key=lambda e: e.offset), info)
