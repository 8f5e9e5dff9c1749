"""Rewind: the rows of a commit whose resume state was never written are deleted at the
next commit, and the digests maintenance built from them are rewound.

A dead process leaves such rows (the tables are written before the state). They may
differ from what the run writes once it reads its data again (a step finalized by
time before all its transcripts were there), so a digest must not keep their values
even when a maintenance pass folded them in before the restart deleted them. The
reference is the digest of the steps (bands of the cohorts) table read back whole.
"""

from __future__ import annotations

import shutil

from rlstream.config import PipelineConfig
from rlstream.metrics.downsample import fold_runs
from rlstream.pipeline.local import build_group, local_executor
from rlstream.pipeline.rewind import app_id
from rlstream.pipeline.rows import steps_table
from rlstream.sinks.band_digest import current_bands, read_band_digest
from rlstream.sinks.cohorts import cohorts_table, newest_bands
from rlstream.sinks.maintain import maintain
from rlstream.sinks.step_digest import current_step_digest, read_step_digest
from tests.pipeline.runfiles import write_run
from tests.pipeline.test_step_digest import assert_same

ODD = 99.0
"""The orphans' reward_mean: no step of the run has it."""


def _grow(full, run, upto: int) -> None:
    """The run's files up to step `upto` - 1 (2 groups of 2 per step)."""
    (run / "transcripts").mkdir(parents=True, exist_ok=True)
    shutil.copy(full / "run.json", run / "run.json")
    for f, per in (("steps.jsonl", 1), ("rollouts.jsonl", 2)):
        lines = (full / f).read_text().splitlines(keepends=True)
        (run / f).write_text("".join(lines[: per * upto]))
    for name in sorted(p.name for p in (full / "transcripts").iterdir())[: 4 * upto]:
        shutil.copy(full / "transcripts" / name, run / "transcripts" / name)


def _group(tmp_path):
    group = build_group([str(tmp_path / "runs")], str(tmp_path / "out"), PipelineConfig())
    group.poll(local_executor(group.storage), final=True)
    return group, next(iter(group.states()))


def _reference(sink):
    from rlstream.fleet.read import read_table

    return fold_runs({}, read_table(sink.out, "steps"))


def test_a_pass_between_a_dead_commit_and_its_rewind_keeps_no_deleted_value(tmp_path):
    full = write_run(tmp_path / "full", steps=8, finished=False)
    run = tmp_path / "runs" / full.name
    _grow(full, run, 5)
    group, state = _group(tmp_path)
    assert group.commit() == 1 and state.seq == 1
    # A process that died after its steps append of commit 2, before the state: its
    # rows for steps 5-6 (finalized before their data was all there) are in the table.
    rows = [dict(r, reward_mean=ODD) for r in _steps_rows(group.sink, state.run_id, (3, 4))]
    for r, step in zip(rows, (5, 6), strict=True):
        r.update(step=step, commit_seq=2)
    group.sink.append("steps", steps_table(rows), {app_id(state.run_id): 2})
    maintain(group.sink)  # the pass folds them into the step digest
    stored, _ = read_step_digest(group.sink)
    assert ODD in stored[state.run_id].series[("reward_mean", "")][1].tolist()
    # The restart: the run reads its data again (now to step 7) and commits.
    _grow(full, run, 8)
    group, state = _group(tmp_path)
    assert state.seq == 1 and state.check
    assert group.commit() == 1 and state.seq == 2 and not state.check
    steps = _steps_rows(group.sink, state.run_id, range(8))
    assert [r["step"] for r in steps] == list(range(8))
    assert ODD not in [r["reward_mean"] for r in steps]
    want = _reference(group.sink)
    got, _ = current_step_digest(group.sink)  # a reader, before the next pass
    assert_same(got, want)
    assert ODD not in got[state.run_id].series[("reward_mean", "")][1].tolist()
    maintain(group.sink)
    stored, _ = read_step_digest(group.sink)
    assert_same(stored, want)


