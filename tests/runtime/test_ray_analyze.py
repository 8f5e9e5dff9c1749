"""`analyze` on Ray equals the in-process pipeline, and survives a killed worker."""

from __future__ import annotations

import os
import signal
import time

import ray

from rlstream.config import PipelineConfig
from rlstream.pipeline.local import analyze_local
from rlstream.runtime.driver import ActorPools, RuntimeConfig, default_tailers
from rlstream.runtime.driver import run as run_pipeline
from rlstream.simulate import SimConfig, simulate
from tests.runtime.helpers import assert_same_rows, read_steps

SCEN = ("healthy", "entropy_collapse", "mismatch_kl_rising", "rollout_failure_burst")


def test_ray_analyze_equals_in_process(ray_session, tmp_path):
    simulate(tmp_path / "runs", SimConfig(runs=4, steps=12, scenarios=SCEN, seed=3))
    analyze_local([str(tmp_path / "runs")], str(tmp_path / "local"))
    cfg = PipelineConfig(transcripts_per_unit=8)
    summaries = run_pipeline(
        [str(tmp_path / "runs")], str(tmp_path / "ray"), cfg, RuntimeConfig(workers=2, tailers=2)
    )
    assert len(summaries) == 4
    assert all(s["steps_final"] == 12 for s in summaries)
    local = read_steps(tmp_path / "local")
    assert len(local) == 48
    assert_same_rows(local, read_steps(tmp_path / "ray"))


def test_killed_worker_is_restarted_and_nothing_counted_twice(ray_session, tmp_path):
    simulate(tmp_path / "runs", SimConfig(runs=2, steps=16, scenarios=("healthy",), seed=5))
    analyze_local([str(tmp_path / "runs")], str(tmp_path / "local"))
    # One transcript per unit, so the batch has hundreds of units in flight.
    cfg = PipelineConfig(transcripts_per_unit=1, max_inflight_units=4)
    fleet = ActorPools(
        [str(tmp_path / "runs")], str(tmp_path / "ray"), cfg, RuntimeConfig(workers=2, tailers=1)
    )
    fleet.discover()
    victim = fleet.workers[0]
    pid_before = ray.get(victim.info.remote())["pid"]
    poll = fleet.tailers[0].poll.remote(True)
    # Wait until the victim has done some units, then SIGKILL its process mid-batch.
    deadline = time.monotonic() + 120
    while ray.get(victim.info.remote())["done"] < 5:
        assert not ray.wait([poll], timeout=0)[0], "the batch ended before the kill"
        assert time.monotonic() < deadline, "the victim worker got no units"
    os.kill(pid_before, signal.SIGKILL)
    rows = ray.get(poll)
    fleet.commit()
    assert rows == 32
    assert ray.get(victim.info.remote())["pid"] != pid_before  # restarted by Ray
    summaries = fleet.summaries()
    fleet.close()
    assert [s["quarantined"] for s in summaries] == [0, 0]
    assert_same_rows(read_steps(tmp_path / "local"), read_steps(tmp_path / "ray"))


def test_default_tailers_watch_one_per_worker_analyze_one_per_eight():
    assert [default_tailers(w, watch=True) for w in (1, 2, 3, 4, 36)] == [1, 2, 3, 4, 4]
    analyze = [default_tailers(w, watch=False) for w in (1, 2, 8, 9, 16, 36, 64)]
    assert analyze == [1, 1, 1, 2, 2, 4, 4]
