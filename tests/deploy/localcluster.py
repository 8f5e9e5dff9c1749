"""A real two-node Ray cluster on this machine, started with `ray start`, for tests.

Each node gets its own loopback address, temp dir, ports, custom resource and
memory limits. `stop()` ends exactly the processes this cluster started: those whose
command line names one of its temp dirs or its GCS address, their descendants, and
every such process seen while it ran (in case one was orphaned). It never calls
`ray stop`, which would end every Ray process on the machine.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

BIN = Path(sys.executable).parent
"""The venv's bin folder: `ray` and `rlstream` are here; nodes get it first on PATH so
a job's entrypoint finds the same Python and the installed rlstream."""


def free_port(host: str, taken: set[int] | None = None) -> int:
    """A port free on `host` now and not in `taken` (which it joins). The kernel may
    hand a just-closed port out again, and Ray refuses two components on one port
    number, so a cluster's ports are drawn against the set it already holds."""
    taken = set() if taken is None else taken
    while True:
        with socket.socket() as s:
            s.bind((host, 0))
            port = s.getsockname()[1]
        if port not in taken:
            taken.add(port)
            return port


def _proc_table() -> dict[int, tuple[int, float, str]]:
    """pid -> (ppid, start time in clock ticks, command line) for every process."""
    out = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            raw = Path(f"/proc/{name}/cmdline").read_bytes()
            stat = Path(f"/proc/{name}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        out[int(name)] = (
            int(stat[1]),
            float(stat[19]),
            raw.replace(b"\0", b" ").decode(errors="replace"),
        )
    return out


@dataclass
class Node:
    name: str
    ip: str
    temp_dir: str
    resource: str

    def logs(self) -> Path:
        return Path(self.temp_dir) / "session_latest" / "logs"

    def log_lines(self, needle: str, job_id: str | None = None) -> list[str]:
        """Lines holding `needle` in this node's worker logs (of one Ray job if given)."""
        lines = []
        for f in sorted(self.logs().glob("worker-*.err")):
            if job_id is not None and f"-{job_id}-" not in f.name:
                continue
            lines.extend(ln for ln in f.read_text(errors="replace").splitlines() if needle in ln)
        return lines


