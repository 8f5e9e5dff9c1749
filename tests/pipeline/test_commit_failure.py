"""A commit that fails half-way is undone and retried: nothing lost, nothing twice."""

from __future__ import annotations

import pytest

from rlstream.config import PipelineConfig
from rlstream.pipeline.local import build_group, local_executor
from tests.outputs import out_sql
from tests.pipeline.runfiles import write_run


def _group(tmp_path):
    write_run(tmp_path / "runs", steps=3)
    group = build_group([str(tmp_path / "runs")], str(tmp_path / "out"), PipelineConfig())
    group.poll(local_executor(group.storage), final=True)
    return group, next(iter(group.states()))


def _steps(tmp_path):
    return out_sql(tmp_path / "out", "select step from steps order by step")


def test_failed_state_write_is_retried_without_duplicates(tmp_path):
    """The tables are written first: a state write that fails leaves rows of a commit
    the state does not account for; the next commit deletes them, then writes them
    again with its state."""
    group, state = _group(tmp_path)
    real = group.sink.save_state
    calls = []

    def flaky(run_id, data):
        calls.append(run_id)
        if len(calls) == 1:
            raise OSError("disk full")
        real(run_id, data)

    group.sink.save_state = flaky
    assert group.commit() == 0
    assert state.seq == 0 and len(state.out["steps"]) == 3 and group.dirty == {state.run_url}
    assert state.check and _steps(tmp_path) == [(0,), (1,), (2,)]  # landed, not durable
    assert group.written["steps"] == 0  # not the run's until its state is written
    assert group.commit() == 1
    assert _steps(tmp_path) == [(0,), (1,), (2,)]
    assert state.seq == 1 and state.out == {} and not state.check
    assert group.written["steps"] == 3
    seqs = out_sql(tmp_path / "out", "select distinct commit_seq from steps")
    assert seqs == [(1,)]


@pytest.mark.parametrize("landed", [False, True])
def test_failed_append_is_undone_and_retried(tmp_path, landed):
    """An append that raised may or may not have landed (a timeout after the commit):
    the run's state is not written, and the next commit deletes what landed before it
    appends the rows again."""
    group, state = _group(tmp_path)
    real = group.sink.append

    def flaky(table, data, txns):
        if table == "steps" and not flaky.done:
            flaky.done = True
            if landed:
                real(table, data, txns)
            raise OSError("connection reset")
        real(table, data, txns)

    flaky.done = False
    group.sink.append = flaky
    assert group.commit() == 0  # no table after it, no state
    assert state.check and state.seq == 0 and group.dirty == {state.run_url}
    assert _steps(tmp_path) == ([(0,), (1,), (2,)] if landed else [])
    assert group.written["steps"] == 0 and group.written["run_health"] == 0
    assert not group.sink.exists("run_health")  # the tables after it were not written
    assert group.commit() == 1
    assert _steps(tmp_path) == [(0,), (1,), (2,)]
    assert not state.check and group.dirty == set() and state.seq == 1
    (n,) = out_sql(tmp_path / "out", "select count(*) from steps")[0]
    assert group.written["steps"] == n == 3 and group.written["run_health"] == 1


def test_rejected_run_is_quarantined_once_across_restarts(tmp_path):
    run = write_run(tmp_path / "runs", steps=1)
    (run / "run.json").write_text("{broken")
    for _ in range(2):  # a restart with the same OUT writes nothing new
        group = build_group([str(tmp_path / "runs")], str(tmp_path / "out"), PipelineConfig())
        group.commit()
    rows = out_sql(tmp_path / "out", "select run_id, reason from quarantine")
    assert rows == [("_rejected", "bad_run_json")]


def test_failed_units_are_run_again_in_batch_mode(tmp_path):
    from rlstream.pipeline.work import UnitFailure, execute

    write_run(tmp_path / "runs", steps=3)
    group = build_group([str(tmp_path / "runs")], str(tmp_path / "out"), PipelineConfig())
    seen: list[object] = []

    def flaky(units):  # every unit fails the first time it is run, as on a lost node
        for u in units:
            if u in seen:
                yield execute(u, group.storage)
            else:
                seen.append(u)
                yield UnitFailure(u, "worker died")

    group.poll(flaky, final=True)
    group.commit()
    rows = out_sql(f"{tmp_path}/out", "select step, attempts, transcripts from steps order by step")
    assert rows == [(0, 4, 4), (1, 4, 4), (2, 4, 4)]
    assert group.totals["failed_units"] == len(seen)


def test_a_failed_unit_holds_its_run_back_in_watch_mode(tmp_path):
    """In a watch a failed unit is planned again at the next poll; until it has run,
    its run finalizes nothing, or a step whose line was read (settle 0) would be
    written without that unit's transcripts and its late transcripts dropped."""
    from rlstream.pipeline.work import TranscriptsUnit, UnitFailure, execute

    write_run(tmp_path / "runs", steps=3)
    cfg = PipelineConfig(watermark_settle_seconds=0.0, transcripts_per_unit=2)
    group = build_group([str(tmp_path / "runs")], str(tmp_path / "out"), cfg)
    failed: list[object] = []

    def one_lost(units):  # the first transcripts unit fails once, as when its tailer died
        for u in units:
            if isinstance(u, TranscriptsUnit) and not failed:
                failed.append(u)
                yield UnitFailure(u, "worker died")
            else:
                yield execute(u, group.storage)

    group.poll(one_lost)
    assert failed and group.totals["failed_units"] == 1
    group.poll(one_lost)
    group.poll(one_lost, final=True)
    group.commit()
    rows = out_sql(f"{tmp_path}/out", "select step, attempts, transcripts from steps order by step")
    assert rows == [(0, 4, 4), (1, 4, 4), (2, 4, 4)]
    assert out_sql(f"{tmp_path}/out", "select count(*) from quarantine") == [(0,)]
