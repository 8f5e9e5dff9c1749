"""`rlstream simulate --format NAME` writes runs each reader recognises, with labels."""

from __future__ import annotations

import json

import pytest

from rlstream.io.storage import Storage
from rlstream.pipeline.discover import detect_format, find_runs
from rlstream.simulate.cli import main
from tests.formats.trainer_runs import FORMATS


@pytest.mark.parametrize("fmt", FORMATS)
def test_simulate_writes_the_format(tmp_path, fmt):
    root = tmp_path / "runs"
    assert main([str(root), "--format", fmt, "--scenario", "healthy", "--scenario", "stalled",
                 "--steps", "4", "--groups", "2", "--group-size", "2", "--tokens", "6"]) == 0  # fmt: skip
    storage = Storage.for_url(str(root))
    runs = find_runs(storage, str(root))
    assert [u.rsplit("/", 1)[-1] for u in runs] == ["run-000-healthy", "run-001-stalled"]
    assert {detect_format(storage, u) for u in runs} == {fmt}
    labels = json.loads((root / "labels.json").read_text())
    assert labels["format"] == fmt
    assert [r["run_id"] for r in labels["runs"]] == ["run-000-healthy", "run-001-stalled"]


def test_simulate_live_is_loops_only(tmp_path, capsys):
    assert main([str(tmp_path / "r"), "--format", "verl", "--live"]) == 2
    assert "--live writes the loops format only" in capsys.readouterr().err


def test_simulate_refuses_a_non_empty_root(tmp_path, capsys):
    (tmp_path / "r").mkdir()
    (tmp_path / "r" / "x").write_text("")
    assert main([str(tmp_path / "r"), "--format", "trl"]) == 2
    assert "not empty" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("fmt", "trainer"),
    [("wandb", "verl"), ("swanlab", "areal"), ("trackio", "trl"), ("mlflow", "trl")],
)
def test_simulate_writes_the_tracker_format(tmp_path, fmt, trainer):
    from rlstream.pipeline.local import analyze_local
    from rlstream.simulate.trainers import reader_run_id

    root = tmp_path / "runs"
    assert main([str(root), "--format", fmt, "--scenario", "healthy", "--scenario", "stalled",
                 "--steps", "4", "--groups", "2", "--group-size", "2", "--tokens", "6"]) == 0  # fmt: skip
    labels = json.loads((root / "labels.json").read_text())
    assert labels["format"] == fmt
    want = [reader_run_id(fmt, n) for n in ("run-000-healthy", "run-001-stalled")]
    assert [r["run_id"] for r in labels["runs"]] == want
    states = analyze_local([str(root)], str(tmp_path / "out"))
    assert sorted((s.run_id, s.format, s.trainer) for s in states) == [
        (rid, fmt, trainer) for rid in sorted(want)
    ]
