"""Run folders on S3 are untrusted too: an object above the per-file limit is told
from the listing's size and quarantined as file_too_large without being fetched; a
key with a `..` is refused without a request (moto's server, real HTTP)."""

from __future__ import annotations

import os

import boto3
import pytest

from rlstream.config import PipelineConfig
from rlstream.errors import FileTooLarge, UnsafeFile
from rlstream.io.storage import Storage
from rlstream.pipeline.local import analyze_local
from tests.outputs import out_sql
from tests.pipeline.runfiles import write_run


@pytest.fixture
def bucket(s3_server):
    name = f"unt-{os.getpid()}-{abs(hash(os.urandom(4))) % 10**6}"
    boto3.client("s3", endpoint_url=s3_server).create_bucket(Bucket=name)
    return name


def _upload(root, bucket: str, prefix: str) -> None:
    client = boto3.client("s3", endpoint_url=os.environ["AWS_ENDPOINT_URL"])
    for dirpath, _, files in os.walk(root):
        for f in files:
            path = os.path.join(dirpath, f)
            client.upload_file(path, bucket, f"{prefix}/{os.path.relpath(path, root)}")


def test_an_object_above_the_limit_is_quarantined_from_its_listed_size_never_fetched(
    s3_server, bucket, s3_requests, tmp_path
):
    run = write_run(tmp_path / "runs", steps=3)
    (run / "transcripts" / "huge.json").write_bytes(b"[" + b"1," * (3 << 19) + b"1]")
    size = (run / "transcripts" / "huge.json").stat().st_size
    _upload(tmp_path / "runs", bucket, "fleet")
    before = len(s3_requests())
    out = tmp_path / "out"
    analyze_local([f"s3://{bucket}/fleet"], str(out), PipelineConfig(max_file_bytes=1 << 20))
    rows = out_sql(out, "select file, reason, detail from quarantine where reason <> 'late'")
    assert rows == [
        (
            "transcripts/huge.json",
            "file_too_large",
            f"not read: {size} bytes, above the limit of {1 << 20}",
        )
    ]
    assert out_sql(out, "select count(*) from steps") == [(3,)]
    gets = [r for r in s3_requests()[before:] if r.startswith("GET ") and "huge.json" in r]
    assert gets == []  # neither a whole GET nor a range of it


def test_read_and_read_many_take_sizes_from_the_listing(s3_server, bucket, s3_requests):
    st = Storage.for_url(f"s3://{bucket}", max_file_bytes=100)
    st.write_atomic(f"s3://{bucket}/r/a.json", b"x" * 50)
    st.write_atomic(f"s3://{bucket}/r/b.json", b"x" * 150)
    assert st.read(f"s3://{bucket}/r/a.json") == b"x" * 50
    with pytest.raises(FileTooLarge) as e:
        st.read(f"s3://{bucket}/r/b.json")
    assert e.value.reason == "150 bytes, above the limit of 100"
    with pytest.raises(FileNotFoundError):
        st.read(f"s3://{bucket}/r/gone.json")
    before = len(s3_requests())
    urls = [f"s3://{bucket}/r/{n}" for n in ("a.json", "b.json", "gone.json", "../r/a.json")]
    got = dict(st.read_many(urls))
    assert got[urls[0]] == b"x" * 50 and got[urls[2]] is None
    assert isinstance(got[urls[1]], FileTooLarge)
    assert isinstance(got[urls[3]], UnsafeFile) and got[urls[3]].reason == "a '..' in its path"
    made = s3_requests()[before:]
    assert len(made) == 2  # one listing of r/, one GET of a.json
    assert sum("a.json" in r and r.startswith("GET ") for r in made) == 1
