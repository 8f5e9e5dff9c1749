"""Stopping process trees: `procs.kill_tree`, and the private Ray that `cluster.disconnect`
stops with it, leave no process of the tree running."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

from rlstream.runtime import procs


def _running(pid: int) -> bool:
    """Alive and not a zombie."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[0] != b"Z"
    except OSError:
        return False


def test_kill_tree_stops_children_and_grandchildren():
    # A child that starts a grandchild, both sleeping; the child prints the pid of
    # the grandchild so the test can wait for it to exist.
    code = textwrap.dedent(
        """
        import subprocess, sys, time
        g = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
        print(g.pid, flush=True)
        time.sleep(600)
        """
    )
    child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    grandchild = int(child.stdout.readline())
    assert procs.tree(child.pid) == [child.pid, grandchild]

    assert procs.kill_tree([child.pid]) == []

    assert not os.path.exists(f"/proc/{child.pid}")  # our child: killed and reaped
    assert not _running(grandchild)
    assert procs.kill_tree([child.pid]) == []  # already gone: nothing to do


def test_private_ray_stops_without_leaving_processes(tmp_path):
    # In its own interpreter: tests share one Ray session, and this starts its own.
    code = textwrap.dedent(
        """
        import json, os, sys, time
        import ray
        from rlstream.runtime import cluster, procs

        assert not cluster.private_ray()
        assert cluster.connect(cluster.RayConfig(num_cpus=1))
        assert cluster.private_ray()

        @ray.remote(num_cpus=0)
        class A:
            def pid(self):
                return os.getpid()

        actor = A.remote()
        actor_pid = ray.get(actor.pid.remote())
        pids = [p for p in procs.tree(os.getpid()) if p != os.getpid()]
        temp = cluster._TEMP_DIRS[0]
        t0 = time.monotonic()
        cluster.disconnect()
        assert not cluster.private_ray()
        json.dump({"pids": pids, "actor": actor_pid, "temp": temp,
                   "stop_s": time.monotonic() - t0}, sys.stdout)
        """
    )
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0", "RAY_AUTH_MODE": "disabled"}
    env.pop("RAY_ADDRESS", None)
    res = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300
    )
    assert res.returncode == 0, res.stderr[-3000:]
    got = json.loads(res.stdout.strip().splitlines()[-1])
    assert got["actor"] in got["pids"]
    assert len(got["pids"]) >= 4  # at least GCS, raylet, an agent and the actor
    assert [p for p in got["pids"] if _running(p)] == []
    assert not os.path.exists(got["temp"])
