"""`simulate --format wandb|swanlab|trackio|mlflow` read back as the same run written in
the trainer's own file format: verl to W&B equals verl's file logger, TRL to Trackio and
to MLflow equal TRL's trainer_state.json, AReaL to SwanLab carries the figures verl's
file logger reports for the same steps (AReaL counts steps from 0). The stores are also
read with sqlite3 alone (Trackio's and MLflow's documented tables), and the W&B and
SwanLab logs are de-framed here from the documented LevelDB-log layout and their
records decoded by the protobuf library (`google.protobuf`, unknown fields)."""

from __future__ import annotations

import json
import sqlite3
import struct
import zlib

import pytest
from google.protobuf import empty_pb2
from google.protobuf.unknown_fields import UnknownFieldSet

from rlstream.pipeline.local import analyze_local
from rlstream.simulate.trainer_trackers import run_uuid
from tests.formats.trainer_runs import sim_runs, table, trainer_run

COLUMNS = (
    "reported_reward_mean_with_unusable",
    "reported_completion_len_mean",
    "reported_truncated_frac",
    "reported_entropy_estimate",
    "reported_mismatch_kl",
    "reported_mismatch_ess",
)
AREAL = ("reported_reward_mean_with_unusable", "reported_truncated_frac")


@pytest.fixture(scope="module")
def sim(tmp_path_factory):
    return sim_runs(tmp_path_factory.mktemp("sim"), steps=6)


def _analyzed(sim, tmp, fmt):
    trainer_run(sim, tmp / fmt / "r1", fmt)
    (state,) = analyze_local([str(tmp / fmt)], str(tmp / f"out_{fmt}"))
    assert table(tmp / f"out_{fmt}", "quarantine") == []
    return state, table(tmp / f"out_{fmt}", "steps", "order by step")


def _same(a, b, columns, rel):
    for c in columns:
        assert (a[c] is None) == (b[c] is None), c
        if b[c] is not None:
            assert a[c] == pytest.approx(b[c], rel=rel, abs=1e-30), c


@pytest.mark.parametrize(
    ("fmt", "native", "trainer"),
    [("wandb", "verl", "verl"), ("trackio", "trl", "trl"), ("mlflow", "trl", "trl")],
)
def test_tracker_run_equals_the_trainers_own_files(sim, tmp_path, fmt, native, trainer):
    state, got = _analyzed(sim, tmp_path, fmt)
    _, want = _analyzed(sim, tmp_path, native)
    assert (state.format, state.trainer) == (fmt, trainer)
    assert [r["step"] for r in got] == [r["step"] for r in want] == [1, 2, 3, 4, 5, 6]
    for a, b in zip(got, want, strict=True):
        _same(a, b, COLUMNS, 1e-12)
        assert dict(a["reported_eval"]) == pytest.approx(dict(b["reported_eval"]), rel=1e-12)
    assert any(dict(r["reported_eval"]) for r in want)  # a held-out score was compared


def test_swanlab_areal_run_carries_verls_figures_from_step_0(sim, tmp_path):
    state, got = _analyzed(sim, tmp_path, "swanlab")
    _, want = _analyzed(sim, tmp_path, "verl")
    assert (state.format, state.trainer) == ("swanlab", "areal")
    assert [r["step"] for r in got] == [r["step"] - 1 for r in want] == [0, 1, 2, 3, 4, 5]
    for a, b in zip(got, want, strict=True):
        _same(a, b, (*AREAL, "reported_entropy_estimate"), 1e-12)
        assert a["reported_completion_len_mean"] is None  # AReaL's length key is not mapped


def test_trackio_store_read_with_sqlite3(sim, tmp_path):
    trainer_run(sim, tmp_path / "t", "trackio")
    _, trl = _analyzed(sim, tmp_path, "trl")
    db = sqlite3.connect(tmp_path / "t" / "huggingface.db")
    assert db.execute("PRAGMA journal_mode").fetchone() == ("wal",)
    rows = db.execute("SELECT run_name, step, metrics FROM metrics ORDER BY id").fetchall()
    assert {r[0] for r in rows} == {"run-000-healthy"}
    assert [r[1] for r in rows] == list(range(len(rows)))  # Trackio's own counter
    logs = [json.loads(r[2]) for r in rows]
    train = [m for m in logs if "train/reward" in m]
    assert [m["train/global_step"] for m in train] == [1, 2, 3, 4, 5, 6]
    for m, r in zip(train, trl, strict=True):
        assert m["train/reward"] == r["reported_reward_mean_with_unusable"]
        assert m["train/completions/clipped_ratio"] == r["reported_truncated_frac"]
        assert m["train/entropy"] == r["reported_entropy_estimate"]
    evals = [m for m in logs if any(k.startswith("eval/") for k in m)]
    assert [(m["train/global_step"], m["eval/reward"]) for m in evals] == [
        (r["step"], dict(r["reported_eval"])["reward"]) for r in trl if dict(r["reported_eval"])
    ]


