"""A run with no new bytes for a while is polled less often; new bytes are still read."""

from __future__ import annotations

import json

from rlstream.config import PipelineConfig
from rlstream.pipeline.local import build_group, local_executor
from tests.pipeline.runfiles import write_run


def test_idle_run_is_polled_every_k_polls_and_wakes_up(tmp_path):
    run = write_run(tmp_path / "runs", steps=2, finished=False)
    meta = json.loads((run / "run.json").read_text())
    meta["config"]["training"]["max_steps"] = 10  # still running: step 1 stays pending
    (run / "run.json").write_text(json.dumps(meta))
    # Step 1 stays pending: only a later step's line would make it final.
    cfg = PipelineConfig(idle_backoff_seconds=30, idle_poll_every=5, watermark_settle_seconds=1e9)
    group = build_group([str(tmp_path / "runs")], str(tmp_path / "out"), cfg)
    execute = local_executor(group.storage)
    planned: list[float] = []
    plan = group.plan
    group.plan = lambda st: planned.append(1) or plan(st)
    group.poll(execute, now=1000.0)
    assert len(planned) == 1
    for i in range(10):  # still active: every poll plans the run
        group.poll(execute, now=1001.0 + i)
    assert len(planned) == 11
    planned.clear()
    for i in range(20):  # idle for > 30 s: one poll in five
        group.poll(execute, now=1100.0 + i)
    assert len(planned) == 4
    rec = json.loads((run / "rollouts.jsonl").read_text().splitlines()[0])
    with open(run / "rollouts.jsonl", "a") as f:
        f.write(json.dumps({**rec, "attempt_id": "new", "step": 1}) + "\n")
    for i in range(5):  # within k polls the new line is read
        group.poll(execute, now=1200.0 + i)
    state = next(iter(group.states()))
    assert state.pending[1].agg.rollouts.finalize()["attempts"] == 5
