"""`watch` on runs written live reaches the same steps table as `analyze` on the
finished runs, and picks up runs that appear while it runs."""

from __future__ import annotations

import threading
import time

from rlstream.config import PipelineConfig
from rlstream.pipeline.local import analyze_local
from rlstream.runtime.driver import RuntimeConfig
from rlstream.runtime.driver import run as run_pipeline
from rlstream.simulate import SimConfig, simulate_live
from tests.runtime.helpers import assert_same_rows, read_steps


def test_live_watch_equals_batch_and_discovers_new_runs(ray_session, tmp_path):
    root = tmp_path / "runs"
    first = SimConfig(
        runs=3, steps=10, scenarios=("healthy", "entropy_collapse", "low_ess"), seed=11
    )
    second = SimConfig(runs=2, steps=8, scenarios=("healthy",), seed=12)
    writers: list[threading.Thread] = [
        threading.Thread(target=simulate_live, args=(root / "a", first, 0.15))
    ]
    writers[0].start()
    out = tmp_path / "out"

    deadline = time.monotonic() + 300

    def stop() -> bool:
        assert time.monotonic() < deadline, "the watch did not reach the batch tables in time"
        # Once the watch has committed rows of the first batch, start a second batch
        # of runs in a new folder: the watch must discover them.
        if len(writers) == 1 and (out / "steps").exists():
            writers.append(threading.Thread(target=simulate_live, args=(root / "b", second, 0.15)))
            writers[1].start()
        if len(writers) < 2 or any(w.is_alive() for w in writers):
            return False
        return (out / "steps").exists() and len(read_steps(out)) == 3 * 10 + 2 * 8

    cfg = PipelineConfig(poll_seconds=0.1, commit_seconds=0.3, transcripts_per_unit=4)
    rt = RuntimeConfig(workers=2, tailers=2, discover_every_seconds=0.3)
    summaries = run_pipeline([str(root)], str(out), cfg, rt, watch=True, stop=stop)
    for w in writers:
        w.join()
    assert len(summaries) == 5
    assert all(s["finished"] and s["quarantined"] == 0 and s["late"] == 0 for s in summaries)
    analyze_local([str(root)], str(tmp_path / "batch"))
    batch = read_steps(tmp_path / "batch")
    assert len(batch) == 46
    assert_same_rows(batch, read_steps(out))
