"""A standing one-node Ray for the benchmark: `rlstream analyze --ray-address` joins it.

Users who reanalyse archives often keep a Ray cluster up (deploy/); then `analyze`
pays no Ray start-up or shutdown, only its actors and the work. The head is started
with `ray start --head` on 127.0.0.1 with its own temp dir, GCS port and Ray Client
port, no dashboard and Ray's own CPU detection (as the private Ray has), and stopped
by killing exactly its processes: those whose command line names its temp dir or
its GCS address, and their descendants. Never `ray stop`, which would end every Ray
on the machine.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.common import proc_cpu_rss, ray_env
from rlstream.runtime.procs import kill_tree, tree


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _tagged(tags: tuple[str, ...]) -> list[int]:
    """Pids of other processes with a command-line argument containing one of `tags`."""
    out = []
    for d in os.listdir("/proc"):
        if not d.isdigit() or int(d) == os.getpid():
            continue
        try:
            with open(f"/proc/{d}/cmdline", "rb") as f:
                args = f.read().decode(errors="replace").split("\0")
        except OSError:
            continue
        if any(t in a for a in args for t in tags):
            out.append(int(d))
    return out


class StandingRay:
    """`with StandingRay() as head:` a head node; `head.address` to join it,
    `head.roots()` its processes (for CPU and memory sampling)."""

    def __init__(self) -> None:
        self.temp_dir = tempfile.mkdtemp(prefix="rlbh", dir="/tmp")
        self.address = f"127.0.0.1:{_free_port()}"
        # The temp dir is in most of the head's command lines; Ray Client's server
        # names only the GCS address (and its parent, `ray start`, has exited).
        self.tags = (self.temp_dir, f"--address={self.address}")

    def __enter__(self) -> StandingRay:
        cmd = [
            str(Path(sys.executable).with_name("ray")),
            "start",
            "--head",
            "--node-ip-address=127.0.0.1",
            f"--port={self.address.rsplit(':', 1)[1]}",
            f"--ray-client-server-port={_free_port()}",
            "--include-dashboard=false",
            "--disable-usage-stats",
            f"--temp-dir={self.temp_dir}",
        ]
        env = {**os.environ, **ray_env()}
        env.pop("RAY_ADDRESS", None)
        try:
            res = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120)
            if res.returncode != 0:
                raise RuntimeError(f"ray start failed:\n{res.stdout}\n{res.stderr}")
            self.settle()
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def roots(self) -> tuple[int, ...]:
        """The head's processes (GCS, raylet, ...): actors are their descendants."""
        return tuple(_tagged(self.tags))

    def settle(self, window: float = 0.5, busy: float = 0.1, timeout: float = 60.0) -> float:
        """Wait until the head is idle, as a cluster that has been up a while is: its
        processes alive now used under `busy` of a core over the last `window`
        seconds (its agents keep starting for a few seconds after `ray start`
        returns). Returns the seconds waited; raises at `timeout`."""
        t0 = time.monotonic()
        last = {p: proc_cpu_rss(p)[0] for p in tree(*self.roots())}
        while time.monotonic() - t0 < timeout:
            time.sleep(window)
            now = {p: proc_cpu_rss(p)[0] for p in tree(*self.roots())}
            used = sum(max(0.0, c - last.get(p, 0.0)) for p, c in now.items())
            if used < busy * window:
                return time.monotonic() - t0
            last = now
        raise RuntimeError(f"the standing Ray was still busy after {timeout:.0f} s")

    def __exit__(self, *exc: object) -> None:
        try:
            kill_tree(_tagged(self.tags))
        finally:
            shutil.rmtree(self.temp_dir, ignore_errors=True)
