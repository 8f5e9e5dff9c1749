"""`rlstream demo`, small: live runs watched on Ray, then the report and the hints."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile

import pytest

from rlstream.cli import main
from rlstream.demo import query_commands
from rlstream.fleet.read import read_latest
from rlstream.runtime.cluster import TEMP_PARENT_ENV


@pytest.mark.ray
def test_demo_watches_live_runs_and_writes_the_report(ray_session, tmp_path, capsys):
    args = ["demo", "--dir", str(tmp_path), "--runs", "3", "--steps", "12", "--interval", "0.2"]
    assert main(args) == 0
    text = capsys.readouterr().out
    latest = read_latest(str(tmp_path / "out"))
    assert len(latest) == 3
    assert all(r["last_step"] == 11 and r["final_through"] == 11 for r in latest)
    assert "rlstream demo: watching 3 live runs" in text
    assert f"HTML report: {tmp_path / 'report.html'}" in text
    html = (tmp_path / "report.html").read_text()
    assert html.count('<section class="run"') == 3
    for command in query_commands(tmp_path / "out"):
        assert f"\n  {command}\n" in text + "\n"
    for r in latest:
        assert r["run_id"] in text and r["run_id"] in html
    # It leaves a maintained OUT: the tables docs/schema.md names all exist.
    for table in ("run_latest", "step_digest", "band_digest"):
        assert (tmp_path / "out" / table / "_delta_log").is_dir(), table


@pytest.mark.ray
def test_demo_leaves_no_ray_temp_folder_and_says_where_its_data_is(tmp_path):
    """The demo on its own private Ray, in its own interpreter: Ray's temp folder is made
    under RLSTREAM_RAY_TMPDIR and must be gone when the demo exits."""
    parent = tempfile.mkdtemp(prefix="rlc", dir="/tmp")  # short: AF_UNIX path limit
    try:
        before = os.stat(parent).st_mtime_ns
        env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0", "RAY_AUTH_MODE": "disabled"}
        env[TEMP_PARENT_ENV] = parent
        env.pop("RAY_ADDRESS", None)
        base = tmp_path / "demo"
        argv = ["demo", "--dir", str(base), "--runs", "1", "--steps", "4", "--interval", "0.1"]
        res = subprocess.run(
            [sys.executable, "-m", "rlstream.cli", *argv],
            capture_output=True,
            text=True,
            env=env,
            timeout=300,
        )
        assert res.returncode == 0, res.stderr[-3000:]
        assert os.stat(parent).st_mtime_ns > before  # Ray's folder was made there ...
        assert os.listdir(parent) == []  # ... and removed
        assert f"under {base}; nothing else is left behind" in res.stdout
        assert f"rm -rf {base}" in res.stdout
    finally:
        shutil.rmtree(parent, ignore_errors=True)


# -- refused before anything starts; a failed demo leaves no temp folder ----------------


def _usage(capsys, argv) -> str:
    with pytest.raises(SystemExit) as e:
        main(argv)
    assert e.value.code == 2
    captured = capsys.readouterr()
    assert captured.out == ""  # nothing announced, nothing started
    return captured.err.strip().splitlines()[-1]


def test_demo_refuses_a_dir_that_holds_files(tmp_path, capsys, no_ray):
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("keep me")
    line = _usage(capsys, ["demo", "--dir", str(mine), "--runs", "1", "--steps", "2"])
    assert line == (
        f"rlstream demo: error: argument --dir: {mine} already holds files; "
        "give an empty or new folder"
    )
    assert [p.name for p in mine.iterdir()] == ["notes.txt"]


def test_demo_refuses_a_dir_that_is_a_file(tmp_path, capsys, no_ray):
    f = tmp_path / "f.txt"
    f.write_text("x")
    line = _usage(capsys, ["demo", "--dir", str(f)])
    assert (
        line == f"rlstream demo: error: argument --dir: {f} is a file; give an empty or new folder"
    )
    assert f.read_text() == "x"


@pytest.mark.parametrize(
    ("option", "value", "says"),
    [
        ("--runs", "0", "must be >= 1 (got 0)"),
        ("--steps", "0", "must be >= 1 (got 0)"),
        ("--steps", "2.5", "'2.5' is not a whole number"),
        ("--interval", "0", "must be > 0 (got 0)"),
        ("--interval", "-1", "must be > 0 (got -1)"),
        ("--interval", "nan", "must be > 0 (got nan)"),
    ],
)
def test_demo_refuses_bad_numbers(option, value, says, tmp_path, capsys, no_ray, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    line = _usage(capsys, ["demo", option, value])
    assert line == f"rlstream demo: error: argument {option}: {says}"
    assert list(tmp_path.iterdir()) == []  # no temp folder made


def test_a_failed_demo_removes_its_temp_folder(tmp_path, capsys, monkeypatch):
    import rlstream.runtime.cluster as cluster
    from rlstream.errors import RlstreamError

    def fail(*a, **k):
        raise RlstreamError("Ray did not start")

    monkeypatch.setattr(cluster, "connect", fail)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    assert main(["demo", "--runs", "1", "--steps", "2"]) == 1
    assert "rlstream: error: Ray did not start" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


def test_a_new_dir_is_made_and_an_empty_one_taken(tmp_path, capsys, monkeypatch):
    """The demo works in a --dir it makes, or in an empty one given; a failure leaves
    the --dir (the user named it) but removes no file of anyone else's."""
    import rlstream.runtime.cluster as cluster
    from rlstream.errors import RlstreamError

    def fail(*a, **k):
        raise RlstreamError("Ray did not start")

    monkeypatch.setattr(cluster, "connect", fail)
    new, empty = tmp_path / "a" / "new", tmp_path / "empty"
    empty.mkdir()
    for d in (new, empty):
        assert main(["demo", "--dir", str(d), "--runs", "1", "--steps", "2"]) == 1
        assert d.is_dir()
        assert f"under {d / 'runs'}" in capsys.readouterr().out


def test_the_query_commands_the_demo_prints_run(tmp_path, monkeypatch):
    """Each printed command works with what rlstream installs (no pandas, no duckdb
    CLI, no DuckDB extension download), in an OUT whose path needs quoting."""
    import importlib.util

    from rlstream.pipeline.local import analyze_local
    from rlstream.simulate import SimConfig, simulate

    base = tmp_path / "it's a demo"
    labels = simulate(base / "runs", SimConfig(runs=2, steps=4, scenarios=("healthy",), seed=2))
    analyze_local([str(base / "runs")], str(base / "out"))
    commands = query_commands(base / "out")
    assert len(commands) == 2
    outputs = []
    for command in commands:
        for _ in range(3):  # a read through delta-rs's own file handler often aborted at exit
            res = subprocess.run(command, shell=True, capture_output=True, text=True, timeout=120)
            assert res.returncode == 0, (command, res.returncode, res.stderr[-2000:])
        outputs.append(res.stdout)
    assert outputs[0].startswith("8 rows\n[{'run_id': ")
    assert "'reward_mean': " in outputs[0] and "'mismatch_kl': " in outputs[0]
    for lab in labels:  # one line per run, with its 4 steps
        assert any(lab.run_id in ln and " 4 " in ln for ln in outputs[1].splitlines())

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda n, *a: None if n == "duckdb" else real(n, *a)
    )
    assert query_commands(base / "out") == commands[:1]  # without duckdb: deltalake only
