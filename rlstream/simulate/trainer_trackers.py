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

`wandb(run, Write)`: verl with `trainer.logger=['wandb']` offline (`_WandbAdapter`:
`wandb.log(data, step=step)`), the metrics dict of `trainer_files.verl`. wandb-core
appends to `wandb/offline-run-<ts>-<id>/run-<id>.wandb` (wandb `sdk/internal/
datastore.py`, `wandb_internal.proto`): a 7-byte header (`:W&B`, u16 0xBEE1, u8 0),
then LevelDB-log chunks in 32 KiB blocks counted from the file's start (u32 CRC, u16
length, u8 type FULL 1 / FIRST 2 / MIDDLE 3 / LAST 4; CRC = `zlib.crc32(data,
zlib.crc32(bytes([type])))`; a block tail under 7 bytes zero-filled) of `Record`s: a
`run` record (17: run_id 1, project 3, display_name 8, start_time 17), then one
`history` record (2) per step, items (1: key 1, value_json 16) for every key and
`_step`, `_runtime`, `_timestamp`, and `step` (2: num 1).

`swanlab(run, Write)`: AReaL with `stats_logger.swanlab` (areal/utils/stats_logger.py:
`swanlab.log(data, step=global_step)`, the step from 0) under AReaL's keys
(`keymap`: `ppo_actor/task_reward/avg`, `ppo_actor/no_eos_ratios/avg`,
`ppo_actor/update/entropy/avg`). SwanLab >= 0.8 appends to
`swanlog/run-<ts>-<id>/run-<id>.swanlab`: header `:SWL`, u16 0xE1D6, u8 2, then the
same LevelDB-log framing of `swanlab.record.v1.Record`s: `start` (10: project 1, name
4, id 10), then one `scalar` record (13: key 1, step 2, timestamp 4, value 5 {number 1
double}) per key. Proto3 leaves zero scalars out.

`trackio(run, Write)` and `mlflow(run, Write)`: TRL's GRPO trainer through
transformers' `TrackioCallback` and `MLflowCallback` (`integrations/
integration_utils.py`), the logs dict of `trainer_files.trl` per `on_log`. Trackio gets
`rewrite_logs(logs)` (`train/<key>`, `eval_<k>` as `eval/<k>`) plus
`train/global_step`, with its own step counter (one per log call, from 0); it inserts
rows into `<project>.db` (project `huggingface`, WAL mode; trackio `sqlite_storage.py`:
`metrics(id, run_id, timestamp, run_name, step, metrics)`, NaN and inf as strings).
MLflow gets the raw keys with `step=state.global_step`; its SQLite store
(`sqlite:///mlflow.db`, mlflow `store/tracking/dbmodels/models.py`) gets a `runs` row,
`params`, and per point a `metrics(key, value, timestamp, run_uuid, step, is_nan)` row
and the `latest_metrics` upsert. Run names are the simulated run folders'; MLflow's
run uuid is the md5 of that name (`run_uuid`).
"""

from __future__ import annotations

import hashlib
import json
import math
import struct
import zlib
from datetime import UTC, datetime
from typing import Any

from rlstream.formats.trackers.wire import masked_crc32c
from rlstream.simulate.trainer_files import _figures, _some, trl, verl

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


# -- LevelDB-log framing (W&B, SwanLab) --------------------------------------------

BLOCK = 32768
FULL, FIRST, MIDDLE, LAST = 1, 2, 3, 4


class _Log:
    """An appended LevelDB-log file: `frame(records)` returns the bytes that append
    them, chunked across 32 KiB blocks counted from the file's first byte."""

    def __init__(self, header: bytes) -> None:
        self.pos = 0
        self.header = header

    def frame(self, records: list[bytes]) -> bytes:
        out = bytearray()
        if self.pos == 0:
            out += self.header
            self.pos = len(self.header)
        for rec in records:
            first = True
            while True:
                left = BLOCK - self.pos % BLOCK
                if left < 7:
                    out += bytes(left)
                    self.pos += left
                    continue
                part, rec = rec[: left - 7], rec[left - 7 :]
                last = not rec
                kind = (FULL if last else FIRST) if first else (LAST if last else MIDDLE)
                crc = zlib.crc32(part, zlib.crc32(bytes([kind])))
                out += struct.pack("<IHB", crc, len(part), kind) + part
                self.pos += 7 + len(part)
                first = False
                if last:
                    break
        return bytes(out)


