"""Maintenance keeps OUT bounded by time, not by commits, and leaves every row.

Many small commits, then a pass (retention 0 here; the default is minutes): each
table is one data file and a short log, the rows are unchanged, `run_latest` holds
the newest row per run, and appending four times as many commits then another pass
ends with the same number of files. Appends running during a pass all land. An OUT
of the earlier Parquet layout is refused with what to do.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from rlstream.cli import main
from rlstream.errors import RlstreamError
from rlstream.fleet.read import out_sink, read_latest, read_table
from rlstream.pipeline.local import analyze_local
from rlstream.sinks.health import run_health_table
from rlstream.sinks.maintain import MaintenanceConfig, maintain
from tests.pipeline.runfiles import write_run

NOW = 1_800_000_000.0
RUNS = ("r0", "r1", "r2")


def _row(run_id: str, seq: int) -> dict:
    return {
        "run_id": run_id,
        "run_uri": f"/x/{run_id}",
        "as_of": NOW + seq,
        "commit_seq": seq,
        "last_step": seq,
        "status": "healthy",
    }


def _commits(sink, start: int, n: int) -> None:
    for seq in range(start, start + n):
        run_id = RUNS[seq % 3]
        sink.append("run_health", run_health_table([_row(run_id, seq)]), {f"t:{run_id}": seq})


def _files(out: Path) -> int:
    return sum(1 for p in out.rglob("*") if p.is_file())


def test_pass_compacts_and_files_stop_growing(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    sink = out_sink(str(out), retention_seconds=0)
    _commits(sink, 0, 12)
    before = _files(out)
    cfg = MaintenanceConfig()
    report = maintain(sink, cfg)
    assert report["run_health"]["compacted"] == 12 and report["run_latest"] == 3
    first = _files(out)
    assert first < before
    assert len(list((out / "run_health").glob("*.parquet"))) == 1
    assert read_table(str(out), "run_health").num_rows == 12
    latest = {r["run_id"]: r["commit_seq"] for r in read_latest(str(out))}
    assert latest == {"r0": 9, "r1": 10, "r2": 11}
    _commits(sink, 12, 48)
    maintain(sink, cfg)
    assert _files(out) <= first
    assert read_table(str(out), "run_health").num_rows == 60
    latest = {r["run_id"]: r["commit_seq"] for r in read_latest(str(out))}
    assert latest == {"r0": 57, "r1": 58, "r2": 59}
    _commits(sink, 60, 2)  # newer than run_latest: the reader sees them at once
    latest = {r["run_id"]: r["commit_seq"] for r in read_latest(str(out))}
    assert latest == {"r0": 60, "r1": 61, "r2": 59}


def test_appends_during_a_pass_all_land(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    # A retention longer than the test: what a reader or writer that loaded an older
    # version still needs is kept (with 0, a checkpoint can vanish under an append).
    sink = out_sink(str(out), retention_seconds=60)
    _commits(sink, 0, 3)
    errors: list[Exception] = []

    def append():
        try:
            _commits(sink, 3, 30)
        except Exception as e:  # pragma: no cover - the assertion below shows it
            errors.append(e)

    t = threading.Thread(target=append)
    t.start()
    while t.is_alive():
        report = maintain(sink, MaintenanceConfig())
        assert "error" not in report["run_health"], report
        time.sleep(0.05)
    t.join()
    assert errors == []
    assert read_table(str(out), "run_health").num_rows == 33


def test_analyze_ends_compacted_and_compact_command_runs(tmp_path, capsys):
    for name in ("run-a", "run-b"):
        write_run(tmp_path / "runs", name=name, steps=3)
    analyze_local([str(tmp_path / "runs")], str(tmp_path / "out"))
    assert len(list((tmp_path / "out" / "steps").glob("*.parquet"))) == 1
    assert main(["compact", str(tmp_path / "out"), "--retention", "0"]) == 0
    assert "steps:" in capsys.readouterr().out
    assert len(read_latest(str(tmp_path / "out"))) == 2


def test_an_out_of_the_parquet_layout_is_refused(tmp_path, capsys):
    out = tmp_path / "out"
    (out / "_checkpoints").mkdir(parents=True)
    (out / "_checkpoints" / "run_id=a.ckpt").write_bytes(b"x")
    write_run(tmp_path / "runs", steps=1)
    with pytest.raises(RlstreamError, match="earlier rlstream"):
        analyze_local([str(tmp_path / "runs")], str(out))
    assert main(["status", str(out)]) == 2
    assert "new --out" in capsys.readouterr().err


def test_an_out_is_known_by_run_health_delta_log(tmp_path):
    write_run(tmp_path / "runs", steps=1)
    assert not out_sink(str(tmp_path / "out")).is_out()
    analyze_local([str(tmp_path / "runs")], str(tmp_path / "out"))
    assert out_sink(str(tmp_path / "out")).is_out()


def test_a_pass_deletes_files_the_log_no_longer_knows(tmp_path):
    """A data file no version references (an append whose commit never landed, or a
    compacted file whose remove action a checkpoint no longer carries) is deleted
    once older than the retention; a fresh one is kept (its commit may be under way)."""
    import os

    out = tmp_path / "out"
    out.mkdir()
    sink = out_sink(str(out), retention_seconds=600)
    _commits(sink, 0, 3)
    table = out / "run_health"
    live = next(table.glob("*.parquet"))
    old, fresh = table / "part-orphan-old.parquet", table / "part-orphan-new.parquet"
    for p in (old, fresh):
        p.write_bytes(live.read_bytes())
    hour_ago = time.time() - 3600
    os.utime(old, (hour_ago, hour_ago))
    maintain(sink, MaintenanceConfig())
    assert not old.exists()
    assert fresh.exists()
    assert sorted(read_table(str(out), "run_health").column("commit_seq").to_pylist()) == [0, 1, 2]


def test_a_row_stamped_long_before_the_newest_is_seen_by_status(tmp_path, capsys):
    """A commit stamps `as_of` when it starts; its append may land minutes later (a
    slow object store), after a pass wrote `run_latest` with newer rows of other runs.
    Its row is in a `run_health` file `run_latest` does not cover: `status` sees it at
    once, and the next pass keeps it."""
    out = tmp_path / "out"
    out.mkdir()
    sink = out_sink(str(out), retention_seconds=60)
    for run_id, seq in (("r0", 300), ("r1", 301)):
        sink.append("run_health", run_health_table([_row(run_id, seq)]), {f"t:{run_id}": seq})
    maintain(sink, MaintenanceConfig())
    late = dict(_row("r2", 5), status="critical")  # stamped 296 s before the newest
    sink.append("run_health", run_health_table([late]), {"t:r2": 5})
    latest = {r["run_id"]: r["commit_seq"] for r in read_latest(str(out))}
    assert latest == {"r0": 300, "r1": 301, "r2": 5}
    assert main(["status", str(out)]) == 0
    shown = capsys.readouterr().out
    assert "r2" in shown and "critical" in shown
    report = maintain(sink, MaintenanceConfig())
    assert report["run_latest"] == 3
    assert {r["run_id"] for r in read_latest(str(out))} == {"r0", "r1", "r2"}
    assert maintain(sink, MaintenanceConfig())["run_latest"] == {"unchanged": True}
