"""A standing one-node Ray for the benchmark: `rlstream analyze --ray-address` joins it.

Users who reanalyse archives often keep a Ray cluster up (deploy/); then `analyze`
pays no Ray start-up or shutdown, only its actors and the work. The head is started
with `ray start --head` on 127.0.0.1 with its own temp dir and port, no dashboard,
and stopped by killing exactly its processes (those whose command line names its
temp dir, and their descendants): never `ray stop`, which would end every Ray on the
machine.
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


def _tagged(tag: str) -> list[int]:
    """Pids of processes whose command line contains `tag`."""
    out = []
    for d in os.listdir("/proc"):
        if not d.isdigit() or int(d) == os.getpid():
            continue
        try:
            with open(f"/proc/{d}/cmdline", "rb") as f:
                if tag.encode() in f.read():
                    out.append(int(d))
        except OSError:
            continue
    return out


class StandingRay:
    """`with StandingRay(cpus) as head:` a head node; `head.address` to join it,
    `head.roots()` its processes (for CPU and memory sampling)."""

    def __init__(self, cpus: int, system_config: str | None = None) -> None:
        self.cpus = cpus
        self.system_config = system_config
        self.temp_dir = tempfile.mkdtemp(prefix="rlbh", dir="/tmp")
        self.address = f"127.0.0.1:{_free_port()}"

    def __enter__(self) -> StandingRay:
        ray = str(Path(sys.executable).with_name("ray"))
        cmd = [
            ray,
            "start",
            "--head",
            "--node-ip-address=127.0.0.1",
            f"--port={self.address.rsplit(':', 1)[1]}",
            f"--num-cpus={self.cpus}",
            "--include-dashboard=false",
            "--disable-usage-stats",
            f"--temp-dir={self.temp_dir}",
        ]
        if self.system_config:
            cmd.append(f"--system-config={self.system_config}")
        env = {**os.environ, **ray_env()}
        env.pop("RAY_ADDRESS", None)
        res = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120)
        if res.returncode != 0:
            self.__exit__(None, None, None)
            raise RuntimeError(f"ray start failed:\n{res.stdout}\n{res.stderr}")
        self.settle()
        return self

    def settle(self, window: float = 0.5, busy: float = 0.1, timeout: float = 60.0) -> float:
        """Wait until the head is idle, as a cluster that has been up a while is: its
        processes used under `busy` of a core over the last `window` seconds (its
        agents keep starting for a few seconds after `ray start` returns). Returns
        the seconds waited."""
        t0 = time.monotonic()

        def cpu() -> float:
            return sum(proc_cpu_rss(p)[0] for p in tree(*self.roots()))

        last = cpu()
        while time.monotonic() - t0 < timeout:
            time.sleep(window)
            now = cpu()
            if now - last < busy * window:
                break
            last = now
        return time.monotonic() - t0

    def roots(self) -> tuple[int, ...]:
        """The head's processes (GCS, raylet, ...): actors are their descendants."""
        return tuple(_tagged(self.temp_dir))

    def __exit__(self, *exc: object) -> None:
        kill_tree(_tagged(self.temp_dir))
        shutil.rmtree(self.temp_dir, ignore_errors=True)
