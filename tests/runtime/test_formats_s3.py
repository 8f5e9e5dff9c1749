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
