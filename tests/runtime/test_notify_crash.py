"""`watch --notify` killed with SIGKILL between a finding's transition (committed to
OUT's alerts) and its message (the endpoint was failing), then restarted: every
transition reaches the receiver on 127.0.0.1 exactly once, and a further restart
sends nothing again; with `--ui-port` the messages link to the run pages."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from rlstream.fleet.notify import told, transition_key
from rlstream.fleet.read import read_table
from rlstream.simulate import SimConfig, simulate_live
from tests.fleet.test_notify import Receiver
from tests.runtime.test_crash_restart import _remove_temp_dir


def _watch(root: Path, out: Path, url: str, log: Path, *extra: str) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "rlstream.cli", "watch", str(root), "--out", str(out)]
    cmd += ["--poll", "0.2", "--commit-every", "0.4", "--workers", "1"]
    cmd += ["--notify", url, "--notify-format", "json", *extra]
    return subprocess.Popen(
        cmd, start_new_session=True, stdout=subprocess.DEVNULL, stderr=log.open("a")
    )


def _firing(out: Path) -> list[dict]:
    if not (out / "alerts").exists():
        return []
    return told(read_table(str(out), "alerts").to_pylist())  # what messages tell


def test_kill_between_transition_and_message_then_exactly_once(tmp_path):
    root, out, log = tmp_path / "runs", tmp_path / "out", tmp_path / "watch.log"
    cfg = SimConfig(runs=2, steps=40, scenarios=("healthy", "entropy_collapse"), seed=3)
    writer = threading.Thread(target=simulate_live, args=(root, cfg, 0.25))
    writer.start()
    rec = Receiver()
    rec.fail = 10**9  # the endpoint is down: transitions wait in OUT
    try:
        proc = _watch(root, out, rec.url, log)
        deadline = time.monotonic() + 300
        while not (_firing(out) and rec.attempts >= 1):
            assert proc.poll() is None, log.read_text()[-2000:]
            assert time.monotonic() < deadline, "no transition committed and attempted"
            rec.waiting.wait(0.5)
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=60)
        _remove_temp_dir(log.read_text())
        assert rec.bodies == []  # the transition was committed, its message not sent
        rec.fail = 0
        writer.join(300)
        for _ in range(2):  # the restart sends what is pending; the next one nothing
            proc = _watch(root, out, rec.url, log, "--exit-when-finished", "--ui-port", "0")
            assert proc.wait(timeout=400) == 0, log.read_text()[-3000:]
            if not rec.bodies:
                raise AssertionError(log.read_text()[-3000:])
            got = [transition_key(t) for b in rec.bodies for t in b["transitions"]]
            assert len(got) == len(set(got))  # never twice
            assert set(got) == {transition_key(t) for t in _firing(out)}  # never lost
            assert any(t["code"] == "entropy_collapse" for b in rec.bodies
                       for t in b["transitions"])  # fmt: skip
        # with --ui-port, each transition links to its run's page on this machine
        for t in (t for b in rec.bodies for t in b["transitions"]):
            assert re.fullmatch(r"http://127\.0\.0\.1:\d+/run\?id=" + re.escape(t["run_id"]),
                                t["url"]), t["url"]  # fmt: skip
        assert all(b["source"] == "rlstream" and b["id"] for b in rec.bodies)
    finally:
        rec.close()
        writer.join(300)
