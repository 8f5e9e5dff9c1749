"""`watch` that polls and commits in the driver while Ray starts (runtime/held.py):
the first rows land before the tailers exist, the runs are handed over to the tailers
through their resume states, and the tables equal `analyze` on the finished runs (no
row lost or written twice across the handover). On a private Ray (`watch --ray`),
nothing is left behind once the watch exits; by default a small watch starts none."""

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
    rt = RuntimeConfig(workers=2, tailers=2, early_start=True, start_ray_after=0)  # --ray
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


def _watch_finished(tmp_path, name: str, *extra: str) -> tuple[subprocess.CompletedProcess, list]:
    """`rlstream watch --exit-when-finished` on finished runs in a subprocess, with Ray's
    temp folders under a parent of its own (its own process group, so the tests' Ray
    is not touched): the result and the temp folders made there."""
    parent = tempfile.mkdtemp(prefix="rlw", dir="/tmp")
    try:
        env = {**os.environ, TEMP_PARENT_ENV: parent}
        env.pop("RAY_ADDRESS", None)
        cmd = [sys.executable, "-m", "rlstream.cli", "watch", str(tmp_path / "runs")]
        cmd += ["--out", str(tmp_path / name), "--poll", "0.2", "--exit-when-finished", *extra]
        made: list[str] = []
        res = subprocess.Popen(
            cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
        )
        while res.poll() is None:  # a Ray's temp folder lives while the watch does
            made = sorted(set(made) | set(os.listdir(parent)))
            time.sleep(0.05)
        out, err = res.communicate(timeout=300)
        done = subprocess.CompletedProcess(cmd, res.returncode, out, err)
        assert done.returncode == 0, err[-3000:]
        assert os.listdir(parent) == []  # Ray's temp folder removed, if one was made
        left = subprocess.run(["pgrep", "-f", parent], capture_output=True, text=True)
        assert left.stdout.split() == []  # no process of that Ray left
    finally:
        shutil.rmtree(parent, ignore_errors=True)
    return done, made


def test_private_watch_leaves_no_process_or_folder(tmp_path):
    """The private Ray path (`--ray`): the watch starts its own Ray, commits in the
    driver, and on exit leaves no Ray process and no temp folder. The default on these
    two small runs starts no Ray at all; the tables are the same."""
    simulate(tmp_path / "runs", SimConfig(runs=2, steps=6, seed=9))
    res, made = _watch_finished(tmp_path, "out", "--ray")
    assert len(made) == 1 and "starting a private local Ray" in res.stderr
    assert "start-up (s since the process began): " in res.stderr
    # every run finished: the watch ends with a maintenance pass, as analyze does
    assert "maintenance pass 1 in " in res.stderr
    assert (tmp_path / "out" / "run_latest" / "_delta_log").is_dir()
    said = [line for line in res.stdout.splitlines() if line.startswith("watched ")]
    assert said[1:] in (  # it may end before the handover on a busy host: says which
        ["watched on a private Ray (asked for: --ray)"],
        ["watched in this process while a private Ray started (asked for: --ray)"],
    )

    auto, made = _watch_finished(tmp_path, "auto")
    assert made == [] and "private local Ray" not in auto.stderr  # no Ray at all
    said = [line for line in auto.stdout.splitlines() if line.startswith("watched ")]
    assert said[1] == (
        "watched in this process (a private Ray starts once its polls and commits take "
        "above 80 % of a core over 30 s)"
    )
    batch = tmp_path / "batch"
    analyze_local([str(tmp_path / "runs")], str(batch))
    assert_same_rows(read_steps(batch), read_steps(tmp_path / "out"))
    assert_same_rows(read_steps(batch), read_steps(tmp_path / "auto"))
