"""A mixed fleet (Loops and every trainer format) on S3, read on Ray, gives the same
steps rows as the local in-process analysis."""

from __future__ import annotations

import os

import boto3

from rlstream.config import PipelineConfig
from rlstream.pipeline.local import analyze_local
from rlstream.runtime.driver import RuntimeConfig
from rlstream.runtime.driver import run as run_pipeline
from tests.formats.test_fleet import mixed_fleet
from tests.formats.trainer_runs import FORMATS
from tests.runtime.helpers import assert_same_rows, read_steps


def test_mixed_fleet_on_s3_with_ray_equals_local(ray_session, s3_server, tmp_path):
    root = mixed_fleet(tmp_path)
    analyze_local([str(root)], str(tmp_path / "local"))
    bucket = f"fmt-{os.getpid()}-{abs(hash(os.urandom(4))) % 10**6}"
    client = boto3.client("s3", endpoint_url=s3_server)
    client.create_bucket(Bucket=bucket)
    for dirpath, _, files in os.walk(root):
        for f in files:
            path = os.path.join(dirpath, f)
            client.upload_file(path, bucket, f"fleet/{os.path.relpath(path, root)}")
    summaries = run_pipeline(
        [f"s3://{bucket}/fleet"],
        str(tmp_path / "s3out"),
        PipelineConfig(),
        RuntimeConfig(workers=2),
    )
    assert sorted(s["format"] for s in summaries) == sorted(["loops", *FORMATS])
    assert_same_rows(read_steps(tmp_path / "local"), read_steps(tmp_path / "s3out"))


def test_worker_processes_read_s3_with_the_drivers_environment(s3_server, tmp_path, monkeypatch):
    """A worker process reads S3 with the endpoint and keys the driver has when it
    starts the worker (not those it had when it imported rlstream, or started workers
    before: a library user, or a test session, may set them later)."""
    from rlstream.io.storage import Storage
    from rlstream.pipeline.work import TranscriptsUnit, UnitResult, execute
    from rlstream.runtime.executors import WorkerPool
    from rlstream.runtime.processes import PROCESS_CALLS, LocalStart
    from rlstream.simulate import SimConfig, simulate

    root = tmp_path / "runs"
    simulate(root, SimConfig(runs=1, steps=3, groups=2, group_size=4, seed=3))
    run_dir = next(p for p in sorted(root.iterdir()) if p.is_dir())
    bucket = f"fmtp-{os.getpid()}-{abs(hash(os.urandom(4))) % 10**6}"
    client = boto3.client("s3", endpoint_url=s3_server)
    client.create_bucket(Bucket=bucket)
    names = sorted(p.name for p in (run_dir / "transcripts").iterdir())
    for name in names:
        client.upload_file(str(run_dir / "transcripts" / name), bucket, f"r/transcripts/{name}")

    monkeypatch.delenv("AWS_ENDPOINT_URL")  # workers started before the endpoint was set
    early = LocalStart(None, 1, delay=0)
    assert early.settled.wait(120) and early.error is None
    early.join()
    monkeypatch.setenv("AWS_ENDPOINT_URL", s3_server)

    storage = Storage.for_url(f"s3://{bucket}/r")
    units = [TranscriptsUnit("r", f"s3://{bucket}/r", tuple(names), -1)]
    start = LocalStart(storage, 1, delay=0)
    try:
        assert start.settled.wait(120) and start.error is None
        (got,) = list(WorkerPool(storage, start.workers, 4, calls=PROCESS_CALLS)(units))
    finally:
        start.join()
    assert isinstance(got, UnitResult) and got.records == len(names)
    want = execute(units[0], storage)
    assert {s: p.agg.finalize() for s, p in got.partials.items()} == {
        s: p.agg.finalize() for s, p in want.partials.items()
    }
