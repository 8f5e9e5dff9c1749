"""Where `analyze` runs (runtime/placement.py): a small plan in this process, a large
one with worker processes beside it, no Ray started either way; `--ray` forces a
private Ray; the tables are the same wherever the work ran, and the closing report's
last line says where and why."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile

import pytest

from rlstream.pipeline.local import analyze_local
from rlstream.runtime.cluster import TEMP_PARENT_ENV
from rlstream.runtime.placement import PAYS_MARGIN, PROCESS_CPU_S, choose, estimate_cpu_s
from rlstream.simulate import SimConfig, simulate
from tests.runtime.helpers import assert_same_rows, read_steps


def test_the_rule_weighs_the_planned_work_against_the_processes_and_the_cores():
    # 2 cores: 2 worker processes pay above margin * their cost / (2 - 1) CPU s of work.
    threshold = PAYS_MARGIN * PROCESS_CPU_S * 2
    below = int(threshold / estimate_cpu_s(1, 1) / 2) - 1  # two chunks alike
    above = below + 2
    assert estimate_cpu_s(below, 2) < threshold < estimate_cpu_s(above, 2)
    assert choose(below, 2, cores=2).processes == 0
    assert choose(above, 2, cores=2).processes == 2  # one per core; the driver folds
    # More cores: the same plan pays (the cost spreads over more of them).
    assert choose(below, 2, cores=8).processes == 8
    # One core: never.
    one = choose(10**9, 1, cores=1)
    assert one.processes == 0 and "1 core" in one.why
    small = choose(3000, 1, cores=2)
    assert small.summary() == (
        "ran in this process (3,000 transcripts planned, about 0.8 CPU s of work: "
        f"on 2 cores worker processes pay only above {threshold:.1f} s)"
    )
    big = choose(40000, 2, cores=2)
    assert big.summary() == (
        "ran in this process and 2 worker processes (80,000 transcripts planned, about "
        f"22.4 CPU s of work: on 2 cores worker processes pay above {threshold:.1f} s)"
    )


def _analyze(tmp_path, root, name: str, *extra: str) -> tuple[subprocess.CompletedProcess, list]:
    """`rlstream analyze` in a subprocess with Ray's temp folders under a parent of
    its own: returns the result and what is left under that parent / running from it."""
    parent = tempfile.mkdtemp(prefix="rlp", dir="/tmp")
    cmd = [sys.executable, "-m", "rlstream.cli", "analyze", str(root)]
    cmd += ["--out", str(tmp_path / name), "--workers", "1", *extra]
    try:
        env = {**os.environ, TEMP_PARENT_ENV: parent}
        env.pop("RAY_ADDRESS", None)
        res = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)
        assert res.returncode == 0, res.stderr[-3000:]
        made = os.listdir(parent)
        left = subprocess.run(["pgrep", "-f", parent], capture_output=True, text=True)
        assert left.stdout.split() == []  # whatever was started is stopped
    finally:
        shutil.rmtree(parent, ignore_errors=True)
    return res, made


@pytest.mark.ray
def test_small_plan_runs_here_and_ray_is_forced_by_flag(tmp_path):
    root = tmp_path / "runs"
    simulate(root, SimConfig(runs=2, steps=4, seed=11))
    analyze_local([str(root)], str(tmp_path / "local"))

    res, made = _analyze(tmp_path, root, "auto")
    assert made == []  # no Ray temp folder: no Ray was ever started
    last = [line for line in res.stdout.splitlines() if line.startswith("ran ")]
    assert len(last) == 1 and last[0].startswith("ran in this process (")
    assert "transcripts planned" in last[0] and "worker processes pay only above" in last[0]
    assert "no Ray started" in res.stderr

    forced, _ = _analyze(tmp_path, root, "forced", "--ray")
    assert "starting a private local Ray" in forced.stderr
    said = [line for line in forced.stdout.splitlines() if line.startswith("ran ")]
    # On a busy host the work may end before the worker is ready: the line says which.
    assert said in (
        ["ran on a private Ray (asked for: --ray)"],
        [
            "ran in this process while a private Ray started (asked for: --ray): "
            "done before its workers were ready"
        ],
    )

    local = read_steps(tmp_path / "local")
    assert len(local) == 8
    assert_same_rows(local, read_steps(tmp_path / "auto"))
    assert_same_rows(local, read_steps(tmp_path / "forced"))


def test_in_process_and_ray_contradict(tmp_path, capsys):
    from rlstream.cli import main

    root = tmp_path / "runs"
    simulate(root, SimConfig(runs=1, steps=2, seed=1))
    code = main(["analyze", str(root), "--out", str(tmp_path / "o"), "--in-process", "--ray"])
    assert code == 2
    assert "--in-process and --ray contradict" in capsys.readouterr().err


def test_processes_contradict_ray_and_in_process(tmp_path, capsys):
    from rlstream.cli import main

    root = tmp_path / "runs"
    simulate(root, SimConfig(runs=1, steps=2, seed=1))
    for other in ("--ray", "--in-process"):
        code = main(["analyze", str(root), "--out", str(tmp_path / "o"), "--processes", "2", other])
        assert code == 2
        assert f"--processes and {other} contradict" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()


def test_processes_flag_runs_units_in_worker_processes(tmp_path):
    root = tmp_path / "runs"
    simulate(root, SimConfig(runs=2, steps=4, seed=11))
    analyze_local([str(root)], str(tmp_path / "local"))
    res, made = _analyze(tmp_path, root, "procs", "--processes", "2")
    assert made == []  # no Ray
    said = [line for line in res.stdout.splitlines() if line.startswith("ran ")]
    assert said in (
        ["ran in this process and 2 worker processes (asked for: --processes 2)"],
        [
            "ran in this process (asked for: --processes 2): done before the worker "
            "processes were ready"
        ],
    )
    assert "in worker processes (2 worker processes ready after" in res.stderr or (
        "the work ended before the worker processes were ready" in res.stderr
    )
    assert_same_rows(read_steps(tmp_path / "local"), read_steps(tmp_path / "procs"))