@dataclass
class LocalCluster:
    """Head (node A) and one worker node (node B), both on this machine."""

    cpus_per_node: int = 1
    memory_bytes: int = 2_000_000_000
    object_store_bytes: int = 200_000_000
    nodes: list[Node] = field(default_factory=list)
    seen: dict[int, float] = field(default_factory=dict)
    ports: set[int] = field(default_factory=set)

    def __post_init__(self) -> None:
        # A loopback address pair of our own: nothing leaves the machine, and the GCS
        # address is a string no other cluster here has (it finds our processes).
        net = f"127.{random.randint(1, 254)}.{random.randint(1, 254)}"
        self.head_ip = f"{net}.2"
        self.gcs_port = free_port(self.head_ip, self.ports)
        self.dashboard_port = free_port(self.head_ip, self.ports)
        self.gcs_address = f"{self.head_ip}:{self.gcs_port}"
        self.dashboard_url = f"http://{self.head_ip}:{self.dashboard_port}"
        self.env = {
            **os.environ,
            "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}",
            "RAY_USAGE_STATS_ENABLED": "0",
            "RAY_AUTH_MODE": "disabled",
            # Declare a node dead ~3 s after its raylet stops answering (default ~15 s).
            "RAY_health_check_initial_delay_ms": "1000",
            "RAY_health_check_period_ms": "1000",
            "RAY_health_check_timeout_ms": "1000",
            "RAY_health_check_failure_threshold": "3",
        }
        self.env.pop("RAY_ADDRESS", None)
        self.nodes = [
            Node("a", self.head_ip, tempfile.mkdtemp(prefix="rlmna", dir="/tmp"), "node_a"),
            Node("b", f"{net}.3", tempfile.mkdtemp(prefix="rlmnb", dir="/tmp"), "node_b"),
        ]

    # -- starting ------------------------------------------------------------------
    def _node_args(self, node: Node) -> list[str]:
        ports = {
            "--node-manager-port": free_port(node.ip, self.ports),
            "--object-manager-port": free_port(node.ip, self.ports),
            "--dashboard-agent-listen-port": free_port(node.ip, self.ports),
            "--dashboard-agent-grpc-port": free_port(node.ip, self.ports),
            "--runtime-env-agent-port": free_port(node.ip, self.ports),
            "--metrics-export-port": free_port(node.ip, self.ports),
        }
        return [
            f"--node-ip-address={node.ip}",
            f"--temp-dir={node.temp_dir}",
            f"--num-cpus={self.cpus_per_node}",
            f"--resources={json.dumps({node.resource: 1})}",
            f"--memory={self.memory_bytes}",
            f"--object-store-memory={self.object_store_bytes}",
            "--disable-usage-stats",
            *(f"{k}={v}" for k, v in ports.items()),
        ]

    def _ray(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
        return subprocess.run(
            [str(BIN / "ray"), *args],
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )

    def start(self) -> LocalCluster:
        head, worker = self.nodes
        steps = [
            [
                "start",
                "--head",
                f"--port={self.gcs_port}",
                "--include-dashboard=true",
                f"--dashboard-host={head.ip}",
                f"--dashboard-port={self.dashboard_port}",
                f"--ray-client-server-port={free_port(head.ip, self.ports)}",
                *self._node_args(head),
            ],
            ["start", f"--address={self.gcs_address}", *self._node_args(worker)],
        ]
        for args in steps:
            res = self._ray(*args)
            self.track()
            if res.returncode != 0:
                self.stop()
                raise RuntimeError(f"ray {' '.join(args)} failed:\n{res.stdout}\n{res.stderr}")
        return self

    # -- processes -----------------------------------------------------------------
    def _ours(self, table: dict[int, tuple[int, float, str]]) -> set[int]:
        tags = [n.temp_dir for n in self.nodes] + [self.gcs_address]
        pids = {p for p, (_, _, cmd) in table.items() if any(t in cmd for t in tags)}
        pids.discard(os.getpid())
        grew = True
        while grew:
            kids = {p for p, (pp, _, _) in table.items() if pp in pids and p not in pids}
            pids |= kids
            grew = bool(kids)
        return pids

    def track(self) -> set[int]:
        """Remember every process of this cluster alive now (pid and start time)."""
        table = _proc_table()
        pids = self._ours(table)
        for p in pids:
            self.seen[p] = table[p][1]
        return pids

    def raylet_pid(self, node: Node) -> int:
        table = _proc_table()
        found = [
            p
            for p, (_, _, cmd) in table.items()
            if "raylet/raylet" in cmd.split(" ", 1)[0] and f"{node.temp_dir}/" in cmd
        ]
        assert len(found) == 1, found
        return found[0]

    def kill_raylet(self, node: Node) -> int:
        self.track()
        pid = self.raylet_pid(node)
        os.kill(pid, signal.SIGKILL)
        return pid

    def stop(self) -> None:
        """SIGTERM, then SIGKILL, exactly the processes this cluster started."""
        self.track()
        for sig, wait in ((signal.SIGTERM, 5.0), (signal.SIGKILL, 2.0)):
            table = _proc_table()
            alive = [p for p, t in self.seen.items() if p in table and table[p][1] == t]
            for p in alive:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(p, sig)
            deadline = time.monotonic() + wait
            while alive and time.monotonic() < deadline:
                table = _proc_table()
                alive = [p for p in alive if p in table and table[p][1] == self.seen[p]]
                time.sleep(0.1)
        for n in self.nodes:
            shutil.rmtree(n.temp_dir, ignore_errors=True)

    def alive(self) -> list[int]:
        table = _proc_table()
        return [p for p, t in self.seen.items() if p in table and table[p][1] == t]

    # -- jobs ----------------------------------------------------------------------
    def submit(self, submission_id: str, entrypoint: list[str], wait: bool) -> str:
        """`ray job submit` as a user types it; returns its output."""
        args = ["job", "submit", "--address", self.dashboard_url]
        args += ["--submission-id", submission_id]
        if not wait:
            args.append("--no-wait")
        res = self._ray(*args, "--", *entrypoint, timeout=600)
        out = res.stdout + res.stderr
        assert res.returncode == 0, out
        return out
