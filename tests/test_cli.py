"""The command line tells the truth: every wrong path is a one-line error with the
documented exit code before anything starts (no Ray), and `analyze` says what it read,
wrote and rejected. Ray-free: the Ray paths are in tests/runtime/test_cli_ray.py."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pyarrow.compute as pc
import pytest

from rlstream.cli import default_report_path, main
from rlstream.errors import EXIT_FAILURE, EXIT_REJECTED, EXIT_USAGE
from rlstream.fleet.read import read_table
from rlstream.simulate import SimConfig, simulate

BAD_JSON = b'{"run_id": "x", not json'


def _error(capsys) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert err, "no error message"
    line = err[-1]
    assert line.startswith("rlstream: error: ")
    return line


def _runs(root: Path, good: int = 1, bad: int = 0) -> Path:
    if good:
        simulate(root, SimConfig(runs=good, steps=5, scenarios=("healthy",), seed=3))
    for i in range(bad):
        (root / f"broken-{i}").mkdir(parents=True)
        (root / f"broken-{i}" / "run.json").write_bytes(BAD_JSON)
    return root


# -- wrong paths: exit 2, one line, nothing started ---------------------------------


@pytest.mark.parametrize("command", ["analyze", "watch"])
def test_missing_root_fails_before_ray(command, tmp_path, capsys, no_ray):
    out = tmp_path / "out"
    assert main([command, str(tmp_path / "nope"), "--out", str(out)]) == EXIT_USAGE
    line = _error(capsys)
    assert f"ROOT {tmp_path / 'nope'} does not exist" in line
    assert "give a folder" in line
    assert not out.exists()


def test_root_that_is_a_file(tmp_path, capsys, no_ray):
    f = tmp_path / "runs.txt"
    f.write_text("x")
    assert main(["analyze", str(f), "--out", str(tmp_path / "o")]) == EXIT_USAGE
    assert f"ROOT {f} is a file no format reads on its own" in _error(capsys)


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads every folder: no permission error")
def test_unreadable_root(tmp_path, capsys, no_ray):
    root = tmp_path / "locked"
    root.mkdir(mode=0)
    try:
        assert main(["analyze", str(root), "--out", str(tmp_path / "o")]) == EXIT_USAGE
        assert "cannot be read (permission denied)" in _error(capsys)
    finally:
        root.chmod(0o755)


def test_negative_start_ray_after(tmp_path, capsys, no_ray):
    root = tmp_path / "runs"
    root.mkdir()
    argv = ["analyze", str(root), "--out", str(tmp_path / "o"), "--start-ray-after", "-1"]
    assert main(argv) == EXIT_USAGE
    assert "--start-ray-after must be >= 0 seconds (got -1)" in _error(capsys)


def test_out_that_is_a_file(tmp_path, capsys, no_ray):
    root = tmp_path / "runs"
    root.mkdir()
    (tmp_path / "o").write_text("x")
    assert main(["analyze", str(root), "--out", str(tmp_path / "o")]) == EXIT_USAGE
    assert f"OUT {tmp_path / 'o'} is a file" in _error(capsys)


@pytest.mark.parametrize("in_process", [False, True])
def test_empty_root_is_no_data_and_writes_nothing(in_process, tmp_path, capsys, no_ray):
    root, out = tmp_path / "empty", tmp_path / "out"
    root.mkdir()
    argv = ["analyze", str(root), "--out", str(out)] + (["--in-process"] if in_process else [])
    assert main(argv) == EXIT_FAILURE
    line = _error(capsys)
    assert f"no runs under {root}" in line and f"nothing was written to {out}" in line
    assert not out.exists()


@pytest.mark.parametrize("command", ["status", "report", "compact"])
def test_missing_out(command, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main([command, str(tmp_path / "nope")]) == EXIT_USAGE
    line = _error(capsys)
    assert f"OUT {tmp_path / 'nope'} does not exist" in line
    assert "--out folder of `rlstream analyze`" in line
    assert list(tmp_path.iterdir()) == []  # no report.html left anywhere


@pytest.mark.parametrize("command", ["status", "report", "compact"])
def test_folder_that_is_not_an_out(command, tmp_path, capsys):
    other = tmp_path / "photos"
    (other / "2024").mkdir(parents=True)
    assert main([command, str(other)]) == EXIT_USAGE
    assert f"{other} is not an rlstream output" in _error(capsys)
    assert not (tmp_path / "photos-report.html").exists()


@pytest.mark.parametrize("command", ["status", "report", "compact"])
def test_out_of_the_earlier_parquet_layout_is_refused(command, tmp_path, capsys):
    out = tmp_path / "out"
    (out / "_checkpoints").mkdir(parents=True)
    (out / "run_health" / "latest").mkdir(parents=True)
    assert main([command, str(out)]) == EXIT_USAGE
    line = _error(capsys)
    assert f"{out} holds outputs of an earlier rlstream" in line
    assert "Use a new --out" in line
    assert not (tmp_path / "out-report.html").exists()


@pytest.mark.parametrize("command", ["status", "report"])
def test_out_with_no_runs_yet_is_no_data(command, tmp_path, capsys):
    from deltalake import write_deltalake

    from rlstream.sinks.health import RUN_HEALTH_SCHEMA

    out = tmp_path / "out"
    write_deltalake(str(out / "run_health"), RUN_HEALTH_SCHEMA.empty_table())
    assert main([command, str(out)]) == EXIT_FAILURE
    assert f"no runs in {out} yet" in capsys.readouterr().err
    assert not (tmp_path / "out-report.html").exists()


def test_storage_options_not_json_is_usage(tmp_path, capsys):
    (tmp_path / "out" / "steps").mkdir(parents=True)
    argv = ["status", str(tmp_path / "out"), "--storage-options", "{nope"]
    assert main(argv) == EXIT_USAGE
    assert "--storage-options is not JSON" in _error(capsys)


# -- what analyze did: from the commits, rejected runs everywhere ---------------------


def _rows(out: Path, table: str) -> int:
    return read_table(str(out), table).num_rows


def test_analyze_reports_rows_written_and_rejected_runs(tmp_path, capsys):
    root, out = _runs(tmp_path / "runs", good=2, bad=1), tmp_path / "out"
    assert main(["analyze", str(root), "--out", str(out), "--in-process"]) == EXIT_REJECTED
    text = capsys.readouterr().out
    lines = text.splitlines()
    # The counts printed are what the commits wrote: check them against OUT itself.
    steps, quarantine = _rows(out, "steps"), _rows(out, "quarantine")
    health, samples = _rows(out, "run_health"), _rows(out, "samples")
    assert (steps, health) == (10, 2) and samples > 0
    assert lines[0] == (
        f"analyzed 2 runs; wrote {steps + health + quarantine + samples} rows under {out} "
        f"(steps {steps}, run_health {health}, quarantine {quarantine}, samples {samples})"
    )
    assert lines[1] == "1 run rejected (not analysed):"
    assert lines[2].startswith(f"  {root / 'broken-0'}: run.json is not valid JSON")
    assert f"{out}/quarantine (run_id '_rejected')" in lines[3]
    assert "tables under" not in text

    # status: its own footer; --json lists it
    assert main(["status", str(out)]) == 0
    table = capsys.readouterr().out.rstrip().splitlines()
    # 5 steps each: fewer than the rules' baseline needs, so not judged (not "healthy")
    assert (
        table[0] == "2 runs: 2 not judged (2 finished); 1 rejected run (not analysed, listed below)"
    )
    assert "not judged: 5 final steps, the rules need 17: " in table[-3]
    assert table[-2] == "rejected (1 run; not analysed):"
    assert table[-1].startswith(f"  {root / 'broken-0'}: run.json is not valid JSON")
    assert main(["status", str(out), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert [r["run_uri"] for r in doc["rejected"]] == [str(root / "broken-0")]
    assert sum(doc["counts"].values()) == len(doc["runs"]) == 2

    # report: written beside OUT by default, says where, lists the rejected run
    assert main(["report", str(out)]) == 0
    said = capsys.readouterr().out.strip()
    path = tmp_path / "out-report.html"
    assert said == f"wrote {path}: 2 runs and 1 rejected run from {out}"
    html = path.read_text()
    assert '<span class="s-insufficient">2 not judged (2 finished)</span>' in html
    assert '<a href="#rejected">1 rejected</a>' in html
    assert html.count('<tr class="rejected-run">') == 1 and str(root / "broken-0") in html

    # Prometheus: a gauge of rejected runs
    from rlstream.fleet.prometheus import MetricsExporter

    exporter = MetricsExporter(str(out), port=0, min_refresh_seconds=0).start()
    try:
        page = exporter.page()
    finally:
        exporter.close()
    assert "\nrlstream_runs_rejected 1\n" in page


def test_every_run_rejected_is_a_failure_with_the_reasons(tmp_path, capsys):
    root, out = _runs(tmp_path / "runs", good=0, bad=5), tmp_path / "out"
    assert main(["analyze", str(root), "--out", str(out), "--in-process"]) == EXIT_FAILURE
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == f"analyzed 0 runs; wrote 5 rows under {out} (quarantine 5)"
    assert lines[1] == "5 runs rejected (not analysed):"
    assert [line.split(":")[0].strip() for line in lines[2:5]] == [
        str(root / f"broken-{i}") for i in range(3)
    ]
    assert lines[5] == "  ... and 2 more runs"
    assert _rows(out, "quarantine") == 5
    # status still shows them: an OUT holding only rejected runs is an rlstream OUT
    assert main(["status", str(out)]) == 0
    table = capsys.readouterr().out.splitlines()
    assert table[0] == "0 runs; 5 rejected runs (not analysed, listed below)"
    assert table[2] == "(no run analysed: every run found was rejected, listed below)"
    assert "rejected (5 runs; not analysed):" in table
    # report too: it lists them (an OUT with no run at all, analysed or rejected, is
    # exit 1 with no file: test_out_with_no_runs_yet_is_no_data)
    assert main(["report", str(out)]) == 0
    assert capsys.readouterr().out.strip() == (
        f"wrote {tmp_path / 'out-report.html'}: 0 runs and 5 rejected runs from {out}"
    )


def test_a_rejected_run_read_since_is_no_longer_listed(tmp_path, capsys):
    from rlstream.fleet.outdir import read_rejected

    root, out = _runs(tmp_path / "runs", good=1, bad=2), tmp_path / "out"
    assert main(["analyze", str(root), "--out", str(out), "--in-process"]) == EXIT_REJECTED
    assert [r["run_uri"] for r in read_rejected(str(out))] == [
        str(root / "broken-0"),
        str(root / "broken-1"),
    ]
    (root / "broken-0" / "run.json").write_bytes(b'{"run_id": "fixed"}')
    capsys.readouterr()
    assert main(["analyze", str(root), "--out", str(out), "--in-process"]) == EXIT_REJECTED
    said = capsys.readouterr().out.splitlines()
    assert said[0].startswith("analyzed 2 runs; wrote ")
    assert said[1] == "1 run rejected (not analysed):"
    assert [r["run_uri"] for r in read_rejected(str(out))] == [str(root / "broken-1")]
    rejected = read_table(str(out), "quarantine").filter(pc.field("run_id") == "_rejected")
    assert rejected.num_rows == 2  # the rejection rows stay, each written once


def test_rerun_writes_nothing_new_and_says_so(tmp_path, capsys):
    root, out = _runs(tmp_path / "runs"), tmp_path / "out"
    assert main(["analyze", str(root), "--out", str(out), "--in-process"]) == 0
    capsys.readouterr()
    assert main(["analyze", str(root), "--out", str(out), "--in-process"]) == 0
    assert capsys.readouterr().out.splitlines()[0] == (
        f"analyzed 1 run; nothing new written to {out}"
    )


def test_default_report_path():
    assert default_report_path("/data/fleet/out/") == "/data/fleet/out-report.html"
    assert default_report_path("s3://b/tables").endswith("/tables-report.html")
    assert os.path.isabs(default_report_path("s3://b/tables"))