def _timestamp(t: float) -> bytes:
    secs = math.floor(t)
    nanos = min(round((t - secs) * 1e9), 999_999_999)
    return _field(1, 0, _varint(secs)) + (_field(2, 0, _varint(nanos)) if nanos else b"")


def _numbers(d: dict[str, Any]) -> dict[str, float]:
    return {k: v for k, v in d.items() if isinstance(v, int | float) and not isinstance(v, bool)}


def _verl_steps(run: Any, Write: Any) -> list[tuple[int, float, dict[str, float]]]:
    """(step, time, metrics dict) per step as verl's `Tracking.log` gets them."""
    times = [sd.time for sd in run.steps]
    out = []
    for batch in verl(run, Write):
        for w in batch:
            if w.path == "metrics.jsonl":
                for line in w.data.splitlines():
                    obj = json.loads(line)
                    t = times[min(obj["step"] - 1, len(times) - 1)] or 0.0
                    out.append((obj["step"], t, _numbers(obj["data"])))
    return out


def wandb(run: Any, Write: Any) -> list[list[Any]]:
    rid = run.name
    start = run.created_at or 0.0
    path = f"wandb/offline-run-20261202_000000-{rid}/run-{rid}.wandb"
    log = _Log(struct.pack("<4sHB", b":W&B", 0xBEE1, 0))
    rec = (
        _field(1, 2, rid.encode())
        + _field(3, 2, b"verl")
        + _field(8, 2, run.name.encode())
        + _field(17, 2, _timestamp(start))
    )
    out: list[list[Any]] = [[Write(path, log.frame([_field(17, 2, rec)]), True)]]
    for step, t, data in _verl_steps(run, Write):
        items = {**data, "_step": step, "_runtime": max(t - start, 0.0), "_timestamp": t}
        hist = b"".join(
            _field(1, 2, _field(1, 2, k.encode()) + _field(16, 2, json.dumps(v).encode()))
            for k, v in items.items()
        ) + _field(2, 2, _field(1, 0, _varint(step)))
        out.append([Write(path, log.frame([_field(2, 2, hist)]), True)])
    return out


def _areal(sd: Any) -> dict[str, float]:
    f = _figures(sd)
    return _some(
        {
            "ppo_actor/task_reward/avg": f["reward_all"],
            "ppo_actor/no_eos_ratios/avg": f["truncated"],
            "ppo_actor/update/entropy/avg": f["entropy"],
        }
    )


def swanlab(run: Any, Write: Any) -> list[list[Any]]:
    rid = run.name
    path = f"swanlog/run-20261202_000000-{rid}/run-{rid}.swanlab"
    log = _Log(struct.pack("<4sHB", b":SWL", 0xE1D6, 2))
    start = _field(1, 2, b"areal") + _field(4, 2, run.name.encode()) + _field(10, 2, rid.encode())
    out: list[list[Any]] = [[Write(path, log.frame([_field(10, 2, start)]), True)]]
    for sd in run.steps:
        t = sd.time or 0.0
        recs = []
        for k, v in _areal(sd).items():
            value = _field(1, 1, struct.pack("<d", v)) if v or math.copysign(1, v) < 0 else b""
            step = _field(2, 0, _varint(sd.step)) if sd.step else b""
            scalar = (
                _field(1, 2, k.encode()) + step + _field(4, 2, _timestamp(t)) + _field(5, 2, value)
            )
            recs.append(_field(13, 2, scalar))
        out.append([Write(path, log.frame(recs), True)])
    return out


# -- SQLite stores (Trackio, MLflow) -----------------------------------------------


