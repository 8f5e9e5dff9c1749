"""The command line on Ray and on S3: `analyze` reports what the tailers' commits wrote
(the same figures as in-process), a watch that saw nothing claims nothing, and wrong
s3:// paths (no bucket, no prefix, not an OUT) fail like local ones, before Ray."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import textwrap

import boto3
import pytest

from rlstream.cli import main
from rlstream.config import PipelineConfig
from rlstream.errors import EXIT_REJECTED, EXIT_USAGE
from rlstream.fleet.read import read_table
from rlstream.pipeline.outcome import Outcome, lines
from rlstream.runtime.cluster import TEMP_PARENT_ENV
from rlstream.runtime.driver import RuntimeConfig
from rlstream.runtime.driver import run as run_pipeline
from rlstream.simulate import SimConfig, simulate


@pytest.mark.ray
def test_analyze_on_ray_reports_the_same_counts_as_in_process(ray_session, tmp_path, capsys):
    root = tmp_path / "runs"
    simulate(root, SimConfig(runs=2, steps=6, scenarios=("healthy", "low_ess"), seed=5))
    (root / "broken").mkdir()
    (root / "broken" / "run.json").write_text("[1, 2]")
    said = {}
    for mode in ("ray", "local"):
        argv = ["analyze", str(root), "--out", str(tmp_path / mode), "--workers", "1"]
        assert main(argv + (["--in-process"] if mode == "local" else [])) == EXIT_REJECTED
        said[mode] = capsys.readouterr().out.splitlines()
    local = [line.replace(str(tmp_path / "local"), str(tmp_path / "ray")) for line in said["local"]]
    assert said["ray"][:4] == local[:4]
    steps = read_table(str(tmp_path / "ray"), "steps").num_rows
    assert steps == 12
    assert said["ray"][0].startswith("analyzed 2 runs; wrote ")
    assert f"(steps {steps}, run_health 2, " in said["ray"][0]
    assert said["ray"][2] == f"  {root / 'broken'}: run.json has no string run_id"


@pytest.mark.ray
def test_watch_that_saw_no_runs_claims_no_tables(ray_session, tmp_path):
    root, out = tmp_path / "empty", tmp_path / "out"
    root.mkdir()
    outcome = Outcome()
    polls = iter(range(3))
    run_pipeline(
        [str(root)],
        str(out),
        PipelineConfig(poll_seconds=0.05, commit_seconds=0.05),
        RuntimeConfig(workers=1),
        watch=True,
        stop=lambda: next(polls, None) is None,
        outcome=outcome,
    )
    assert lines(outcome, str(out), "watched") == [
        f"watched 0 runs; nothing new written to {out}",
        "watched on the joined Ray cluster (a cluster is always used)",  # the tests' Ray
    ]
    assert not out.exists()


@pytest.fixture
def bucket(s3_server):
    name = f"rlc-{os.getpid()}-{abs(hash(os.urandom(4))) % 10**6}"
    client = boto3.client("s3", endpoint_url=s3_server)
    client.create_bucket(Bucket=name)
    client.put_object(Bucket=name, Key="photos/cat.jpg", Body=b"x")
    return name


@pytest.mark.s3
def test_wrong_s3_paths_fail_before_ray(bucket, tmp_path, capsys, monkeypatch):
    import rlstream.runtime.driver as driver

    monkeypatch.setattr(driver, "connect", lambda *a: pytest.fail("Ray started"))
    out = str(tmp_path / "o")
    cases = [
        (
            ["analyze", "s3://no-such-bucket-rlc/runs", "--out", out],
            "no bucket 'no-such-bucket-rlc'",
        ),
        (["analyze", f"s3://{bucket}/missing", "--out", out], "no object under that prefix"),
        (["watch", f"s3://{bucket}/missing", "--out", out], "no object under that prefix"),
        (["status", f"s3://{bucket}/missing"], "no object under that prefix"),
        (["status", f"s3://{bucket}/photos"], "is not an rlstream output"),
        (["report", f"s3://{bucket}", "-o", str(tmp_path / "r.html")], "is not an rlstream output"),
    ]
    for argv, words in cases:
        assert main(argv) == EXIT_USAGE, argv
        err = capsys.readouterr().err.strip().splitlines()[-1]
        assert err.startswith("rlstream: error: ") and words in err, (argv, err)
        assert argv[1] in err
    assert not (tmp_path / "r.html").exists() and not (tmp_path / "o").exists()


def test_interrupted_ray_start_leaves_no_temp_folder(tmp_path):
    # In its own interpreter: `disconnect` must not touch the tests' shared Ray.
    parent = tempfile.mkdtemp(prefix="rlc", dir="/tmp")
    code = textwrap.dedent(
        """
        import os, sys
        from rlstream.runtime import cluster

        def interrupted(*a):
            os.makedirs(os.path.join(cluster._TEMP_DIRS[0], "session_x"))  # Ray began
            raise KeyboardInterrupt

        cluster._init_private = interrupted
        try:
            cluster.connect(cluster.RayConfig())
        except KeyboardInterrupt:
            print("interrupted", cluster.private_ray())
        """
    )
    try:
        env = {**os.environ, TEMP_PARENT_ENV: parent}
        env.pop("RAY_ADDRESS", None)
        res = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120
        )
        assert res.returncode == 0, res.stderr[-2000:]
        assert res.stdout.split() == ["interrupted", "False"]
        assert os.listdir(parent) == []
    finally:
        shutil.rmtree(parent, ignore_errors=True)
