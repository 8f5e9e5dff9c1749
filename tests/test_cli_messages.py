"""What the commands say: the last progress line is the totals, phases that did not
happen are named, not printed as NaN, counts agree in number, `--version`. Ray-free."""

from __future__ import annotations

import io
import logging
import re
from importlib.metadata import version

import pytest

from rlstream.cli import main
from rlstream.runtime.executors import phases_text
from rlstream.runtime.progress import Progress
from rlstream.simulate import SimConfig, simulate


def test_final_progress_is_logged_at_once(caplog):
    progress = Progress(io.StringIO())  # not a terminal: log lines, at most every 10 s
    with caplog.at_level(logging.INFO, logger="rlstream"):
        progress.show({}, 1)
        progress.show({"units": 3, "rows": 5}, 1)  # within 10 s: not logged
        progress.show({"units": 3, "rows": 5, "bytes": 2_000_000, "tokens": 7}, 1, final=True)
    said = [r.getMessage() for r in caplog.records]
    assert len(said) == 2
    assert said[0].startswith("runs 1  files 0 units  rows 0  0.0 MB  0 tokens")
    assert said[1].startswith("runs 1  files 3 units  rows 5  2.0 MB  7 tokens")


def test_analyze_logs_its_totals_last(tmp_path, caplog):
    root, out = tmp_path / "runs", tmp_path / "out"
    simulate(root, SimConfig(runs=1, steps=5, scenarios=("healthy",), seed=3))
    argv = ["analyze", str(root), "--out", str(out), "--start-ray-after", "600"]
    with caplog.at_level(logging.INFO, logger="rlstream"):
        assert main(argv) == 0
    said = [r.getMessage() for r in caplog.records]
    progress = [m for m in said if m.startswith("runs 1  files ")]
    got = re.match(r"runs 1  files (\d+) units  rows (\d+)  ", progress[-1])
    assert got and int(got[1]) > 0 and int(got[2]) == 5
    assert any(m.startswith("analyzed 1 run in ") for m in said)


def test_phases_not_reached_are_named_not_nan():
    assert phases_text({"ray": 2.04, "workers": 3.5, "stop": 0.4}) == (
        "Ray up after 2.0 s, workers after 3.5 s, stopped in 0.4 s"
    )
    assert phases_text({"ray": 2.04, "stop": 0.4}) == (
        "Ray up after 2.0 s, the work ended before the workers were ready, stopped in 0.4 s"
    )
    assert phases_text({"stop": 0.1}) == "no Ray up while the work ran, stopped in 0.1 s"


def test_simulate_counts_one_run_as_one(tmp_path, capsys):
    assert main(["simulate", str(tmp_path / "a"), "--runs", "1", "--steps", "2"]) == 0
    assert capsys.readouterr().out.startswith(f"wrote 1 run x 2 steps to {tmp_path / 'a'} in ")
    assert main(["simulate", str(tmp_path / "b"), "--runs", "2", "--steps", "2"]) == 0
    assert capsys.readouterr().out.startswith("wrote 2 runs x 2 steps to ")
    argv = ["simulate", str(tmp_path / "c"), "--learn", "--preset", "healthy", "--steps", "20"]
    assert main(argv) == 0
    assert capsys.readouterr().out.startswith("trained 1 healthy run x 20 steps into ")


def test_version(capsys):
    with pytest.raises(SystemExit) as e:
        main(["--version"])
    assert e.value.code == 0
    assert capsys.readouterr().out == f"rlstream {version('rlstream')}\n"
