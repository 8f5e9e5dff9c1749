"""Simulated runs as a trainer logs them through a tracker: verl to TensorBoard.

`tensorboard(run, Write)`: verl's `Tracking` with `trainer.logger=['tensorboard']`
(volcengine/verl `verl/utils/tracking.py`, `_TensorboardAdapter.log`: `add_scalar(key,
value, step)` for every key of the step's metrics dict, one `SummaryWriter` in
`$TENSORBOARD_DIR`, default `tensorboard_log/<project>/<experiment>`). The metrics
dict is the one verl's file logger gets (`trainer_files.verl`: same keys, same step).
torch's `SummaryWriter` writes `events.out.tfevents.<time>.<host>.<pid>.<n>`: a first
`Event{wall_time, file_version: "brain.Event:2"}`, then one `Event{wall_time, step,
summary{value{tag, simple_value}}}` per scalar (float32), each TFRecord-framed (u64
length, masked CRC32C of it, data, masked CRC32C of the data; tensorboard's
`event.proto`, `summary.proto`, `record_writer`). A tracker keeps no rollouts: verl's
per-step dumps are not written.
"""

from __future__ import annotations

import json
import struct
from typing import Any

from rlstream.formats.trackers.wire import masked_crc32c
from rlstream.simulate.trainer_files import verl

EVENTS = "events.out.tfevents.1764000000.sim.1.0"


def _varint(n: int) -> bytes:
    out = bytearray()
    n &= (1 << 64) - 1
    while True:
        b = n & 0x7F
        n >>= 7
        out.append(b | (0x80 if n else 0))
        if not n:
            return bytes(out)


def _field(num: int, wt: int, payload: bytes) -> bytes:
    head = _varint(num << 3 | wt)
    return head + (_varint(len(payload)) + payload if wt == 2 else payload)


def _record(data: bytes) -> bytes:
    length = struct.pack("<Q", len(data))
    crc = struct.pack("<I", masked_crc32c(length))
    return length + crc + data + struct.pack("<I", masked_crc32c(data))


def _event(wall_time: float, step: int | None = None, tag: str = "", value: float = 0.0):
    out = _field(1, 1, struct.pack("<d", wall_time))
    if step is None:
        return _record(out + _field(3, 2, b"brain.Event:2"))
    val = _field(1, 2, tag.encode()) + _field(2, 5, struct.pack("<f", value))
    return _record(out + _field(2, 0, _varint(step)) + _field(5, 2, _field(1, 2, val)))


def tensorboard(run: Any, Write: Any) -> list[list[Any]]:
    out: list[list[Any]] = [[Write(EVENTS, _event(run.created_at or 0.0), True)]]
    times = [sd.time for sd in run.steps]
    for batch in verl(run, Write):
        for w in batch:
            if w.path != "metrics.jsonl":
                continue  # rollout dumps: not a tracker's
            for line in w.data.splitlines():
                obj = json.loads(line)
                step = obj["step"]
                t = times[min(step - 1, len(times) - 1)] or 0.0
                data = b"".join(
                    _event(t, step, k, float(v))
                    for k, v in obj["data"].items()
                    if isinstance(v, int | float) and not isinstance(v, bool)
                )
                out.append([Write(EVENTS, data, True)])
    return out
