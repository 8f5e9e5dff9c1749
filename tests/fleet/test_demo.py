"""`rlstream demo`, small: live runs watched on Ray, then the report and the hints."""

from __future__ import annotations

import pytest

from rlstream.cli import main
from rlstream.fleet.read import read_latest


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
