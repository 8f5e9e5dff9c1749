"""Where `analyze` runs (runtime/placement.py): a small plan in this process, no Ray
started at all; `--ray` forces a private Ray; the tables are the same either way, and
the closing report's last line says where the work ran and why."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile

import pytest

from rlstream.pipeline.local import analyze_local
from rlstream.runtime.cluster import TEMP_PARENT_ENV
from rlstream.runtime.placement import PAYS_MARGIN, PRIVATE_RAY_CPU_S, choose, estimate_cpu_s
from rlstream.simulate import SimConfig, simulate
from tests.runtime.helpers import assert_same_rows, read_steps


def test_the_rule_weighs_the_planned_work_against_the_ray_and_the_cores():
    # 2 cores: a private Ray pays above margin * its cost / (2 - 1) CPU s of work.
    threshold = PAYS_MARGIN * PRIVATE_RAY_CPU_S
    below = int(threshold / estimate_cpu_s(1, 1) / 2) - 1  # two chunks alike
    above = below + 2
    assert estimate_cpu_s(below, 2) < threshold < estimate_cpu_s(above, 2)
    assert not choose(below, 2, cores=2).ray
    assert choose(above, 2, cores=2).ray
    # More cores: the same plan pays (the Ray's cost spreads over more of them).
    assert choose(below, 2, cores=8).ray
    # One core: never.
    one = choose(10**9, 1, cores=1)
    assert not one.ray and "1 core" in one.why
    small = choose(6000, 1, cores=2)
    assert small.summary() == (
        "ran in this process (6,000 transcripts planned, about 0.8 CPU s of work: "
        f"on 2 cores a private Ray pays only above {threshold:.0f} s)"
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
    assert "transcripts planned" in last[0] and "a private Ray pays only above" in last[0]
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
