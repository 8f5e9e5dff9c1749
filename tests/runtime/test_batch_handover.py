"""`analyze` that works while Ray starts (runtime/held.py) equals the in-process
runner: units run in the driver, then on the workers, each folded exactly once."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import textwrap

import pytest
import ray

from rlstream.config import PipelineConfig
from rlstream.errors import RlstreamError
from rlstream.pipeline.local import analyze_local
from rlstream.runtime import held
from rlstream.runtime.cluster import TEMP_PARENT_ENV, RayConfig
from rlstream.runtime.driver import RuntimeConfig
from rlstream.runtime.driver import run as run_pipeline
from rlstream.simulate import SimConfig, simulate
from tests.runtime.helpers import assert_same_rows, read_steps

SCEN = ("healthy", "entropy_collapse", "rollout_failure_burst")
HERE = 10
"""Units the gated start below leaves to the driver before its workers take over."""


MADE: list = []
"""Instances of the two classes below, in the order made."""


class GatedStart(held.RayStart):
    """The workers become visible only after the driver asked `HERE` times, then
    at once (waiting for them): so the split is known, whatever the machine's speed."""

    asks = 0

    def __init__(self, *a, **k) -> None:
        super().__init__(*a, **k)
        MADE.append(self)

    def workers(self):
        self.asks += 1
        if self.asks <= HERE:
            return None
        self.settled.wait()
        return super().workers()


class CountingHandover(held.WorkerPool):
    def __init__(self, *a, **k) -> None:
        super().__init__(*a, **k)
        MADE.append(self)


def test_handover_equals_in_process_and_counts_each_unit_once(ray_session, tmp_path, monkeypatch):
    MADE.clear()
    simulate(tmp_path / "runs", SimConfig(runs=3, steps=12, scenarios=SCEN, seed=4))
    analyze_local([str(tmp_path / "runs")], str(tmp_path / "local"))
    monkeypatch.setattr(held, "RayStart", GatedStart)
    monkeypatch.setattr(held, "WorkerPool", CountingHandover)
    # Two chunks of runs, so the handover happens in the first and Ray is stopped
    # after the second's units.
    cfg = PipelineConfig(transcripts_per_unit=8, analyze_chunk_runs=2)
    summaries = run_pipeline(
        [str(tmp_path / "runs")],
        str(tmp_path / "ray"),
        cfg,
        RuntimeConfig(workers=2, early_start=True, start_ray_after=0.0),
    )
    assert [s["steps_final"] for s in summaries] == [12, 12, 12]
    assert [s["quarantined"] for s in summaries] == [0, 0, 0]
    start, handover = MADE
    # Per run: its transcripts in units of 8, and one unit each for steps and rollouts.
    units = sum(
        -(-len(list(d.glob("transcripts/*.json"))) // 8) + 2
        for d in (tmp_path / "runs").iterdir()
        if d.is_dir()
    )
    assert handover.counts == {"here": HERE, "workers": units - HERE}
    local = read_steps(tmp_path / "local")
    assert len(local) == 36
    assert_same_rows(local, read_steps(tmp_path / "ray"))
    # Ray was not started by this command (the session's): only its workers are gone.
    assert not start.started and len(start._actors) == 2
    for w in start._actors:
        with pytest.raises(ray.exceptions.RayActorError):
            ray.get(w.info.remote(), timeout=60)


def test_a_failed_start_is_a_clear_error(tmp_path):
    simulate(tmp_path / "runs", SimConfig(runs=1, steps=2, seed=1))

    class Broken(held.RayStart):
        def __init__(self, *a) -> None:
            super().__init__(*a)
            assert self.settled.wait(60)  # failed before the driver's first unit

        def _start(self) -> None:
            self.error = OSError("no room for the raylet")
            self.settled.set()

    with pytest.raises(RlstreamError, match=r"did not start.*no room for the raylet"):
        _analyze(*_inputs(tmp_path), lambda then: Broken(RayConfig(), None, 1), None)


def _inputs(tmp_path):
    from rlstream.io.storage import Storage
    from rlstream.pipeline.discover import find_runs
    from rlstream.sinks.delta import DeltaSink

    root = str(tmp_path / "runs")
    storage = Storage.for_url(root, {})
    urls = find_runs(storage, root)
    out = str(tmp_path / "out")
    sink = DeltaSink(out, Storage.for_url(out, {}), {}, False, 300)
    return urls, storage, sink, PipelineConfig()


def _analyze(urls, storage, sink, cfg, start, hooks) -> None:
    """The driver loop's `analyze` over a `HeldRuns` (`driver._drive`, less the rest)."""
    from rlstream.runtime.progress import Progress, StartupLog

    progress = Progress(sys.stderr, enabled=False)
    runs = held.HeldRuns(storage, sink, cfg, hooks, start, StartupLog(), progress)
    try:
        while not runs.drain(urls, progress):
            pass
    finally:
        runs.close()


def test_workers_import_no_sink_health_or_fleet(ray_session, tmp_path):
    """A worker process needs the readers and kernels, not the table writers."""
    from rlstream.io.storage import Storage
    from rlstream.runtime.actors import Worker

    w = Worker.remote(Storage.for_url(str(tmp_path), {}))
    try:
        loaded = ray.get(w.__ray_call__.remote(lambda self: sorted(sys.modules)), timeout=120)
    finally:
        ray.kill(w)
    assert "rlstream.pipeline.work" in loaded
    # pyarrow is not in the list: Ray imports it in every worker process itself
    # (ray.util.serialization_addons registers Arrow serializers).
    heavy = ("deltalake", "rlstream.health", "rlstream.fleet", "rlstream.sinks", "duckdb")
    assert [m for m in loaded if m.split(".")[0] in heavy or m.startswith(heavy)] == []


def test_private_ray_hands_over_and_stops(tmp_path):
    """The production path: `analyze` starting its own private Ray (in its own
    interpreter, so the tests' shared Ray is not touched). Ray is started from a
    thread; its processes must outlive neither the command nor that thread's start."""
    simulate(tmp_path / "runs", SimConfig(runs=2, steps=6, seed=9))
    analyze_local([str(tmp_path / "runs")], str(tmp_path / "local"))
    code = textwrap.dedent(
        f"""
        import os
        from rlstream.config import PipelineConfig
        from rlstream.runtime import held
        from rlstream.runtime.driver import RuntimeConfig, run

        class Gated(held.RayStart):
            asks = 0

            def workers(self):
                # two units here, the rest once the workers answered
                self.asks += 1
                if self.asks > 2:
                    self.settled.wait()
                return super().workers() if self.asks > 2 else None

        made = []
        class Counting(held.WorkerPool):
            def __init__(self, *a, **k):
                super().__init__(*a, **k)
                made.append(self)

        held.RayStart, held.WorkerPool = Gated, Counting
        cfg = PipelineConfig(transcripts_per_unit=4)
        run([{str(tmp_path / "runs")!r}], {str(tmp_path / "ray")!r}, cfg, RuntimeConfig(start_ray_after=0.0))
        print(made[0].counts["here"], made[0].counts["workers"])
        """
    )
    parent = tempfile.mkdtemp(prefix="rlh", dir="/tmp")
    try:
        env = {**os.environ, TEMP_PARENT_ENV: parent}
        env.pop("RAY_ADDRESS", None)
        res = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=600
        )
        assert res.returncode == 0, res.stderr[-3000:]
        here, on_ray = map(int, res.stdout.split())
        assert here == 2 and on_ray > 0
        assert os.listdir(parent) == []  # Ray stopped, its temp folder removed
    finally:
        shutil.rmtree(parent, ignore_errors=True)
    assert_same_rows(read_steps(tmp_path / "local"), read_steps(tmp_path / "ray"))


