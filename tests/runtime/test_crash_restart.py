"""Exactly-once effect across crashes: `rlstream watch` killed with SIGKILL at random
moments while runs are being written, then restarted with the same arguments, ends
with the same steps table as `analyze` on the finished runs: no row missing, none
duplicated, same values. The first kill takes a watch working in the driver (the
default for a small fleet), the second one a watch whose runs were handed over to
the tailers of a private Ray (`--ray`)."""

from __future__ import annotations

import os
import random
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from rlstream.pipeline.local import analyze_local
from rlstream.simulate import SimConfig, simulate_live
from tests.runtime.helpers import assert_same_rows, read_steps


def _watch(root: Path, out: Path, log: Path, *extra: str) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "rlstream.cli", "watch", str(root), "--out", str(out)]
    cmd += ["--poll", "0.2", "--commit-every", "0.4", "--workers", "2", *extra]
    # Own session: the kill takes the watch and its private Ray together, as a node
    # loss or an OOM kill of the container would. Its log goes to a file the test
    # reads while it runs.
    with log.open("w") as err:
        return subprocess.Popen(cmd, start_new_session=True, stdout=subprocess.DEVNULL, stderr=err)


def _remove_temp_dir(stderr: str) -> None:
    """A SIGKILLed watch cannot remove its private Ray's temp dir: do it here."""
    found = re.search(r"private local Ray \(temp dir (/tmp/rls[^)\s]+)\)", stderr)
    if found:  # none when the watch joined a cluster (RAY_ADDRESS)
        shutil.rmtree(found.group(1), ignore_errors=True)  # its processes may be exiting


def _checkpoint_seqs(out: Path) -> int:
    d = out / "_resume"
    return sum(p.stat().st_mtime_ns for p in d.glob("*.state")) if d.exists() else 0


def _wait_for_new_commit(
    out: Path, proc: subprocess.Popen, log: Path, timeout: float = 120
) -> None:
    before = _checkpoint_seqs(out)
    deadline = time.monotonic() + timeout
    while _checkpoint_seqs(out) == before:
        assert proc.poll() is None, log.read_text()[-2000:]
        assert time.monotonic() < deadline, "no commit within the timeout"
        time.sleep(0.05)


def _wait_for_log(log: Path, proc: subprocess.Popen, words: str, timeout: float = 180) -> None:
    deadline = time.monotonic() + timeout
    while words not in log.read_text():
        assert proc.poll() is None, log.read_text()[-2000:]
        assert time.monotonic() < deadline, f"{words!r} not logged within the timeout"
        time.sleep(0.05)


def _steps_written(root: Path) -> int:
    return sum(p.read_bytes().count(b"\n") for p in root.glob("*/steps.jsonl"))


def test_sigkill_and_restart_equals_uninterrupted(tmp_path):
    rng = random.Random(7)
    root, out = tmp_path / "runs", tmp_path / "out"
    scen = ("healthy", "mismatch_kl_rising", "rollout_failure_burst")
    cfg = SimConfig(runs=3, steps=45, scenarios=scen, seed=31)
    # The writer may not finish before both kills happened, however slow the machine:
    # past two thirds of its steps it waits for the kills to be done.
    kills_done = threading.Event()

    def gated_sleep(seconds: float) -> None:
        if not kills_done.is_set() and _steps_written(root) >= 2 * 3 * 45 // 3:
            kills_done.wait(timeout=600)
        time.sleep(seconds)

    writer = threading.Thread(
        target=simulate_live, args=(root, cfg, 0.3), kwargs={"sleep": gated_sleep}
    )
    writer.start()
    try:
        for i, extra in enumerate(((), ("--ray",))):
            log = tmp_path / f"watch-{i}.log"
            proc = _watch(root, out, log, *extra)
            if extra:  # the tailers hold the runs
                _wait_for_log(log, proc, "runs handed over to the tailers")
            else:
                _wait_for_new_commit(out, proc, log)
            _wait_for_new_commit(out, proc, log)
            time.sleep(rng.uniform(0.0, 0.8))  # a random moment after a commit
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            said = log.read_text()
            assert ("private local Ray" in said) == bool(extra)
            _remove_temp_dir(said)
    finally:
        kills_done.set()
    log = tmp_path / "watch-last.log"
    proc = _watch(root, out, log, "--exit-when-finished")
    writer.join()
    assert proc.wait(timeout=300) == 0, log.read_text()[-2000:]
    analyze_local([str(root)], str(tmp_path / "batch"))
    batch = read_steps(tmp_path / "batch")
    assert len(batch) == 3 * 45
    assert_same_rows(batch, read_steps(out))
