"""`rlstream analyze` as a Ray job on a real two-node cluster (`ray start` twice here).

Node A is the head (dashboard, job driver), node B a second raylet with its own temp
dir, loopback address, ports, custom resource and memory limits. The job is
submitted with `ray job submit`, as deploy/README.md says. Checked: worker actors ran
units on both nodes, and the `steps` table equals the in-process pipeline's; then,
with node B's raylet killed mid-run, the job still succeeds with the same table
(Ray restarts B's workers on A and retries their units; nothing is counted twice).
"""

from __future__ import annotations

import time

import pytest

from rlstream.pipeline.local import analyze_local
from rlstream.simulate import SimConfig, simulate
from tests.deploy.localcluster import LocalCluster
from tests.runtime.helpers import assert_same_rows, read_steps

pytestmark = pytest.mark.multinode

MARK = ": first unit"
"""What a Worker logs when it starts its first unit (rlstream/runtime/actors.py)."""

RUNS = 8
TERMINAL = {"SUCCEEDED", "FAILED", "STOPPED"}


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    """~200 MB of runs: big enough that a job lasts several seconds on 2 cores, so the
    kill lands mid-run; and the in-process reference table."""
    base = tmp_path_factory.mktemp("multinode")
    root = base / "runs"
    scen = ("healthy", "entropy_collapse", "mismatch_kl_rising", "rollout_failure_burst")
    simulate(root, SimConfig(runs=RUNS, steps=40, tokens=600, scenarios=scen, seed=11))
    analyze_local([str(root)], str(base / "local"))
    local = read_steps(base / "local")
    assert len(local) == RUNS * 40
    return base, root, local


def _client(cluster: LocalCluster):
    from ray.job_submission import JobSubmissionClient

    return JobSubmissionClient(cluster.dashboard_url)


def _wait(what: str, cond, timeout: float, every: float = 0.2, explain=None):
    """`cond()` once it is true; on timeout, an error saying what was awaited, and
    what `explain()` returns (the state that did not come)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = cond()
        if got:
            return got
        time.sleep(every)
    seen = f": {explain()}" if explain is not None else ""
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}{seen}")


def _entrypoint(root, out) -> list[str]:
    return ["rlstream", "analyze", str(root), "--out", str(out), "--workers", "2"]


def _nodes(cluster: LocalCluster) -> dict[str, object]:
    from ray.util.state import list_nodes

    return {n.node_ip: n for n in list_nodes(address=cluster.dashboard_url, detail=True)}


def test_job_runs_on_both_nodes_and_equals_local(cluster, fleet):
    base, root, local = fleet
    nodes = _nodes(cluster)
    for node in cluster.nodes:
        res = nodes[node.ip].resources_total
        assert res[node.resource] == 1 and res["CPU"] == 1
        assert res["memory"] == cluster.memory_bytes

    text = cluster.submit("rls-both", _entrypoint(root, base / "out1"), wait=True)
    assert f"analyzed {RUNS} runs" in text
    job = _client(cluster).get_job_info("rls-both")
    assert job.status == "SUCCEEDED"
    for node in cluster.nodes:
        lines = node.log_lines(MARK, job.job_id)
        assert lines, (
            f"no worker of job {job.job_id} ran a unit on node {node.name} ({node.ip}); "
            f"its worker logs: {sorted(f.name for f in node.logs().glob('worker-*'))}\n{text}"
        )
        assert all(f"({node.ip})" in ln for ln in lines)
    assert_same_rows(local, read_steps(base / "out1"))


def test_job_survives_losing_a_node_mid_run(cluster, fleet):
    base, root, local = fleet
    node_a, node_b = cluster.nodes
    client = _client(cluster)
    cluster.submit("rls-kill", _entrypoint(root, base / "out2"), wait=False)

    def b_is_working():
        job = client.get_job_info("rls-kill")
        assert job.status not in TERMINAL, f"job ended before node B was killed: {job.status}"
        return job.status == "RUNNING" and job.job_id and node_b.log_lines(MARK, job.job_id)

    _wait("a worker on node B to start a unit", b_is_working, timeout=120)
    job_id = client.get_job_info("rls-kill").job_id
    a_before = node_a.log_lines(MARK, job_id)
    cluster.kill_raylet(node_b)
    assert client.get_job_status("rls-kill") == "RUNNING"

    status = _wait(
        "the job to end",
        lambda: (s := client.get_job_status("rls-kill")) in TERMINAL and s,
        timeout=180,
        every=0.5,
    )
    logs = client.get_job_logs("rls-kill")
    assert status == "SUCCEEDED", logs[-3000:]
    assert f"analyzed {RUNS} runs" in logs
    assert _nodes(cluster)[node_b.ip].state == "DEAD"
    # B's worker was restarted on A and took over its units.
    assert len(node_a.log_lines(MARK, job_id)) > len(a_before)
    assert_same_rows(local, read_steps(base / "out2"))