class NoWorkers:
    """A Ray start that never has workers: every unit runs in the driver."""

    def __init__(self, then=None) -> None:
        self.error, self.phases, self._actors, self.delay = None, {}, [], 1.0

    def workers(self):
        return None

    def stop(self) -> None:
        pass

    def join(self) -> None:
        pass


def test_batch_path_keeps_a_cohort_in_one_chunk_like_in_process(tmp_path):
    from deltalake import DeltaTable

    from rlstream.health import DEFAULT_RULES
    from rlstream.health.cohort import parse_cohort_rules
    from rlstream.io.storage import Storage
    from rlstream.pipeline.local import runs_or_fail
    from rlstream.pipeline.verdicts import HealthHooks
    from rlstream.sinks.delta import DeltaSink

    simulate(tmp_path / "runs", SimConfig(runs=4, steps=12, scenarios=("healthy",), seed=4))
    hooks = HealthHooks(DEFAULT_RULES, parse_cohort_rules(["all=*"]))
    cfg = PipelineConfig(analyze_chunk_runs=2)  # smaller than the cohort of 4
    analyze_local([str(tmp_path / "runs")], str(tmp_path / "local"), cfg, **hooks())
    storage, urls = runs_or_fail([str(tmp_path / "runs")], str(tmp_path / "b"), cfg)
    out = str(tmp_path / "b")
    sink = DeltaSink(out, Storage.for_url(out, {}), {}, cfg.fsync, cfg.retention_seconds)

    _analyze(urls, storage, sink, cfg, NoWorkers, hooks)

    def bands(name: str) -> list[tuple]:
        t = DeltaTable(str(tmp_path / name / "cohorts")).to_pyarrow_table()
        return sorted(zip(*(t[c].to_pylist() for c in ("step", "figure", "n", "p50")), strict=True))

    local, here = bands("local"), bands("b")
    assert {n for _, _, n, _ in local} == {4}  # every step banded over the whole cohort
    assert here == local  # one band row per (step, figure), the same values


def test_archive_done_within_the_delay_starts_no_ray(tmp_path):
    """With `--start-ray-after` longer than the work, `analyze` on a private Ray starts
    none: no temp folder is made, no Ray process runs, the tables are in-process's."""
    simulate(tmp_path / "runs", SimConfig(runs=1, steps=4, seed=3))
    analyze_local([str(tmp_path / "runs")], str(tmp_path / "local"))
    cmd = [sys.executable, "-m", "rlstream.cli", "analyze", str(tmp_path / "runs")]
    cmd += ["--out", str(tmp_path / "ray"), "--start-ray-after", "120"]
    parent = tempfile.mkdtemp(prefix="rld", dir="/tmp")
    try:
        env = {**os.environ, TEMP_PARENT_ENV: parent}
        env.pop("RAY_ADDRESS", None)
        res = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=100)
        assert res.returncode == 0, res.stderr[-3000:]
        assert "no Ray started (done within 120.0 s)" in res.stderr
        assert os.listdir(parent) == []  # no Ray temp folder was ever made
        left = subprocess.run(["pgrep", "-f", parent], capture_output=True, text=True)
        assert left.stdout.split() == []
    finally:
        shutil.rmtree(parent, ignore_errors=True)
    assert_same_rows(read_steps(tmp_path / "local"), read_steps(tmp_path / "ray"))