def test_mlflow_store_read_with_sqlite3(sim, tmp_path):
    trainer_run(sim, tmp_path / "m", "mlflow")
    _, trl = _analyzed(sim, tmp_path, "trl")
    db = sqlite3.connect(tmp_path / "m" / "mlflow.db")
    rid = run_uuid("run-000-healthy")
    assert db.execute("SELECT run_uuid, name, status FROM runs").fetchall() == [
        (rid, "run-000-healthy", "FINISHED")
    ]
    pts = db.execute(
        "SELECT step, value FROM metrics WHERE key = 'reward' AND is_nan = 0 ORDER BY step"
    ).fetchall()
    assert pts == [(r["step"], r["reported_reward_mean_with_unusable"]) for r in trl]
    latest = db.execute("SELECT step, value FROM latest_metrics WHERE key = 'reward'").fetchone()
    assert latest == pts[-1]


def _deframe(data: bytes, header: bytes) -> list[bytes]:
    """LevelDB-log records after a 7-byte header: 32 KiB blocks from the file's start,
    chunks u32 crc32 (seeded with the type byte), u16 length, u8 type."""
    assert data[:7] == header
    out, parts, i = [], b"", 7
    while i < len(data):
        left = 32768 - i % 32768
        if left < 7:
            assert data[i : i + left] == bytes(left)
            i += left
            continue
        crc, n, kind = struct.unpack_from("<IHB", data, i)
        body = data[i + 7 : i + 7 + n]
        assert zlib.crc32(body, zlib.crc32(bytes([kind]))) == crc
        i += 7 + n
        parts += body
        if kind in (1, 4):
            out.append(parts)
            parts = b""
    assert parts == b"" and i == len(data)
    return out


def _fields(data: bytes) -> list:
    msg = empty_pb2.Empty()
    msg.ParseFromString(data)
    return list(UnknownFieldSet(msg))


def test_wandb_log_deframed_and_decoded_by_protobuf(tmp_path_factory, tmp_path):
    sim = sim_runs(tmp_path_factory.mktemp("long"), steps=140)
    trainer_run(sim, tmp_path / "w", "wandb")
    trainer_run(sim, tmp_path / "v", "verl")
    (log,) = (tmp_path / "w").rglob("run-*.wandb")
    data = log.read_bytes()
    assert len(data) > 2 * 32768  # records cross block boundaries
    records = _deframe(data, struct.pack("<4sHB", b":W&B", 0xBEE1, 0))
    verl = [json.loads(line) for line in (tmp_path / "v" / "metrics.jsonl").read_bytes().split()]
    assert [f.field_number for f in _fields(records[0])] == [17]  # the run record first
    assert len(records) == 1 + len(verl)
    for rec, want in zip(records[1:], verl, strict=True):
        (hist,) = _fields(rec)
        assert hist.field_number == 2
        items = {}
        for item in _fields(hist.data):
            if item.field_number == 1:
                kv = {f.field_number: f.data for f in _fields(item.data)}
                items[kv[1].decode()] = json.loads(kv[16])
        assert items["_step"] == want["step"]
        assert {k: v for k, v in items.items() if not k.startswith("_")} == want["data"]


def test_swanlab_log_deframed_and_decoded_by_protobuf(sim, tmp_path):
    trainer_run(sim, tmp_path / "s", "swanlab")
    (log,) = (tmp_path / "s").rglob("run-*.swanlab")
    records = _deframe(log.read_bytes(), struct.pack("<4sHB", b":SWL", 0xE1D6, 2))
    assert [f.field_number for f in _fields(records[0])] == [10]
    scalars = []
    for rec in records[1:]:
        (sc,) = _fields(rec)
        assert sc.field_number == 13
        f = {x.field_number: x.data for x in _fields(sc.data)}
        value = {x.field_number: x.data for x in _fields(f[5])}
        number = struct.unpack("<d", struct.pack("<Q", value[1]))[0] if 1 in value else 0.0
        scalars.append((f.get(2, 0), f[1].decode(), number))
    assert len(scalars) == 3 * 6
    assert [s for s, _, _ in scalars] == [s for s in range(6) for _ in range(3)]
    assert {k for _, k, _ in scalars} == {
        "ppo_actor/task_reward/avg",
        "ppo_actor/no_eos_ratios/avg",
        "ppo_actor/update/entropy/avg",
    }
