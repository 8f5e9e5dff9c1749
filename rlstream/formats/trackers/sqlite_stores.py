"""Trackio and MLflow SQLite stores, read through a cursor on the row id.

`connect(path)` opens the database read-only (`file:...?mode=ro` URI): in WAL mode a
reader sees the last committed transaction and never blocks or corrupts the writer.
`read_trackio(conn, run_name, after)` reads table `metrics(id, run_id, timestamp,
run_name, step, metrics JSON)` rows with `id > after`: rows `{"step", "time", key:
value}` (NaN and +-inf are the strings "NaN", "Infinity", "-Infinity"; the timestamp
is ISO 8601); `info` has the run's config (table `configs`). `read_mlflow(conn,
run_uuid, after)` reads `metrics(key, value, timestamp, run_uuid, step, is_nan)`
through its rowid: one row per point (NaN is stored as 0.0 with `is_nan`; MLflow
stores +-inf as +-`sys.float_info.max` and it is returned as stored); `info` has the
run name and params. Rows whose JSON does not decode become `TrackerError`s with the
row id as offset. The cursor is the last row id read.
"""

from __future__ import annotations

import json
import math
import sqlite3
from datetime import datetime
from pathlib import Path
from typing import Any

from rlstream.formats.trackers.common import Read, TrackerError, number


def connect(path: str | Path) -> sqlite3.Connection:
    uri = Path(path).resolve().as_uri() + "?mode=ro"
    return sqlite3.connect(uri, uri=True, check_same_thread=False)


def _iso(ts: str) -> float | None:
    try:
        return datetime.fromisoformat(ts).timestamp()
    except (TypeError, ValueError):
        return None


def trackio_runs(conn: sqlite3.Connection) -> list[str]:
    return [r[0] for r in conn.execute("SELECT DISTINCT run_name FROM metrics ORDER BY run_name")]


def read_trackio(
    conn: sqlite3.Connection, run_name: str, after: int = 0, limit: int = 10_000
) -> Read:
    rows, errors = [], []
    cursor = after
    got = conn.execute(
        "SELECT id, timestamp, step, metrics FROM metrics WHERE run_name = ? AND id > ? "
        "ORDER BY id LIMIT ?",
        (run_name, after, limit),
    ).fetchall()
    for rid, ts, step, blob in got:
        cursor = rid
        try:
            metrics = json.loads(blob)
            if not isinstance(metrics, dict):
                raise ValueError("metrics is not an object")
        except ValueError as e:
            errors.append(TrackerError(rid, "bad_record", f"metrics JSON: {e}"))
            continue
        row: dict[str, Any] = {"step": int(step), "time": _iso(ts)}
        for k, v in metrics.items():
            x = number(v)
            if x is not None:
                row[k] = x
        rows.append(row)
    info: dict[str, Any] = {}
    if after == 0:
        try:
            cfg = conn.execute(
                "SELECT run_id, config FROM configs WHERE run_name = ? ORDER BY id DESC LIMIT 1",
                (run_name,),
            ).fetchone()
        except sqlite3.OperationalError:
            cfg = None
        if cfg:
            info = {"run_id": cfg[0], "name": run_name, "config": json.loads(cfg[1])}
    return Read(rows, cursor, errors, info)


def mlflow_runs(conn: sqlite3.Connection) -> list[tuple[str, str, str]]:
    """(run_uuid, name, experiment_id) of every run."""
    q = "SELECT run_uuid, name, experiment_id FROM runs ORDER BY start_time, run_uuid"
    return [(a, b, str(c)) for a, b, c in conn.execute(q)]


def read_mlflow(
    conn: sqlite3.Connection, run_uuid: str, after: int = 0, limit: int = 10_000
) -> Read:
    got = conn.execute(
        "SELECT rowid, key, value, timestamp, step, is_nan FROM metrics "
        "WHERE run_uuid = ? AND rowid > ? ORDER BY rowid LIMIT ?",
        (run_uuid, after, limit),
    ).fetchall()
    rows = [
        {"step": int(step), "time": ts / 1000.0, key: math.nan if is_nan else float(value)}
        for _, key, value, ts, step, is_nan in got
    ]
    info: dict[str, Any] = {}
    if after == 0:
        name = conn.execute("SELECT name FROM runs WHERE run_uuid = ?", (run_uuid,)).fetchone()
        params = conn.execute("SELECT key, value FROM params WHERE run_uuid = ?", (run_uuid,))
        info = {"run_id": run_uuid, "name": name[0] if name else None, "params": dict(params)}
    return Read(rows, got[-1][0] if got else after, [], info)
