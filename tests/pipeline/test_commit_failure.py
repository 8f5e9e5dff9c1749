"""A commit that fails half-way is undone and retried: nothing lost, nothing twice."""

from __future__ import annotations

import duckdb

from rlstream.config import PipelineConfig
from rlstream.pipeline.local import build_group, local_executor
from tests.pipeline.runfiles import write_run


def test_failed_commit_is_retried_without_duplicates(tmp_path):
    write_run(tmp_path / "runs", steps=3)
    group = build_group([str(tmp_path / "runs")], str(tmp_path / "out"), PipelineConfig())
    group.poll(local_executor(group.storage), final=True)
    state = next(iter(group.states()))
    real = group.sink.save_checkpoint
    calls = []

    def flaky(run_id, st):
        calls.append(run_id)
        if len(calls) == 1:
            raise OSError("disk full")  # after the data files of commit 1 were written
        real(run_id, st)

    group.sink.save_checkpoint = flaky
    assert group.commit() == 0
    assert state.seq == 0 and len(state.out_rows) == 3 and group.dirty == {state.run_url}
    assert not list((tmp_path / "out" / "steps").glob("*/*.parquet"))  # undone
    assert group.commit() == 1
    rows = duckdb.sql(
        f"select step from read_parquet('{tmp_path}/out/steps/*/*.parquet') order by step"
    ).fetchall()
    assert rows == [(0,), (1,), (2,)]
    assert state.seq == 1 and state.out_rows == []


def test_rejected_run_file_is_removed_once_the_run_reads(tmp_path):
    run = write_run(tmp_path / "runs", steps=1)
    good = (run / "run.json").read_text()
    (run / "run.json").write_text("{broken")
    group = build_group([str(tmp_path / "runs")], str(tmp_path / "out"), PipelineConfig())
    group.commit()
    rejected = list((tmp_path / "out" / "quarantine" / "run_id=_rejected").glob("*.parquet"))
    assert len(rejected) == 1
    (run / "run.json").write_text(good)
    assert group.add_run(str(run)) is not None
    group.commit()
    assert not rejected[0].exists()


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
    rows = duckdb.sql(
        f"select step, attempts, transcripts from read_parquet('{tmp_path}/out/steps/*/*.parquet') "
        "order by step"
    ).fetchall()
    assert rows == [(0, 4, 4), (1, 4, 4), (2, 4, 4)]
    assert group.totals["failed_units"] == len(seen)
