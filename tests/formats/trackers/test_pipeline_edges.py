"""Tracker logs at the pipeline's edges: a corrupt record in the middle of a file, and a
single file given as ROOT.

The corrupt record is found by an independent walk of the TFRecord framing written
here from TensorBoard's record format (u64 length, u32 masked CRC, data, u32 CRC),
not by the reader under test.
"""

from __future__ import annotations

import json
import shutil
import struct

import pytest

from rlstream.cli import main
from rlstream.errors import EXIT_USAGE
from rlstream.io.storage import Storage
from rlstream.pipeline.discover import file_runs
from rlstream.pipeline.local import analyze_local
from tests.formats.trackers.helpers import FIXTURES, expected
from tests.formats.trainer_runs import table

TB = "tensorboard/tensor/events.out.tfevents.1796202877.vm.12987.0"


def record_offsets(data: bytes) -> list[int]:
    out, i = [], 0
    while i + 12 <= len(data):
        (n,) = struct.unpack_from("<Q", data, i)
        out.append(i)
        i += 12 + n + 4
    return out


def test_a_record_corrupt_in_the_middle_is_quarantined_with_its_offset_the_rest_read(tmp_path):
    run = tmp_path / "runs" / "tensor"
    shutil.copytree(FIXTURES / "tensorboard" / "tensor", run)
    log = run / TB.rsplit("/", 1)[1]
    data = bytearray(log.read_bytes())
    offsets = record_offsets(bytes(data))
    bad = offsets[len(offsets) // 2]
    data[bad + 12 + 3] ^= 0xFF  # a byte of its data: the data CRC fails
    log.write_bytes(bytes(data))
    analyze_local([str(tmp_path / "runs")], str(tmp_path / "out"))
    q = [r for r in table(tmp_path / "out", "quarantine") if r["reason"] == "crc_mismatch"]
    assert [(r["file"], r["offset"]) for r in q] == [(log.name, bad)]
    # every other scalar is still there: one point fewer than the library wrote
    points = expected("tensorboard")[TB]
    finite = [p for p in points if isinstance(p[3], float)]
    rows = table(tmp_path / "out", "steps", "order by step")
    assert sum(values(r) for r in rows) == len(finite) - 1


def values(row: dict) -> int:
    """How many reported figures a steps row holds (columns and maps)."""
    maps = ("reported_eval", "reported_other", "reported_text")
    n = sum(v is not None for c, v in row.items() if c.startswith("reported_") and c not in maps)
    return n + len(dict(row["reported_other"])) + len(dict(row["reported_eval"]))


def test_a_single_log_file_reads_its_run(tmp_path):
    src = FIXTURES / "wandb" / "wandb" / "offline-run-20261202_091504-fx0001"
    run = tmp_path / "offline-run-20261202_091504-fx0001"
    shutil.copytree(src, run)
    states = analyze_local([str(run / "run-fx0001.wandb")], str(tmp_path / "out"))
    assert [(s.run_id, s.format, s.trainer) for s in states] == [("fx0001", "wandb", "verl")]
    assert len(table(tmp_path / "out", "steps")) == len(expected("wandb")["history"])


def test_a_single_store_reads_its_own_runs_only(tmp_path):
    folder = tmp_path / "trackio"
    shutil.copytree(FIXTURES / "trackio", folder)
    shutil.copyfile(FIXTURES / "mlflow" / "sqlite" / "mlflow.db", folder / "mlflow.db")
    storage = Storage.for_url(str(folder))
    urls = file_runs(storage, str(folder / "rl-fixture.db"))
    assert urls == [f"{folder}/rl-fixture.db#grpo-a", f"{folder}/rl-fixture.db#grpo-b"]


def test_a_renamed_metrics_file_is_told_the_name_it_needs(tmp_path, capsys):
    f = tmp_path / "x" / "bash_codeforces_metrics.jsonl"
    f.parent.mkdir()
    f.write_text(json.dumps({"step": 0, "env/all/reward/total": 0.5}) + "\n")
    assert main(["analyze", str(f), "--out", str(tmp_path / "o")]) == EXIT_USAGE
    err = capsys.readouterr().err
    assert "looks like a tinker metrics.jsonl" in err
    assert "put it in a folder of its own as metrics.jsonl" in err


@pytest.mark.parametrize("name", ["notes.txt", "metrics.jsonl"])
def test_a_file_no_format_reads_says_so(tmp_path, capsys, name):
    f = tmp_path / name
    f.write_text("hello\n")
    assert main(["analyze", str(f), "--out", str(tmp_path / "o")]) == EXIT_USAGE
    assert f"ROOT {f} is a file no format reads on its own" in capsys.readouterr().err


def test_a_spread_run_is_final_where_every_live_log_has_passed():
    """TensorBoard-like run: two logs growing, one left behind by a restart."""
    from rlstream.config import PipelineConfig
    from rlstream.io.tail import FileCursor
    from rlstream.pipeline.state import RunState, watermark

    cfg = PipelineConfig(idle_final_seconds=600.0, watermark_lag_steps=1)
    st = RunState("r", "/x", spread=True, max_reported_step=90)
    st.last_change = 1000.0
    st.cursors = {
        "a": FileCursor(max_step=90, mtime=5000.0),
        "eval/b": FileCursor(max_step=80, mtime=4990.0),
        "old": FileCursor(max_step=44, mtime=5000.0 - 601),  # a restart left it behind
        "empty": FileCursor(),  # no record yet: holds nothing back
    }
    assert watermark(st, now=1001.0, cfg=cfg) == 79
    st.cursors["old"] = FileCursor(max_step=44, mtime=5000.0 - 10)  # still growing
    assert watermark(st, now=1001.0, cfg=cfg) == 43
    st.read_at = {90: 0.0}  # settled long ago: not enough when steps spread
    assert watermark(st, now=1001.0, cfg=cfg) == 43