def test_a_pass_between_dead_band_rows_and_their_rewind_keeps_no_deleted_band(tmp_path):
    """The same for the band digest: band rows of the dead commit, with a larger `n`
    (they would win), are deleted and the cohort's digest rebuilt from the rows left."""
    write_run(tmp_path / "runs", steps=3)
    group, state = _group(tmp_path)
    assert group.commit() == 1
    band = {"cohort": "c", "figure": "reward_mean", "p10": 0.0, "p50": 0.5, "p90": 1.0}
    band |= {"median": 0.5, "mad": 0.1, "run_id": state.run_id}
    kept = [{**band, "step": s, "n": 2, "as_of": 1000.0, "commit_seq": 1} for s in range(3)]
    group.sink.append("cohorts", cohorts_table(kept), {app_id(state.run_id): 1})
    dead = [
        {**band, "step": s, "n": 9, "p50": ODD, "as_of": 1001.0, "commit_seq": 2} for s in (1, 2)
    ]
    group.sink.append("cohorts", cohorts_table(dead), {app_id(state.run_id): 2})
    maintain(group.sink)
    stored, _ = read_band_digest(group.sink, None)
    assert ODD in stored.column("p50").to_pylist()
    group, state = _group(tmp_path)  # the restart (the run has nothing new)
    group.commit(force=True)
    from rlstream.fleet.read import read_table

    rows = read_table(group.sink.out, "cohorts")
    assert sorted(rows.column("n").to_pylist()) == [2, 2, 2]
    want = newest_bands(rows).column("p50").to_pylist()
    got, _ = current_bands(group.sink)
    assert got.column("p50").to_pylist() == want and ODD not in want
    maintain(group.sink)
    stored, _ = read_band_digest(group.sink, None)
    assert stored.column("p50").to_pylist() == want


def _steps_rows(sink, run_id, steps):
    from rlstream.fleet.read import read_table

    t = read_table(sink.out, "steps", where=("run_id", run_id)).to_pylist()
    by_step = {r["step"]: r for r in t}
    return [by_step[s] for s in steps if s in by_step]


def test_a_pass_that_read_a_dead_commit_never_writes_over_its_rewind(tmp_path):
    """A pass that read the rows of a dead commit before the rewind deleted them
    cannot write its digest after it: the rewind's overwrite makes the pass's fail
    (the `_pass` row), and it builds again from the rows left. Also when the run is in
    no digest yet (the rewind then changes nothing but the version)."""
    from rlstream.fleet.read import out_sink
    from rlstream.pipeline.commit import TABLES
    from rlstream.pipeline.rewind import rewind
    from rlstream.pipeline.state import RunState
    from rlstream.sinks.delta import STEP_DIGEST_TABLE
    from rlstream.sinks.step_digest import rewrite, to_table

    sink = out_sink(str(tmp_path / "out"), retention_seconds=0)

    def rows(run_id, steps, seq, value):
        return steps_table(
            [
                {"run_id": run_id, "step": s, "reward_mean": value + s, "commit_seq": seq}
                for s in steps
            ]
        )

    sink.append("steps", rows("r0", range(20), 1, 0.0), {app_id("r0"): 1})
    maintain(sink)  # a digest of r0 only
    sink.append("steps", rows("r1", range(10), 1, 0.0), {app_id("r1"): 1})
    sink.append("steps", rows("r1", range(10, 15), 2, ODD), {app_id("r1"): 2})  # dead
    state = RunState(run_id="r1", run_url="", seq=1)  # its last state: commit 1
    seen: list[bool] = []

    def build(dt):
        by_run, files = current_step_digest(sink, dt)
        seen.append(any(v >= ODD for v in by_run["r1"].series[("reward_mean", "")][1]))
        if len(seen) == 1:
            assert rewind(sink, [state], TABLES) == 5  # lands between the read and the write
        return to_table(by_run, files)

    rewrite(sink, STEP_DIGEST_TABLE, build)
    assert seen == [True, False]
    stored, _ = read_step_digest(sink)
    assert_same(stored, _reference(sink))
    assert stored["r1"].last_step == 9
