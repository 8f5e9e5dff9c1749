"""A run catching up on a long backlog keeps a small resume state: its rows beyond
`commit_max_rows` are spilled (appended before the state), and spilled rows of a
commit whose state was never written are deleted before the run commits again."""

from __future__ import annotations

from rlstream.config import PipelineConfig
from rlstream.pipeline.local import build_group, local_executor
from rlstream.pipeline.spill import spill_id
from tests.outputs import out_sql
from tests.pipeline.runfiles import write_run

STEPS = 2000


def _backlog(tmp_path, out: str, **cfg):
    """A group whose run has STEPS steps folded and final before its first commit."""
    group = build_group([str(tmp_path / "runs")], str(tmp_path / out), PipelineConfig(**cfg))
    group.poll(local_executor(group.storage), final=True)
    state = next(iter(group.states()))
    assert len(state.out_rows) == STEPS
    return group, state


def _state_bytes(tmp_path, out: str) -> int:
    (path,) = (tmp_path / out / "_resume").glob("*.state")
    return path.stat().st_size


def test_a_long_backlog_commits_with_a_bounded_resume_state(tmp_path):
    write_run(tmp_path / "runs", steps=STEPS, groups=1, group_size=2, tokens=4)
    group, state = _backlog(tmp_path, "out")
    assert group.commit() == 1
    assert _state_bytes(tmp_path, "out") <= 64 * 1024
    assert "steps" not in state.outbox  # spilled, not carried in the state
    got = out_sql(tmp_path / "out", "select count(*), count(distinct step) from steps")
    assert got == [(STEPS, STEPS)]
    assert group.written.rows["steps"] == STEPS
    assert group.sink.txn_versions("steps", [spill_id(state.run_id)]) == {
        spill_id(state.run_id): state.seq
    }
    # The same commit without spills carries every row in the state: over the bound.
    group, state = _backlog(tmp_path, "whole", commit_max_rows=10**9)
    assert group.commit() == 1
    assert _state_bytes(tmp_path, "whole") > 64 * 1024 and "steps" in state.outbox
    same = "select * exclude (reported_other) from steps order by step"
    assert out_sql(tmp_path / "whole", same) == out_sql(tmp_path / "out", same)


def test_rows_spilled_by_a_commit_whose_state_failed_are_written_once(tmp_path):
    write_run(tmp_path / "runs", steps=5)
    group = build_group(
        [str(tmp_path / "runs")], str(tmp_path / "out"), PipelineConfig(commit_max_rows=2)
    )
    group.poll(local_executor(group.storage), final=True)
    state = next(iter(group.states()))
    real = group.sink.save_state
    group.sink.save_state = lambda *a: (_ for _ in ()).throw(OSError("disk full"))
    assert group.commit() == 0
    steps = "select step from steps order by step"
    assert out_sql(tmp_path / "out", steps) == [(s,) for s in range(5)]  # spilled
    assert state.seq == 0 and state.spill_check and len(state.out_rows) == 5
    assert group.written.rows["steps"] == 0  # not the run's until its state is written
    group.sink.save_state = real
    assert group.commit() == 1
    assert out_sql(tmp_path / "out", steps) == [(s,) for s in range(5)]
    assert group.written.rows["steps"] == 5 and not state.spill_check and state.seq == 1
