"""A tailer actor killed mid-watch (SIGKILL while it commits) is restarted by Ray and
given its runs again; it resumes them from their resume states, deleting the rows of
the commit it died in, and the watch ends with the steps table `analyze` writes on
the finished runs: no row lost, none twice."""

from __future__ import annotations

import os
import signal
import threading
import time

import ray

from rlstream.config import PipelineConfig
from rlstream.pipeline.local import analyze_local
from rlstream.runtime.driver import ActorPools, RuntimeConfig
from rlstream.simulate import SimConfig, simulate_live
from tests.outputs import out_sql
from tests.runtime.helpers import assert_same_rows, read_steps

RUNS, STEPS = 2, 16


def _pid(actor) -> int:
    return ray.get(actor.__ray_call__.remote(lambda _self: os.getpid()))


def test_a_tailer_killed_mid_watch_resumes_its_runs_exactly(ray_session, tmp_path):
    root, out = tmp_path / "runs", tmp_path / "out"
    sim = SimConfig(runs=RUNS, steps=STEPS, scenarios=("healthy", "low_ess"), seed=21)
    writer = threading.Thread(target=simulate_live, args=(root, sim, 0.3))
    root.mkdir()
    # The default settle: the simulator's live writer, like a trainer's buffered
    # writes, can finish a group's rollouts lines just after the step's own line.
    cfg = PipelineConfig(transcripts_per_unit=4)
    fleet = ActorPools([str(root)], str(out), cfg, RuntimeConfig(workers=2, tailers=1))
    fleet.ready()
    writer.start()  # the runs are written while the watch runs
    deadline = time.monotonic() + 240
    killed_at = None
    try:
        while True:
            assert time.monotonic() < deadline, "the watch did not reach the batch rows"
            fleet.discover()
            fleet.poll()
            if killed_at is None and (out / "steps").exists() and writer.is_alive():
                # Die while committing: the commit's appends may land, its states not.
                killed_at = len(read_steps(out))
                pid = _pid(fleet.tailers[0])
                threading.Timer(0.05, os.kill, (pid, signal.SIGKILL)).start()
            fleet.commit()
            if not writer.is_alive() and fleet.all_finished():
                fleet.poll(final=True)
                fleet.commit()
                break
        summaries = fleet.summaries()
    finally:
        fleet.close()
        writer.join()
    assert killed_at is not None and 0 < killed_at < RUNS * STEPS
    assert fleet.tailer_restarts >= 1
    assert len(summaries) == RUNS
    dup = out_sql(out, "select run_id, step from steps group by all having count(*) > 1")
    assert dup == []
    if (out / "quarantine").exists():  # nothing arrived for a step already final
        assert out_sql(out, "select count(*) from quarantine where reason = 'late'") == [(0,)]
    analyze_local([str(root)], str(tmp_path / "batch"))
    batch = read_steps(tmp_path / "batch")
    assert len(batch) == RUNS * STEPS
    assert_same_rows(batch, read_steps(out))
