"""`rlstream watch` as a Ray job on a real two-node cluster (`ray start` twice here).

The watch's tailers are placed one per node, so each node tails, folds and commits a
shard of the fleet. Runs are written live while it watches; a second batch of runs
starts once the first rows are committed (found by the watch's rediscovery); then
node B's raylet is killed mid-watch, taking a tailer and a worker with it. Checked:
the tailers ran on both nodes, the lost tailer was replaced on node A and given its
runs again, the job ends when every run has finished, and the steps table equals
the one `analyze` writes on the finished folders: every run, no row lost, none twice.
"""

from __future__ import annotations

import threading
import time

import pytest

from rlstream.pipeline.local import analyze_local
from rlstream.simulate import SimConfig, simulate_live
from tests.deploy.localcluster import LocalCluster
from tests.deploy.test_multinode import TERMINAL, _client, _wait
from tests.outputs import out_sql
from tests.runtime.helpers import assert_same_rows, read_steps

pytestmark = pytest.mark.multinode

FIRST = SimConfig(runs=4, steps=120, scenarios=("healthy", "low_ess"), seed=41)
SECOND = SimConfig(runs=2, steps=24, scenarios=("healthy",), seed=42)
RESTORED = "died"
"""What the driver logs when a tailer died and it restores its runs (runtime/pools.py)."""


def _tailer_nodes(cluster: LocalCluster) -> dict[str, str]:
    """Alive Tailer actors: actor id -> the IP of the node it runs on."""
    from ray.util.state import list_actors, list_nodes

    ips = {n.node_id: n.node_ip for n in list_nodes(address=cluster.dashboard_url, detail=True)}
    actors = list_actors(address=cluster.dashboard_url, detail=True)
    return {
        a.actor_id: ips.get(a.node_id, a.node_id)
        for a in actors
        if a.class_name == "Tailer" and a.state == "ALIVE"
    }


def _held(free: threading.Event):
    """A `sleep` for `simulate_live` that waits while `free` is clear: the first runs
    stay live and unfinished until the test lets them go on, however slowly Ray
    starts the watch's actors on a loaded host."""

    def sleep(seconds: float) -> None:
        time.sleep(seconds)
        free.wait()

    return sleep


def _actors(cluster: LocalCluster, client) -> str:
    """The cluster's actors (class, state, node) and the watch's last log lines."""
    from ray.util.state import list_actors

    actors = list_actors(address=cluster.dashboard_url, detail=True)
    seen = [(a.class_name, a.state, a.node_id, a.num_restarts) for a in actors]
    logs = client.get_job_logs("rls-watch").splitlines()
    said = [line for line in logs if "tailer" in line]
    return "\n".join([str(seen), *said[-20:], *logs[-5:]])


def _runs_with_rows(out) -> int:
    if not (out / "steps" / "_delta_log").exists():
        return 0
    return out_sql(out, "select count(distinct run_id) from steps")[0][0]


def test_watch_tails_on_both_nodes_and_survives_losing_one(cluster, tmp_path):
    root, out = tmp_path / "runs", tmp_path / "out"
    free = threading.Event()
    free.set()
    first = threading.Thread(
        target=simulate_live, args=(root / "first", FIRST, 0.5), kwargs={"sleep": _held(free)}
    )
    second = threading.Thread(target=simulate_live, args=(root / "second", SECOND, 0.5))
    node_a, node_b = cluster.nodes
    first.start()
    entry = ["rlstream", "watch", str(root), "--out", str(out), "--tailers", "2"]
    entry += ["--workers", "2", "--poll", "0.5", "--commit-every", "1"]
    entry += ["--maintain-every", "0", "--exit-when-finished"]
    client = _client(cluster)
    try:
        cluster.submit("rls-watch", entry, wait=False)

        def running() -> bool:
            job = client.get_job_info("rls-watch")
            assert job.status not in TERMINAL, client.get_job_logs("rls-watch")[-3000:]
            return job.status == "RUNNING"

        _wait("the first rows", lambda: running() and _runs_with_rows(out) >= 1, timeout=120)
        free.clear()  # the first runs wait, unfinished, until node B is lost
        assert first.is_alive(), "the first runs ended before the watch committed a row"
        placed = _wait(
            "a tailer on each node",
            lambda: running() and (t := _tailer_nodes(cluster)) and len(set(t.values())) == 2 and t,
            timeout=180,
            explain=lambda: _actors(cluster, client),
        )
        assert sorted(placed.values()) == sorted([node_a.ip, node_b.ip])
        second.start()  # new runs under ROOT while the watch runs
        _wait(
            "rows of every run, the second batch's too",
            lambda: running() and _runs_with_rows(out) == FIRST.runs + SECOND.runs,
            timeout=180,
        )
        free.set()
        assert first.is_alive(), "the runs ended before node B could be lost mid-watch"
        cluster.kill_raylet(node_b)
        _wait(
            "node B's tailer replaced on node A",
            lambda: (
                (t := _tailer_nodes(cluster)) and len(t) == 2 and set(t.values()) == {node_a.ip}
            ),
            timeout=120,
            explain=lambda: _actors(cluster, client),
        )
        status = _wait(
            "the watch to end",
            lambda: (s := client.get_job_status("rls-watch")) in TERMINAL and s,
            timeout=300,
            every=0.5,
        )
        logs = client.get_job_logs("rls-watch")
    finally:
        free.set()
        first.join()
        if second.is_alive() or second.ident is not None:
            second.join()
    assert status == "SUCCEEDED", logs[-3000:]
    assert RESTORED in logs and "restoring its" in logs, logs[-3000:]

    dup = out_sql(out, "select run_id, step from steps group by all having count(*) > 1")
    assert dup == []
    analyze_local([str(root)], str(tmp_path / "batch"))
    batch = read_steps(tmp_path / "batch")
    assert len(batch) == FIRST.runs * FIRST.steps + SECOND.runs * SECOND.steps
    assert_same_rows(batch, read_steps(out))
