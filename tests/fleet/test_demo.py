"""`rlstream demo`, small: live runs watched on Ray, then the report and the hints."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile

import pytest

from rlstream.cli import main
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
    assert f"delta_scan('{tmp_path}/out/steps')" in text
    for r in latest:
        assert r["run_id"] in text and r["run_id"] in html


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
