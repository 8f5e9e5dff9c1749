"""Data for a step whose row is already final is late: counted, quarantined with reason
`late`, and never merged into the row (which stays as it was written)."""

from __future__ import annotations

import json

from rlstream.config import PipelineConfig
from rlstream.pipeline.local import build_group, local_executor
from tests.outputs import out_sql
from tests.pipeline.runfiles import write_run


def test_late_rollout_and_transcript(tmp_path):
    run = write_run(tmp_path / "runs", steps=3, finished=False)
    meta = json.loads((run / "run.json").read_text())
    meta["config"]["training"]["max_steps"] = 10  # still running
    (run / "run.json").write_text(json.dumps(meta))
    group = build_group([str(tmp_path / "runs")], str(tmp_path / "out"), PipelineConfig())
    execute = local_executor(group.storage)
    group.poll(execute, now=0.0)  # steps 0..2 seen: 0 and 1 final (lag 1), 2 pending
    group.commit(now=0.0)
    state = next(iter(group.states()))
    assert state.final_through == 1
    rec = json.loads((run / "rollouts.jsonl").read_text().splitlines()[0])
    late_offset = (run / "rollouts.jsonl").stat().st_size
    with open(run / "rollouts.jsonl", "a") as f:
        f.write(json.dumps({**rec, "attempt_id": "late-1", "step": 0, "reward": 1.0}) + "\n")
        f.write(json.dumps({**rec, "attempt_id": "ok-2", "step": 2, "reward": 1.0}) + "\n")
    t = json.loads((run / "transcripts" / "a00000000.json").read_text())
    (run / "transcripts" / "late-2.json").write_text(json.dumps({**t, "attempt_id": "late-2"}))
    group.poll(execute, now=1.0, final=True)
    group.commit(now=1.0)
    out = tmp_path / "out"
    q = out_sql(out, 'select file, "offset", reason, step from quarantine order by file')
    assert q == [
        ("rollouts.jsonl", late_offset, "late", None),
        ("transcripts/late-2.json", None, "late", 0),
    ]
    assert state.counters["late"] == 2
    rows = out_sql(out, "select step, attempts from steps order by step")
    assert rows == [(0, 4), (1, 4), (2, 5)]  # step 0 unchanged; step 2 got its new attempt
    late = out_sql(out, "select late from latest")
    assert late == [(2,)]


def test_step_is_final_once_its_line_settled_not_a_step_later(tmp_path):
    # Steps of real runs take minutes: the last step's row must not wait for the next
    # step's line. Data written just after the line (before the next poll) still counts.
    run = write_run(tmp_path / "runs", steps=3, finished=False)
    meta = json.loads((run / "run.json").read_text())
    meta["config"]["training"]["max_steps"] = 10
    (run / "run.json").write_text(json.dumps(meta))
    cfg = PipelineConfig(watermark_settle_seconds=0.5)
    group = build_group([str(tmp_path / "runs")], str(tmp_path / "out"), cfg)
    execute = local_executor(group.storage)
    group.poll(execute, now=100.0)
    state = next(iter(group.states()))
    assert state.final_through == 1  # step 2's line was read just now: not settled
    rec = json.loads((run / "rollouts.jsonl").read_text().splitlines()[0])
    with open(run / "rollouts.jsonl", "a") as f:  # a straggler of step 2
        f.write(json.dumps({**rec, "attempt_id": "b-1", "step": 2, "reward": 1.0}) + "\n")
    group.poll(execute, now=100.4)  # under 0.5 s later: still pending, straggler merged
    assert state.final_through == 1 and state.counters["late"] == 0
    group.poll(execute, now=101.0)  # settled: final, with no step 3 in sight
    assert state.final_through == 2 and state.read_at == {}
    group.commit(now=101.0)
    rows = out_sql(f"{tmp_path}/out", "select step, attempts from steps order by step")
    assert rows == [(0, 4), (1, 4), (2, 5)]
