"""Every format's run state goes through the resume-state encoding, and a restart
continues it exactly.

A run is read half-way and committed; its resume state must decode to the same
fields (format, writers, per-writer steps, consumed step files, snapshot cursors) and
encode to the same bytes. A new process then resumes from OUT and reads the rest:
its `steps` rows equal one batch analysis of the finished folder, nothing is
quarantined, and run_health (Delta) names the run's format and its not-evaluable codes.
Per-step files are remembered by name only `transcript_window` steps below the last
final step; one arriving below that is quarantined.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from rlstream.config import PipelineConfig
from rlstream.pipeline.local import analyze_local, build_group, local_executor
from rlstream.pipeline.resume import decode_state, encode_state
from rlstream.pipeline.verdicts import health_hooks
from rlstream.simulate.trainers import apply
from tests.formats.trainer_runs import FORMATS, batches, sim_runs, table
from tests.runtime.helpers import assert_same_rows, read_steps


@pytest.fixture(scope="module")
def sim(tmp_path_factory) -> Path:
    return sim_runs(tmp_path_factory.mktemp("sim") / "runs", steps=6)


def _group(root: Path, out: Path, cfg: PipelineConfig):
    group = build_group([str(root)], str(out), cfg, **health_hooks())
    return group, local_executor(group.storage)


@pytest.mark.parametrize("fmt", FORMATS)
def test_format_state_resumes_exactly(tmp_path, sim, fmt):
    root, out = tmp_path / "live", tmp_path / "out"
    run = root / "r1"
    run.mkdir(parents=True)
    cfg = PipelineConfig(idle_final_seconds=1e9, transcript_window=1)
    todo = batches(sim, fmt)
    half = len(todo) // 2
    for batch in todo[:half]:
        apply(run, batch)
    group, execute = _group(root, out, cfg)
    group.poll(execute, now=10.0)
    group.commit(now=10.0)
    state = next(iter(group.runs.values()))
    assert state.format == fmt and state.max_reported_step >= 1

    data = encode_state(state)
    back = decode_state(data, "x", "y")
    assert encode_state(back) == data
    names = ("format", "parts", "part_steps", "step_files", "step_low", "step_below")
    for name in (*names, "cursors", "reported"):
        assert getattr(back, name) == getattr(state, name), name
    assert type(back.parts) is tuple and back.parts == tuple(back.parts)

    for batch in todo[half:]:
        apply(run, batch)
    group, execute = _group(root, out, cfg)
    resumed = next(iter(group.runs.values()))
    assert resumed.seq == state.seq and resumed.final_through == state.final_through
    assert resumed.format == fmt
    group.poll(execute, now=20.0, final=True)
    group.commit(now=20.0)

    done = next(iter(group.runs.values()))
    wide = analyze_local([str(root)], str(tmp_path / "wide"), replace(cfg, transcript_window=256))
    analyze_local([str(root)], str(tmp_path / "batch"), cfg)
    live, once = read_steps(str(out)), read_steps(str(tmp_path / "batch"))
    assert len(once) == 6
    assert_same_rows(live, once)
    assert table(out, "quarantine") == []
    health = table(out, "run_health", "order by commit_seq")
    assert {h["format"] for h in health} == {fmt}
    assert all(isinstance(h["not_evaluable"], list) for h in health)
    assert (
        health[-1]["not_evaluable"] == table(tmp_path / "batch", "run_health")[-1]["not_evaluable"]
    )
    if fmt == "verl":
        return  # its dumps are not in the simulated run: no per-step files
    # Per-step files are remembered by name within one step of final_through only
    # (the low step moves when a poll plans).
    group.poll(execute, now=25.0, final=True)
    assert set(done.step_low.values()) == {done.final_through - 1}
    assert 0 < len(done.step_files) < len(wide[0].step_files)
    # An entry that arrives at or below the low step is quarantined, never missed.
    prefix = next(iter(done.step_below))
    done.step_below[prefix] -= 1
    group.poll(execute, now=30.0, final=True)
    late = [q for q in done.out_quarantine if q.reason == "step_file_below_window"]
    assert len(late) == 1 and late[0].detail.startswith("1 step")
