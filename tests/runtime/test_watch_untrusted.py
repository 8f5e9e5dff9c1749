"""`watch` (on Ray) follows the same rules as `analyze` for untrusted run folders: a
folder link out of ROOT is never discovered, before or during the watch; a run
reached twice (W&B's `latest-run`) is read once; a run whose transcripts folder
leads out of ROOT gets a quarantine row per file and none of their bytes reach OUT."""

from __future__ import annotations

import os
import shutil
import time

from rlstream.config import PipelineConfig
from rlstream.runtime.driver import RuntimeConfig
from rlstream.runtime.driver import run as run_pipeline
from tests.outputs import out_sql
from tests.pipeline.runfiles import write_run
from tests.pipeline.test_untrusted import SECRET, _leaked

OUTSIDE = "not opened: outside ROOT (reached through a linked folder)"


def test_watch_discovers_nothing_out_of_root_and_reads_no_outside_byte(ray_session, tmp_path):
    root, elsewhere, out = tmp_path / "runs", tmp_path / "elsewhere", tmp_path / "out"
    write_run(root, "run-a", steps=3)
    write_run(elsewhere, "foreign", steps=2)
    write_run(elsewhere, "foreign2", steps=2)
    os.symlink(elsewhere / "foreign", root / "foreign")  # there before the watch starts
    added: list[str] = []
    deadline = time.monotonic() + 240

    def stop() -> bool:
        assert time.monotonic() < deadline, "the watch did not read run-b in time"
        if not (out / "steps").exists():
            return False
        if not added:  # the watch is running: new runs, links and a linked folder
            b = write_run(tmp_path / "staging", "run-b", steps=3)
            shutil.move(b / "transcripts", elsewhere / "b-transcripts")
            for f in (elsewhere / "b-transcripts").iterdir():
                f.write_bytes(SECRET)
            os.symlink(elsewhere / "b-transcripts", b / "transcripts")
            shutil.move(b, root / "run-b")
            os.symlink(root / "run-b", root / "latest-run")
            os.symlink(elsewhere / "foreign2", root / "foreign2")
            added.append("run-b")
            return False
        if not (out / "quarantine").exists():
            return False
        steps = out_sql(out, "select run_id, count(*) from steps group by all order by 1")
        rows = out_sql(out, "select count(*) from quarantine where run_id = 'run-b'")[0][0]
        return steps == [("run-a", 3), ("run-b", 3)] and rows == 12

    cfg = PipelineConfig(poll_seconds=0.1, commit_seconds=0.3)
    rt = RuntimeConfig(workers=1, tailers=1, discover_every_seconds=0.3)
    summaries = run_pipeline([str(root)], str(out), cfg, rt, watch=True, stop=stop)
    assert sorted(s["run_id"] for s in summaries) == ["run-a", "run-b"]
    rows = out_sql(out, "select run_id, reason, detail, count(*) from quarantine group by all")
    assert ("run-b", "unsafe_file", OUTSIDE, 12) in rows
    assert not [r for r in rows if r[0] not in ("run-a", "run-b")]
    assert _leaked(out) == []
