"""Live watch equals batch for every format, the simulated tracker logs included.

The trainer's writes are replayed one at a time, appended lines in two halves (a
poll sees the half line), with a poll of the in-process pipeline after each piece and
a commit now and then; then a final pass. The `steps` rows must equal those of one
batch analysis of the finished folder, and nothing may be quarantined in either.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from rlstream.config import PipelineConfig
from rlstream.pipeline.local import analyze_local, build_group, local_executor
from rlstream.simulate.trainers import Write, apply
from tests.formats.trainer_runs import FORMATS, batches, sim_runs, table
from tests.runtime.helpers import assert_same_rows, read_steps


@pytest.fixture(scope="module")
def sim(tmp_path_factory) -> Path:
    return sim_runs(tmp_path_factory.mktemp("sim") / "runs", steps=6)


def _pieces(batch: list[Write]) -> list[Write]:
    out: list[Write] = []
    for w in batch:
        if w.append and len(w.data) > 2:
            half = len(w.data) // 2
            out += [Write(w.path, w.data[:half], True), Write(w.path, w.data[half:], True)]
        else:
            out.append(w)
    return out


@pytest.mark.parametrize("fmt", (*FORMATS, "tensorboard", "wandb", "swanlab", "trackio", "mlflow"))
def test_live_equals_batch(tmp_path, sim, fmt):
    run = tmp_path / "live" / "r1"
    run.mkdir(parents=True)
    cfg = PipelineConfig(idle_final_seconds=1e9)
    group = None
    now = 0.0
    finals = []
    for batch in batches(sim, fmt):
        for w in _pieces(batch):
            apply(run, [w])
            now += 1.0
            if group is None:
                group = build_group([str(tmp_path / "live")], str(tmp_path / "out"), cfg)
                run_units = local_executor(group.storage)
                if not group.runs:
                    group = None
                    continue
            group.poll(run_units, now=now)
            finals.append(next(iter(group.runs.values())).final_through)
        if group is not None:
            group.commit(now=now)
    assert group is not None
    group.poll(run_units, now=now + 1, final=True)
    group.commit(now=now + 1)
    assert finals[-1] >= 2, "rows became final while the run was being written"
    analyze_local([str(tmp_path / "live")], str(tmp_path / "batch"), cfg)
    live, batch = read_steps(str(tmp_path / "out")), read_steps(str(tmp_path / "batch"))
    assert len(batch) == 6
    assert_same_rows(live, batch)
    assert table(tmp_path / "out", "quarantine") == []
    assert table(tmp_path / "batch", "quarantine") == []
