"""Object storage as source and sink: runs on S3 (moto's server, real HTTP) analysed
to S3 give the same tables as the local analysis; growing objects are read by range."""

from __future__ import annotations

import os

import boto3
import pytest

from rlstream.config import PipelineConfig
from rlstream.io.storage import Storage
from rlstream.pipeline.local import analyze_local
from rlstream.runtime.driver import RuntimeConfig
from rlstream.runtime.driver import run as run_pipeline
from rlstream.simulate import SimConfig, simulate
from tests.runtime.helpers import assert_same_rows, read_steps


@pytest.fixture
def bucket(s3_server):
    name = f"rls-{os.getpid()}-{abs(hash(os.urandom(4))) % 10**6}"
    boto3.client("s3", endpoint_url=s3_server).create_bucket(Bucket=name)
    return name


def _upload(local_root, bucket: str, prefix: str) -> None:
    client = boto3.client("s3", endpoint_url=os.environ["AWS_ENDPOINT_URL"])
    for dirpath, _, files in os.walk(local_root):
        for f in files:
            path = os.path.join(dirpath, f)
            key = f"{prefix}/{os.path.relpath(path, local_root)}"
            client.upload_file(path, bucket, key)


def test_s3_to_s3_equals_local(ray_session, s3_server, bucket, tmp_path):
    simulate(
        tmp_path / "runs",
        SimConfig(runs=3, steps=8, scenarios=("healthy", "low_ess", "stale_rollouts"), seed=21),
    )
    analyze_local([str(tmp_path / "runs")], str(tmp_path / "local"))
    _upload(tmp_path / "runs", bucket, "fleet")
    out = f"s3://{bucket}/tables"
    summaries = run_pipeline(
        [f"s3://{bucket}/fleet"],
        out,
        PipelineConfig(transcripts_per_unit=16),
        RuntimeConfig(workers=2, tailers=2),  # two writers to each table on S3
    )
    assert len(summaries) == 3
    opts = {"endpoint_url": s3_server}
    assert_same_rows(read_steps(tmp_path / "local"), read_steps(f"s3://{bucket}/tables", opts))


def test_s3_growing_object_is_read_from_the_old_offset(s3_server, bucket):
    """An object rewritten whole with more lines: only the new range is fetched; a
    rewrite that changes earlier bytes is detected through the check bytes."""
    from rlstream.io.tail import FileCursor, advance, plan_read, verify_prefix

    st = Storage.for_url(f"s3://{bucket}")
    url = f"s3://{bucket}/run/steps.jsonl"
    st.write_atomic(url, b'{"step": 0}\n{"step": 1')
    stat = st.stat(url)
    plan = plan_read(FileCursor(), stat)
    lines, cur = advance(FileCursor(), plan, stat, st.read_range(url, plan.start, plan.end))
    assert [line for _, line in lines] == [b'{"step": 0}'] and cur.position == 12
    st.write_atomic(url, b'{"step": 0}\n{"step": 1}\n{"step": 2}\n')
    stat2 = st.stat(url)
    assert stat2.etag != stat.etag
    plan2 = plan_read(cur, stat2)
    assert plan2.start == 0 and plan2.reset is None  # 12 check bytes before offset 12
    data = st.read_range(url, plan2.start, plan2.end)
    assert verify_prefix(cur, plan2, data)
    lines2, cur2 = advance(cur, plan2, stat2, data)
    assert list(lines2) == [(12, b'{"step": 1}'), (24, b'{"step": 2}')]
    # A rewrite that is not an append: same length, different earlier bytes.
    st.write_atomic(url, b'{"step": 9}\n{"step": 1}\n{"step": 2}\n{"step": 3}\n')
    stat3 = st.stat(url)
    plan3 = plan_read(cur2, stat3)
    assert not verify_prefix(cur2, plan3, st.read_range(url, plan3.start, plan3.end))


def test_s3_listing_after_a_name_is_incremental(s3_server, bucket):
    st = Storage.for_url(f"s3://{bucket}")
    for i in range(5):
        st.write_atomic(f"s3://{bucket}/r/transcripts/a{i:08d}.json", b"{}")
    assert st.list_names(f"s3://{bucket}/r/transcripts") == [f"a{i:08d}.json" for i in range(5)]
    assert st.list_names(f"s3://{bucket}/r/transcripts", start_after="a00000002.json") == [
        "a00000003.json",
        "a00000004.json",
    ]


def test_readers_cost_the_same_requests_after_a_longer_history(s3_server, s3_requests, bucket):
    """`status` and `report` reads (read_latest, steps of one run, the step digest) on
    S3 cost a handful of requests per table after maintenance, however many commits
    came before."""
    from rlstream.fleet.read import StepsTable, out_sink, read_latest, read_run_points
    from rlstream.pipeline.rows import steps_table
    from rlstream.sinks.health import run_health_table
    from rlstream.sinks.maintain import MaintenanceConfig, maintain
    from rlstream.sinks.step_digest import read_step_digest, uncovered_rows

    opts = {"endpoint_url": s3_server}
    out = f"s3://{bucket}/out"
    sink = out_sink(out, opts, retention_seconds=0)
    step = 0

    def commits(n: int) -> None:
        nonlocal step
        for _ in range(n):
            row = {"run_id": "r", "run_uri": "/r", "as_of": 1.8e9 + step, "commit_seq": step}
            sink.append("run_health", run_health_table([{**row, "status": "healthy"}]), {"a": step})
            sink.append("steps", steps_table([{"run_id": "r", "step": step}]), {"a": step})
            step += 1

    def reads() -> int:
        before = len(s3_requests())
        assert read_latest(out, opts)[0]["commit_seq"] == step - 1
        assert StepsTable(out, opts).run("r", ["time"])["step"] == list(range(step))
        run_points = read_run_points(out, opts)["r"]
        assert (run_points.rows, run_points.last_step) == (step, step - 1)
        return len(s3_requests()) - before

    commits(4)
    maintain(sink, MaintenanceConfig())
    # The digest covers every steps file after the pass: a reader folds no row.
    rows, files = uncovered_rows(sink, read_step_digest(sink)[1])
    assert rows.num_rows == 0 and len(files) >= 1
    short = reads()
    commits(16)
    maintain(sink, MaintenanceConfig())
    long = reads()
    assert long == short and short <= 30, (short, long)
