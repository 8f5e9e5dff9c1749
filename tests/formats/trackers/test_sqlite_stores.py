"""Trackio and MLflow readers against stores written by trackio and mlflow, checked by
each library's own reader (expected_trackio.json, expected_mlflow.json), and read
while a writer in WAL mode appends."""

from __future__ import annotations

import json
import shutil
import sqlite3
import threading
from datetime import datetime

import pytest

from rlstream.formats.trackers.common import merge_steps
from rlstream.formats.trackers.mlflow_files import read_metric_file, run_meta
from rlstream.formats.trackers.sqlite_stores import (
    connect,
    mlflow_runs,
    read_mlflow,
    read_trackio,
    trackio_runs,
)
from tests.formats.trackers.helpers import FIXTURES, enc, expected

TRACKIO = expected("trackio")
MLFLOW = expected("mlflow")


def trackio_shape(rows):
    return [
        {**{k: enc(v) for k, v in r.items() if k not in ("step", "time")}, "step": r["step"]}
        for r in rows
    ]


def test_trackio_matches_trackios_own_reader():
    conn = connect(FIXTURES / "trackio" / "rl-fixture.db")
    assert trackio_runs(conn) == sorted(TRACKIO)
    for run, exp in TRACKIO.items():
        got = read_trackio(conn, run)
        want = [{k: v for k, v in row.items() if k != "timestamp"} for row in exp["logs"]]
        assert trackio_shape(got.rows) == want
        times = [datetime.fromisoformat(row["timestamp"]).timestamp() for row in exp["logs"]]
        assert [r["time"] for r in got.rows] == times
        assert got.info["config"] == exp["config"]
    resumed = merge_steps(read_trackio(conn, "grpo-a").rows)
    assert [r["step"] for r in resumed] == list(range(40))
    assert resumed[35]["train/reward"] == 0.9  # the restart's value wins
    assert resumed[7]["train/loss"] != resumed[7]["train/loss"]  # "NaN" read as NaN


def test_trackio_cursor_reads_each_row_once_in_small_batches():
    conn = connect(FIXTURES / "trackio" / "rl-fixture.db")
    whole = read_trackio(conn, "grpo-a").rows
    rows, cursor = [], 0
    while True:
        got = read_trackio(conn, "grpo-a", cursor, limit=7)
        if not got.rows and got.cursor == cursor:
            break
        rows += got.rows
        cursor = got.cursor
    assert rows == whole


def test_connection_is_read_only(tmp_path):
    db = tmp_path / "p.db"
    shutil.copy(FIXTURES / "trackio" / "rl-fixture.db", db)
    with pytest.raises(sqlite3.OperationalError, match="readonly"):
        connect(db).execute("DELETE FROM metrics")


def test_trackio_read_while_a_wal_writer_appends(tmp_path):
    db = tmp_path / "live.db"
    shutil.copy(FIXTURES / "trackio" / "rl-fixture.db", db)
    writer = sqlite3.connect(db, check_same_thread=False)
    writer.execute("PRAGMA journal_mode=WAL")
    n = 300

    def write():
        for step in range(n):
            writer.execute(
                "INSERT INTO metrics (run_id, timestamp, run_name, step, metrics) VALUES (?,?,?,?,?)",
                ("live", "2026-12-02T10:00:00+00:00", "live", step, json.dumps({"r": step})),
            )
            writer.commit()

    t = threading.Thread(target=write)
    t.start()
    conn = connect(db)
    rows, cursor = [], 0
    while True:
        done = not t.is_alive()  # asked before the read: a read after it sees every commit
        got = read_trackio(conn, "live", cursor, limit=13)
        rows += got.rows
        cursor = got.cursor
        if done and not got.rows:
            break
    t.join()
    assert [r["step"] for r in rows] == list(range(n))
    assert [r["r"] for r in rows] == [float(s) for s in range(n)]


def test_trackio_bad_json_row_is_an_error_with_its_id(tmp_path):
    db = tmp_path / "bad.db"
    shutil.copy(FIXTURES / "trackio" / "rl-fixture.db", db)
    with sqlite3.connect(db) as w:
        cur = w.execute(
            "INSERT INTO metrics (run_id, timestamp, run_name, step, metrics) VALUES (?,?,?,?,?)",
            ("x", "2026-12-02T10:00:00+00:00", "grpo-b", 20, "{not json"),
        )
        bad_id = cur.lastrowid
        w.execute(
            "INSERT INTO metrics (run_id, timestamp, run_name, step, metrics) VALUES (?,?,?,?,?)",
            ("x", "2026-12-02T10:00:01+00:00", "grpo-b", 21, '{"train/reward": 0.2}'),
        )
    got = read_trackio(connect(db), "grpo-b")
    assert [(e.offset, e.reason) for e in got.errors] == [(bad_id, "bad_record")]
    assert got.rows[-1]["step"] == 21 and len(got.rows) == 21


def mlflow_points(rows):
    pts = [
        [r["step"], round(r["time"] * 1000), k, enc(v)]
        for r in rows
        for k, v in r.items()
        if k not in ("step", "time")
    ]
    return sorted(pts, key=lambda p: (p[0], p[2]))


def test_mlflow_sqlite_matches_mlflows_client():
    conn = connect(FIXTURES / "mlflow" / "sqlite" / "mlflow.db")
    runs = {name: (uuid, exp) for uuid, name, exp in mlflow_runs(conn)}
    assert set(runs) == set(MLFLOW["sqlite"])
    for name, want in MLFLOW["sqlite"].items():
        uuid, exp = runs[name]
        got = read_mlflow(conn, uuid)
        assert (uuid, exp) == (want["run_id"], want["experiment_id"])
        assert mlflow_points(got.rows) == want["points"]
        assert got.info == {"run_id": uuid, "name": name, "params": want["params"]}
    half = read_mlflow(conn, runs["grpo-a"][0], limit=40)
    rest = read_mlflow(conn, runs["grpo-a"][0], half.cursor)
    assert mlflow_points(half.rows + rest.rows) == MLFLOW["sqlite"]["grpo-a"]["points"]


def test_mlflow_file_store_matches_mlflows_client():
    root = FIXTURES / "mlflow" / "files" / "mlruns"
    seen = {}
    for meta in root.glob("*/*/meta.yaml"):
        info = run_meta(meta.read_bytes())
        rows = []
        for f in sorted((meta.parent / "metrics").iterdir()):
            got = read_metric_file(f.name, f.read_bytes())
            assert got.errors == [] and got.cursor == f.stat().st_size
            rows += got.rows
        params = (
            {p.name: p.read_text() for p in (meta.parent / "params").glob("*")}
            if (meta.parent / "params").exists()
            else {}
        )
        seen[info["name"]] = (info["run_id"], info["experiment_id"], params, mlflow_points(rows))
    assert set(seen) == set(MLFLOW["files"])
    for name, want in MLFLOW["files"].items():
        assert seen[name] == (want["run_id"], want["experiment_id"], want["params"], want["points"])


def test_mlflow_metric_file_partial_line_waits_and_bad_line_is_reported():
    data = b"1764000000000 0.5 0\n1764000001000 oops 1\n1764000002000 0.7 2\n17640000030"
    got = read_metric_file("reward", data)
    assert [r["step"] for r in got.rows] == [0, 2]
    assert [(e.offset, e.reason) for e in got.errors] == [(20, "bad_record")]
    assert got.cursor == data.rfind(b"\n") + 1
    more = read_metric_file("reward", data[got.cursor :] + b"00 0.8 3\n", got.cursor)
    assert more.rows == [{"step": 3, "time": 1764000003.0, "reward": 0.8}]