def _trl_logs(run: Any, Write: Any) -> list[tuple[int, float, dict[str, float]]]:
    """(global_step, time, logs) per `on_log` call of TRL's trainer: its log history
    (`trainer_files.trl`), the end-of-training summary only for a finished run."""
    from dataclasses import replace

    done = replace(run, finished=True)
    state = [w for b in trl(done, Write) for w in b if w.path == "trainer_state.json"][-1]
    history = json.loads(state.data)["log_history"]
    if not run.finished:
        history = history[:-1]
    times = [sd.time or 0.0 for sd in run.steps] or [0.0]
    return [(h["step"], times[min(h["step"], len(times)) - 1], _numbers(h)) for h in history]


def _iso(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).isoformat()


def _json_value(v: float) -> float | str:
    if math.isnan(v):
        return "NaN"
    return v if math.isfinite(v) else ("Infinity" if v > 0 else "-Infinity")


TRACKIO_SCHEMA = (
    "PRAGMA journal_mode = WAL",
    "CREATE TABLE IF NOT EXISTS metrics (id INTEGER PRIMARY KEY AUTOINCREMENT, "
    "run_id TEXT NOT NULL, timestamp TEXT NOT NULL, run_name TEXT NOT NULL, "
    "step INTEGER NOT NULL, metrics TEXT NOT NULL, log_id TEXT, space_id TEXT)",
    "CREATE TABLE IF NOT EXISTS configs (id INTEGER PRIMARY KEY AUTOINCREMENT, "
    "run_id TEXT NOT NULL, run_name TEXT NOT NULL, config TEXT NOT NULL, "
    "created_at TEXT NOT NULL, UNIQUE(run_id))",
    "CREATE INDEX IF NOT EXISTS idx_metrics_run_step ON metrics(run_id, step)",
)


def trackio(run: Any, Write: Any) -> list[list[Any]]:
    db, rid = "huggingface.db", run_uuid(run.name)[:12]
    cfg = json.dumps({"max_steps": len(run.steps), "learning_rate": 1e-6})
    sql = [(s, ()) for s in TRACKIO_SCHEMA]
    sql.append(
        (
            "INSERT INTO configs (run_id, run_name, config, created_at) VALUES (?, ?, ?, ?)",
            (rid, run.name, cfg, _iso(run.created_at or 0.0)),
        )
    )
    out: list[list[Any]] = [[Write(db, b"", sql=tuple(sql))]]
    for counter, (gs, t, logs) in enumerate(_trl_logs(run, Write)):
        row = {
            (f"eval/{k[5:]}" if k.startswith("eval_") else f"train/{k}"): _json_value(v)
            for k, v in logs.items()
            if k != "step"
        }
        row["train/global_step"] = gs
        ins = (
            "INSERT INTO metrics (run_id, timestamp, run_name, step, metrics) "
            "VALUES (?, ?, ?, ?, ?)",
            (rid, _iso(t), run.name, counter, json.dumps(row)),
        )
        out.append([Write(db, b"", sql=(ins,))])
    return out


def run_uuid(name: str) -> str:
    """The MLflow run uuid (32 hex digits) of a simulated run."""
    return hashlib.md5(name.encode()).hexdigest()


