"""Object storage at a real latency: moto's S3 server behind bench's latency proxy.

Many reads are in flight at once (the proxy sees them), results are folded in order
(the same bytes, the same unit results and tables as a serial read and as local
disk), a tiny in-flight budget reads one object at a time, and throttling (`503
SlowDown` injected by the proxy) is retried: nothing lost, nothing counted twice.
"""

from __future__ import annotations

import os
import pickle
from urllib.parse import urlparse

import boto3
import pytest

from bench.proxy import LatencyProxy
from rlstream.config import PipelineConfig
from rlstream.io.storage import Storage
from rlstream.pipeline.local import analyze_local
from rlstream.pipeline.work import TranscriptsUnit, execute
from rlstream.simulate import SimConfig, simulate
from tests.runtime.helpers import assert_same_rows, read_steps

pytestmark = pytest.mark.s3


@pytest.fixture
def bucket(s3_server):
    name = f"rlsl-{os.getpid()}-{abs(hash(os.urandom(4))) % 10**6}"
    boto3.client("s3", endpoint_url=s3_server).create_bucket(Bucket=name)
    return name


@pytest.fixture
def proxy(s3_server):
    with LatencyProxy(urlparse(s3_server).port, delay=0.02) as px:
        yield px


def _upload(local_root, bucket: str, prefix: str) -> None:
    client = boto3.client("s3", endpoint_url=os.environ["AWS_ENDPOINT_URL"])
    for dirpath, _, files in os.walk(local_root):
        for f in files:
            path = os.path.join(dirpath, f)
            client.upload_file(path, bucket, f"{prefix}/{os.path.relpath(path, local_root)}")


def _via(px: LatencyProxy, inflight: int | None = None) -> Storage:
    extra = {} if inflight is None else {"read_inflight_bytes": inflight}
    return Storage.for_url("s3://x", {"endpoint_url": px.endpoint}, **extra)


def test_read_many_keeps_reads_in_flight_and_yields_in_order(bucket, proxy):
    client = boto3.client("s3", endpoint_url=os.environ["AWS_ENDPOINT_URL"])
    blobs = {f"s3://{bucket}/t/{i:03d}.json": os.urandom(100 + 37 * i) for i in range(40)}
    for url, data in blobs.items():
        client.put_object(Bucket=bucket, Key=url.split("/", 3)[3], Body=data)
    urls = [*blobs, f"s3://{bucket}/t/gone.json"]
    expected = [*blobs.values(), None]

    before = proxy.requests()
    got = list(_via(proxy).read_many(urls))
    assert [u for u, _ in got] == urls
    assert [d for _, d in got] == expected
    assert proxy.peak_inflight > 8  # many reads at once, not one after the other
    assert proxy.snapshot()["GET"] >= len(urls)
    assert proxy.requests() - before == 1 + len(blobs)  # a listing, a GET per listed object

    proxy.peak_inflight = 0
    got = list(_via(proxy, inflight=1).read_many(urls))
    assert [d for _, d in got] == expected
    assert proxy.peak_inflight == 1  # a budget below one object: serial reads


def test_stat_many_is_one_round_of_requests(bucket, proxy):
    st = _via(proxy)
    st.write_atomic(f"s3://{bucket}/r/a", b"12345")
    st.write_atomic(f"s3://{bucket}/r/b", b"1")
    proxy.peak_inflight = 0
    stats = st.stat_many([f"s3://{bucket}/r/a", f"s3://{bucket}/r/missing", f"s3://{bucket}/r/b"])
    assert [s.size if s else None for s in stats] == [5, None, 1]
    assert stats[0].etag and stats[0] == st.stat(f"s3://{bucket}/r/a")
    assert proxy.peak_inflight >= 2


def test_transcripts_unit_equals_serial_and_local(bucket, proxy, tmp_path):
    simulate(tmp_path / "runs", SimConfig(runs=1, steps=4, groups=4, seed=5))
    (run,) = [p for p in (tmp_path / "runs").iterdir() if p.is_dir()]
    _upload(tmp_path / "runs", bucket, "fleet")
    names = sorted(p.name for p in (run / "transcripts").iterdir())
    names.insert(7, "vanished-between-list-and-read.json")

    def unit(run_url: str) -> TranscriptsUnit:
        return TranscriptsUnit("r", run_url, tuple(names), final_through=-1)

    s3_url = f"s3://{bucket}/fleet/{run.name}"
    local = execute(unit(str(run)), Storage())
    concurrent = execute(unit(s3_url), _via(proxy))
    serial = execute(unit(s3_url), _via(proxy, inflight=1))
    assert local.records == len(names) - 1 and local.tokens > 0
    assert [q.reason for q in local.quarantine] == ["vanished"]
    assert pickle.dumps(concurrent) == pickle.dumps(local)
    assert pickle.dumps(serial) == pickle.dumps(local)


def test_throttling_is_retried_nothing_lost_or_counted_twice(bucket, s3_server, tmp_path):
    simulate(tmp_path / "runs", SimConfig(runs=2, steps=3, groups=4, seed=9))
    _upload(tmp_path / "runs", bucket, "fleet")
    ref = analyze_local([str(tmp_path / "runs")], str(tmp_path / "local"))

    def every_tenth(n: int, method: str, path: str) -> bool:
        return n % 10 == 0

    # Each 503 costs the client's backoff (botocore's: up to 2^attempt s): few, on purpose.
    with LatencyProxy(urlparse(s3_server).port, 0.005, throttle=every_tenth) as px:
        cfg = PipelineConfig(transcripts_per_unit=32, storage_options={"endpoint_url": px.endpoint})
        got = analyze_local([f"s3://{bucket}/fleet"], str(tmp_path / "s3"), cfg)
    assert px.throttled >= 10  # 503 SlowDown on GETs and HEADs of every kind of file
    assert_same_rows(read_steps(str(tmp_path / "local")), read_steps(str(tmp_path / "s3")))
    assert [dict(s.counters) for s in got] == [dict(s.counters) for s in ref]
    consumed = [(s.names_low, s.names_below, sorted(s.names_window)) for s in got]
    assert consumed == [(s.names_low, s.names_below, sorted(s.names_window)) for s in ref]
