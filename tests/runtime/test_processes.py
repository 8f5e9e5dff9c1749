"""Worker processes (runtime/processes.py): `analyze` with its units in worker
processes writes the rows the in-process runner writes; a worker killed with batches
in flight fails those units alone (each unit answered once), and the pool goes on
with the live one; the pool stops its processes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from rlstream.io.storage import Storage
from rlstream.pipeline.local import analyze_local
from rlstream.pipeline.work import TranscriptsUnit, UnitFailure, UnitResult, execute
from rlstream.runtime.executors import WorkerPool
from rlstream.runtime.processes import PROCESS_CALLS, LocalStart
from rlstream.simulate import SimConfig, simulate
from tests.outputs import out_sql
from tests.runtime.helpers import assert_same_rows, read_steps


def _samples(out: Path) -> list[tuple]:
    return out_sql(
        out,
        "select run_id, step, attempt_id, kept, flags, reward, returned from samples "
        "order by run_id, step, attempt_id",
    )


def test_analyze_in_worker_processes_writes_the_in_process_rows(tmp_path):
    root = tmp_path / "runs"
    simulate(root, SimConfig(runs=3, steps=6, groups=4, group_size=4, seed=21))
    analyze_local([str(root)], str(tmp_path / "local"))
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}  # no cluster
    cmd = [sys.executable, "-m", "rlstream.cli", "analyze", str(root)]
    res = subprocess.run(
        [*cmd, "--out", str(tmp_path / "procs"), "--processes", "2"],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert res.returncode == 0, res.stderr[-3000:]
    local = read_steps(tmp_path / "local")
    assert len(local) == 18
    assert_same_rows(local, read_steps(tmp_path / "procs"))
    kept = _samples(tmp_path / "local")
    assert kept and kept == _samples(tmp_path / "procs")
    said = [line for line in res.stdout.splitlines() if line.startswith("ran ")]
    assert said in (
        ["ran in this process and 2 worker processes (asked for: --processes 2)"],
        [
            "ran in this process (asked for: --processes 2): done before the worker "
            "processes were ready"
        ],
    )


def _units(root: Path) -> tuple[Storage, list[TranscriptsUnit]]:
    run_dir = next(p for p in sorted(root.iterdir()) if p.is_dir())
    names = sorted(p.name for p in (run_dir / "transcripts").iterdir())
    units = [
        TranscriptsUnit("r", str(run_dir), tuple(names[i : i + 8]), -1)
        for i in range(0, len(names), 8)
    ]
    return Storage.for_url(str(root), roots=[str(root)]), units


def _figures(res: UnitResult) -> dict:
    return {s: p.agg.finalize() for s, p in sorted(res.partials.items())}


def test_worker_results_equal_the_drivers_and_a_killed_worker_fails_its_units_alone(tmp_path):
    root = tmp_path / "runs"
    simulate(root, SimConfig(runs=1, steps=8, groups=4, group_size=4, seed=5))
    storage, units = _units(root)
    assert len(units) >= 12
    start = LocalStart(storage, 2, delay=0)
    try:
        assert start.settled.wait(120) and start.error is None
        workers = start.workers()
        assert workers is not None and len(workers) == 2
        victim = workers[0]
        pids = [w.pid for w in workers]
        assert all(pid and pid != os.getpid() for pid in pids)

        def kill_once() -> None:
            if victim.process.poll() is None:
                os.kill(victim.pid, signal.SIGKILL)
                victim.process.wait()

        pool = WorkerPool(storage, start.workers, 16, on_result=kill_once, calls=PROCESS_CALLS)
        got = list(pool(units))
        assert len(got) == len(units)  # each unit answered once, as a result or a failure
        failed = [r.unit for r in got if isinstance(r, UnitFailure)]
        done = [r for r in got if isinstance(r, UnitResult)]
        assert failed, "the killed worker had batches in flight"
        assert all("WorkerLost" in r.error for r in got if isinstance(r, UnitFailure))
        assert {u.names for u in failed}.isdisjoint({r.names for r in done})
        assert {u.names for u in failed} | {r.names for r in done} == {u.names for u in units}
        by_names = {u.names: u for u in units}
        for r in done:
            assert _figures(r) == _figures(execute(by_names[r.names], storage))
        assert start.workers() == [workers[1]]  # the dead one is left out from then on
        again = list(WorkerPool(storage, start.workers, 16, calls=PROCESS_CALLS)(failed))
        assert all(isinstance(r, UnitResult) for r in again)
    finally:
        start.join()
    assert not start.alive()
    assert "stop" in start.phases


def test_stopped_before_now_starts_no_process(tmp_path):
    storage = Storage.for_url(str(tmp_path), roots=[str(tmp_path)])
    start = LocalStart(storage, 2)  # delay None: waits for now()
    start.join()
    assert "skipped" in start.phases and start.workers() is None and not start._workers


def test_a_driver_script_without_a_main_guard_runs_once(tmp_path):
    """Workers are fresh interpreters of this package: the driver's own script is
    never imported again in them (multiprocessing's spawn or forkserver would run an
    unguarded script once more in every worker)."""
    root = tmp_path / "runs"
    simulate(root, SimConfig(runs=2, steps=4, seed=2))
    marker = tmp_path / "ran.txt"
    script = tmp_path / "drive.py"
    script.write_text(
        "from rlstream.cli import main\n"
        f"open({str(marker)!r}, 'a').write('ran\\n')\n"
        f"main(['analyze', {str(root)!r}, '--out', {str(tmp_path / 'out')!r}, "
        "'--processes', '2'])\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    res = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, env=env, timeout=300
    )
    assert res.returncode == 0, res.stderr[-3000:]
    assert marker.read_text() == "ran\n"
    assert "did not start" not in res.stderr
    assert len(read_steps(tmp_path / "out")) == 8
