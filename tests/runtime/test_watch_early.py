"""`watch` that polls and commits in the driver while Ray starts (runtime/held.py):
the first rows land before the tailers exist, the runs are handed over to the tailers
through their resume states, and the tables equal `analyze` on the finished runs (no
row lost or written twice across the handover). On a private Ray, nothing is left
behind once the watch exits."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time

from rlstream.config import PipelineConfig
from rlstream.pipeline.local import analyze_local
from rlstream.runtime import held
from rlstream.runtime.cluster import TEMP_PARENT_ENV
from rlstream.runtime.driver import RuntimeConfig
from rlstream.runtime.driver import run as run_pipeline
from rlstream.simulate import SimConfig, simulate, simulate_live
from tests.runtime.helpers import assert_same_rows, read_steps

MADE: list = []


class GatedStart(held.RayStart):
    """Ray (the session's), workers and tailers start at once, but the driver sees
    them only once `release` is set: the split is known whatever the machine's speed."""

    release = threading.Event()

    def workers(self):
        return super().workers() if self.release.is_set() else None


class Watched(held.HeldRuns):
    def __init__(self, *a, **k) -> None:
        super().__init__(*a, **k)
        MADE.append(self)


def test_driver_commits_first_then_hands_over_exactly_once(ray_session, tmp_path, monkeypatch):
    MADE.clear()
    GatedStart.release.clear()
    monkeypatch.setattr(held, "RayStart", GatedStart)
    monkeypatch.setattr(held, "HeldRuns", Watched)
    root, out = tmp_path / "runs", tmp_path / "out"
    cfg_sim = SimConfig(runs=3, steps=16, scenarios=("healthy", "low_ess", "healthy"), seed=21)
    writer = threading.Thread(target=simulate_live, args=(root, cfg_sim, 0.15))
    writer.start()
    deadline = time.monotonic() + 180
    while len(list(root.glob("*/run.json"))) < 3:  # the driver finds them at its start
        assert time.monotonic() < deadline and writer.is_alive()
        time.sleep(0.02)
    seen: dict[str, int] = {}

    def stop() -> bool:
        assert time.monotonic() < deadline, "the watch did not reach the batch tables in time"
        w = MADE[0]
        if not GatedStart.release.is_set() and (out / "run_health").exists():
            # The driver committed; the tailers have not been asked for anything yet.
            seen["rows_before"] = len(read_steps(out)) if (out / "steps").exists() else 0
            seen["here_before"] = w.pool.counts["here"]
            GatedStart.release.set()
        if writer.is_alive() or "handed over" not in w.phases.marks:
            return False
        return (out / "steps").exists() and len(read_steps(out)) == 3 * 16

    cfg = PipelineConfig(poll_seconds=0.1, commit_seconds=0.3, transcripts_per_unit=4)
    rt = RuntimeConfig(workers=2, tailers=2, early_start=True)
    summaries = run_pipeline([str(root)], str(out), cfg, rt, watch=True, stop=stop)
    writer.join()
    w = MADE[0]
    assert seen["here_before"] > 0  # units ran in the driver before the handover
    marks = w.phases.marks
    assert marks["first commit"] < marks["handed over"]
    assert w.group.runs == {}  # the driver kept none of the runs
    assert len(summaries) == 3
    assert all(s["finished"] and s["quarantined"] == 0 and s["late"] == 0 for s in summaries)
    analyze_local([str(root)], str(tmp_path / "batch"))
    batch_rows = read_steps(tmp_path / "batch")
    assert len(batch_rows) == 3 * 16
    assert_same_rows(batch_rows, read_steps(out))


def test_private_watch_leaves_no_process_or_folder(tmp_path):
    """The production path: `rlstream watch --exit-when-finished` on finished runs
    starts its own Ray (in its own process group, so the tests' Ray is not touched),
    commits in the driver, and on exit leaves no Ray process and no temp folder."""
    simulate(tmp_path / "runs", SimConfig(runs=2, steps=6, seed=9))
    parent = tempfile.mkdtemp(prefix="rlw", dir="/tmp")
    try:
        env = {**os.environ, TEMP_PARENT_ENV: parent}
        env.pop("RAY_ADDRESS", None)
        cmd = [sys.executable, "-m", "rlstream.cli", "watch", str(tmp_path / "runs")]
        cmd += ["--out", str(tmp_path / "out"), "--poll", "0.2", "--exit-when-finished"]
        res = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)
        assert res.returncode == 0, res.stderr[-3000:]
        assert "start-up (s since the process began): " in res.stderr
        # every run finished: the watch ends with a maintenance pass, as analyze does
        assert "maintenance pass 1 in " in res.stderr
        assert (tmp_path / "out" / "run_latest" / "_delta_log").is_dir()
        assert os.listdir(parent) == []  # Ray's temp folder removed
        left = subprocess.run(["pgrep", "-f", parent], capture_output=True, text=True)
        assert left.stdout.split() == []  # no process of that Ray left
    finally:
        shutil.rmtree(parent, ignore_errors=True)
    analyze_local([str(tmp_path / "runs")], str(tmp_path / "batch"))
    assert_same_rows(read_steps(tmp_path / "batch"), read_steps(tmp_path / "out"))
