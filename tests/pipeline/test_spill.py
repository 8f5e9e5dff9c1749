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


def test_cohort_band_rows_spill_too(tmp_path):
    """Band rows ride in one run's commit: a cohort catching up on 300 steps spills
    them like steps, so that run's resume state stays as small as its peers'."""
    from rlstream.health import DEFAULT_RULES
    from rlstream.health.cohort import parse_cohort_rules
    from rlstream.pipeline.verdicts import HealthHooks
    from rlstream.simulate import SimConfig, simulate

    simulate(tmp_path / "runs", SimConfig(runs=3, steps=300, seed=5, groups=1, group_size=2))
    hooks = HealthHooks(DEFAULT_RULES, parse_cohort_rules(["all=*"]))
    group = build_group(
        [str(tmp_path / "runs")], str(tmp_path / "out"), PipelineConfig(), **hooks()
    )
    group.poll(local_executor(group.storage), final=True)
    states = list(group.states())
    assert sum(len(s.out_cohorts) for s in states) > 128  # more band rows than a state holds
    assert group.commit() == 3
    assert all("cohorts" not in s.outbox for s in states)
    sizes = sorted(p.stat().st_size for p in (tmp_path / "out" / "_resume").glob("*.state"))
    assert len(sizes) == 3 and sizes[-1] < 2 * sizes[0]
    spilled = group.sink.txn_versions("cohorts", [spill_id(s.run_id) for s in states])
    assert sum(v is not None for v in spilled.values()) == 1  # the run that owns the bands
    # --reset-run of the run that wrote the bands deletes its rows, not its cohort's
    # bands (its peers no longer hold the older steps to write them again).
    (owner,) = [r for r, v in spilled.items() if v is not None]
    run_id = owner.split(":")[1]
    bands = "select count(*) from cohorts"
    before = out_sql(tmp_path / "out", bands)
    assert group.sink.delete_run(run_id) > 0
    assert out_sql(tmp_path / "out", bands) == before
    assert out_sql(tmp_path / "out", f"select count(*) from steps where run_id = '{run_id}'") == [
        (0,)
    ]


def test_rows_carried_from_a_failed_append_land_before_a_later_backlog(tmp_path):
    """A steps append that did not land is carried into the next commit; if that
    commit also has a backlog to spill, the backlog must not land first: a run's steps
    rows reach the table in step order (the step digest skips rows at or below a
    run's last step), each once."""
    import shutil

    full = write_run(tmp_path / "full", steps=8, groups=1, group_size=2)
    run = tmp_path / "runs" / full.name
    (run / "transcripts").mkdir(parents=True)
    shutil.copy(full / "run.json", run / "run.json")
    lines = {
        f: (full / f).read_text().splitlines(keepends=True)
        for f in ("steps.jsonl", "rollouts.jsonl")
    }
    names = sorted(p.name for p in (full / "transcripts").iterdir())

    def grow(upto: int) -> None:  # the run's files up to step `upto` - 1
        (run / "steps.jsonl").write_text("".join(lines["steps.jsonl"][:upto]))
        (run / "rollouts.jsonl").write_text("".join(lines["rollouts.jsonl"][: 2 * upto]))
        for name in names[: 2 * upto]:
            shutil.copy(full / "transcripts" / name, run / "transcripts" / name)

    grow(2)
    group = build_group(
        [str(tmp_path / "runs")], str(tmp_path / "out"), PipelineConfig(commit_max_rows=3)
    )
    landed: list[list[int]] = []
    real = group.sink.append

    def append(table, data, txns):
        if table == "steps" and not append.failed:
            append.failed = True
            raise OSError("connection reset")  # did not land
        real(table, data, txns)
        if table == "steps":
            landed.append(data.column("step").to_pylist())

    append.failed = False
    group.sink.append = append
    group.poll(local_executor(group.storage), final=True)
    group.commit()
    state = next(iter(group.states()))
    assert state.unconfirmed == {"steps"} and landed == []
    grow(8)
    group.poll(local_executor(group.storage), final=True)
    group.commit()
    assert [sorted(steps) for steps in landed] == landed  # each append in step order
    flat = [s for steps in landed for s in steps]
    assert flat == list(range(8)) and not state.unconfirmed
    steps = "select step from steps order by step"
    assert out_sql(tmp_path / "out", steps) == [(s,) for s in range(8)]
