"""A run catching up on a long backlog keeps a small resume state (its rows go to the
tables, before the state, never into it), and the rows of a commit whose state was
never written are deleted before the run commits again."""

from __future__ import annotations

from rlstream.config import PipelineConfig
from rlstream.pipeline.local import build_group, local_executor
from rlstream.pipeline.rewind import app_id
from tests.outputs import out_sql
from tests.pipeline.runfiles import write_run

STEPS = 2000


def _backlog(tmp_path, out: str, **cfg):
    """A group whose run has STEPS steps folded and final before its first commit."""
    group = build_group([str(tmp_path / "runs")], str(tmp_path / out), PipelineConfig(**cfg))
    group.poll(local_executor(group.storage), final=True)
    state = next(iter(group.states()))
    assert len(state.out["steps"]) == STEPS
    return group, state


def _state_bytes(tmp_path, out: str) -> int:
    (path,) = (tmp_path / out / "_resume").glob("*.state")
    return path.stat().st_size


def test_a_long_backlog_commits_with_a_bounded_resume_state(tmp_path):
    write_run(tmp_path / "runs", steps=STEPS, groups=1, group_size=2, tokens=4)
    group, state = _backlog(tmp_path, "out")
    assert group.commit() == 1
    assert _state_bytes(tmp_path, "out") <= 16 * 1024
    got = out_sql(tmp_path / "out", "select count(*), count(distinct step) from steps")
    assert got == [(STEPS, STEPS)]
    assert group.written["steps"] == STEPS
    assert group.sink.txn_versions("steps", [app_id(state.run_id)]) == {
        app_id(state.run_id): state.seq
    }


def test_rows_spilled_by_a_commit_whose_state_failed_are_written_once(tmp_path):
    write_run(tmp_path / "runs", steps=5)
    group = build_group([str(tmp_path / "runs")], str(tmp_path / "out"), PipelineConfig())
    group.poll(local_executor(group.storage), final=True)
    state = next(iter(group.states()))
    real = group.sink.save_state
    group.sink.save_state = lambda *a: (_ for _ in ()).throw(OSError("disk full"))
    assert group.commit() == 0
    steps = "select step from steps order by step"
    assert out_sql(tmp_path / "out", steps) == [(s,) for s in range(5)]  # tables first
    assert state.seq == 0 and state.check and len(state.out["steps"]) == 5
    assert group.written["steps"] == 0  # not the run's until its state is written
    group.sink.save_state = real
    assert group.commit() == 1
    assert out_sql(tmp_path / "out", steps) == [(s,) for s in range(5)]
    assert group.written["steps"] == 5 and not state.check and state.seq == 1


def test_cohort_band_rows_stay_out_of_the_resume_state(tmp_path):
    """Band rows ride in one run's commit: a cohort catching up on 300 steps appends
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
    assert sum(len(s.out.get("cohorts", [])) for s in states) > 128
    assert group.commit() == 3
    sizes = sorted(p.stat().st_size for p in (tmp_path / "out" / "_resume").glob("*.state"))
    assert len(sizes) == 3 and sizes[-1] < 2 * sizes[0]
    spilled = group.sink.txn_versions("cohorts", [app_id(s.run_id) for s in states])
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


def test_rows_of_a_failed_append_land_before_a_later_backlog(tmp_path):
    """A steps append that did not land is retried with the next commit; if that
    commit also has a backlog, the backlog must not land first: a run's steps rows
    reach the table in step order (the step digest skips rows at or below a run's
    last step), each once."""
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
    group = build_group([str(tmp_path / "runs")], str(tmp_path / "out"), PipelineConfig())
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
    assert state.check and landed == []
    grow(8)
    group.poll(local_executor(group.storage), final=True)
    group.commit()
    assert [sorted(steps) for steps in landed] == landed  # each append in step order
    flat = [s for steps in landed for s in steps]
    assert flat == list(range(8)) and not state.check
    steps = "select step from steps order by step"
    assert out_sql(tmp_path / "out", steps) == [(s,) for s in range(8)]