MLFLOW_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS experiments (experiment_id INTEGER NOT NULL, "
    "name VARCHAR(256) NOT NULL, artifact_location VARCHAR(256), lifecycle_stage "
    "VARCHAR(32), creation_time BIGINT, last_update_time BIGINT, workspace VARCHAR(63) "
    "DEFAULT 'default' NOT NULL, CONSTRAINT experiment_pk PRIMARY KEY (experiment_id))",
    "CREATE TABLE IF NOT EXISTS runs (run_uuid VARCHAR(32) NOT NULL, name VARCHAR(250), "
    "source_type VARCHAR(20), source_name VARCHAR(500), entry_point_name VARCHAR(50), "
    "user_id VARCHAR(256), status VARCHAR(9), start_time BIGINT, end_time BIGINT, "
    "source_version VARCHAR(50), lifecycle_stage VARCHAR(20), artifact_uri VARCHAR(200), "
    "experiment_id INTEGER, deleted_time BIGINT, CONSTRAINT run_pk PRIMARY KEY (run_uuid))",
    'CREATE TABLE IF NOT EXISTS metrics ("key" VARCHAR(250) NOT NULL, value FLOAT NOT NULL, '
    "timestamp BIGINT NOT NULL, run_uuid VARCHAR(32) NOT NULL, step BIGINT DEFAULT '0' "
    "NOT NULL, is_nan BOOLEAN DEFAULT '0' NOT NULL, CONSTRAINT metric_pk PRIMARY KEY "
    '("key", timestamp, step, run_uuid, value, is_nan))',
    'CREATE TABLE IF NOT EXISTS latest_metrics ("key" VARCHAR(250) NOT NULL, value FLOAT '
    "NOT NULL, timestamp BIGINT, step BIGINT NOT NULL, is_nan BOOLEAN NOT NULL, run_uuid "
    'VARCHAR(32) NOT NULL, CONSTRAINT latest_metric_pk PRIMARY KEY ("key", run_uuid))',
    'CREATE TABLE IF NOT EXISTS params ("key" VARCHAR(250) NOT NULL, value VARCHAR(8000) '
    'NOT NULL, run_uuid VARCHAR(32) NOT NULL, CONSTRAINT param_pk PRIMARY KEY ("key", run_uuid))',
    'CREATE TABLE IF NOT EXISTS tags ("key" VARCHAR(250) NOT NULL, value VARCHAR(8000), '
    'run_uuid VARCHAR(32) NOT NULL, CONSTRAINT tag_pk PRIMARY KEY ("key", run_uuid))',
)


def mlflow(run: Any, Write: Any) -> list[list[Any]]:
    db, rid = "mlflow.db", run_uuid(run.name)
    ms = int((run.created_at or 0.0) * 1000)
    sql = [(s, ()) for s in MLFLOW_SCHEMA]
    sql += [
        (
            "INSERT OR IGNORE INTO experiments VALUES (0, 'Default', 'mlruns/0', 'active', ?, ?, "
            "'default')",
            (ms, ms),
        ),
        (
            "INSERT INTO runs VALUES (?, ?, 'UNKNOWN', '', '', 'sim', 'RUNNING', ?, NULL, '', "
            "'active', ?, 0, NULL)",
            (rid, run.name, ms, f"mlruns/0/{rid}/artifacts"),
        ),
        ("INSERT INTO tags VALUES ('mlflow.runName', ?, ?)", (run.name, rid)),
        ("INSERT INTO params VALUES ('max_steps', ?, ?)", (str(len(run.steps)), rid)),
        ("INSERT INTO params VALUES ('learning_rate', '1e-06', ?)", (rid,)),
    ]
    out: list[list[Any]] = [[Write(db, b"", sql=tuple(sql))]]
    last = ms
    for gs, t, logs in _trl_logs(run, Write):
        ts = max(int(t * 1000), last)
        last = ts
        batch = []
        for k, v in logs.items():
            if k == "step":
                continue
            nan = math.isnan(v)
            val = 0.0 if nan else max(min(v, 1.7976931348623157e308), -1.7976931348623157e308)
            point = (k, val, ts, rid, gs, int(nan))
            batch.append(("INSERT OR IGNORE INTO metrics VALUES (?, ?, ?, ?, ?, ?)", point))
            batch.append(
                (
                    "INSERT INTO latest_metrics VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (key, "
                    "run_uuid) DO UPDATE SET value = excluded.value, timestamp = "
                    "excluded.timestamp, step = excluded.step, is_nan = excluded.is_nan "
                    "WHERE excluded.step >= latest_metrics.step",
                    (k, val, ts, gs, int(nan), rid),
                )
            )
        out.append([Write(db, b"", sql=tuple(batch))])
    if run.finished:
        end = ("UPDATE runs SET status = 'FINISHED', end_time = ? WHERE run_uuid = ?", (last, rid))
        out.append([Write(db, b"", sql=(end,))])
    return out
