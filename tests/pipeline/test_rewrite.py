"""The documented rewrite policy, through the pipeline: a replaced file is re-read from
offset 0, and records of steps already consumed are quarantined, never counted twice."""

from __future__ import annotations

import json

from rlstream.config import PipelineConfig
from rlstream.pipeline.local import build_group, local_executor
from tests.outputs import out_sql
from tests.pipeline.runfiles import write_run


def test_replaced_rollouts_file_is_not_counted_twice(tmp_path):
    run = write_run(tmp_path / "runs", steps=4, finished=False)
    rolls = run / "rollouts.jsonl"
    lines = rolls.read_text().splitlines(keepends=True)
    first = [ln for ln in lines if json.loads(ln)["step"] <= 1]
    rolls.write_text("".join(first))
    steps = run / "steps.jsonl"
    step_lines = steps.read_text().splitlines(keepends=True)
    steps.write_text("".join(step_lines[:2]))
    cfg = PipelineConfig()
    group = build_group([str(tmp_path / "runs")], str(tmp_path / "out"), cfg)
    run_exec = local_executor(group.storage)
    group.poll(run_exec, now=0.0)
    # The writer replaces the file with a complete copy (new inode): steps 0-1 again + 2-3.
    tmp = run / "rollouts.tmp"
    tmp.write_text("".join(lines))
    tmp.replace(rolls)
    steps.write_text("".join(step_lines))
    group.poll(run_exec, now=1.0, final=True)
    group.commit(now=1.0)
    out = tmp_path / "out"
    attempts = out_sql(out, "select step, attempts from steps order by step")
    assert attempts == [(0, 4), (1, 4), (2, 4), (3, 4)]
    reasons = out_sql(
        out, "select reason, count(*) from quarantine group by reason order by reason"
    )
    assert reasons == [("file_replaced", 1), ("rewritten_replay", 8)]
