"""The S3 filesystem `Storage` opens: its timestamp parser agrees with botocore's."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from botocore.utils import parse_timestamp as botocore_parse

from rlstream.io.s3 import parse_timestamp
from rlstream.io.storage import Storage


@pytest.mark.parametrize(
    "text",
    [
        "2026-12-01T06:20:00.000Z",  # S3 listings' LastModified
        "2026-12-01T06:20:00Z",
        "2026-12-01T06:20:00.123456+02:00",
        "Tue, 01 Dec 2026 06:20:00 GMT",  # a Last-Modified header
    ],
)
def test_timestamps_parse_as_botocore_parses_them(text: str) -> None:
    got = parse_timestamp(text)
    assert got == botocore_parse(text)
    assert got.utcoffset() is not None


def test_listing_times_are_parsed_by_the_fast_parser(s3_server: str) -> None:
    st = Storage.for_url("s3://ts-bucket", {"endpoint_url": s3_server})
    st.fs.mkdir("ts-bucket")
    st.write_atomic("s3://ts-bucket/d/a.json", b"{}")
    factory = st.fs.session.get_component("response_parser_factory")
    assert factory._defaults["timestamp_parser"] is parse_timestamp
    (entry,) = st.fs.ls("ts-bucket/d", detail=True)
    age = datetime.now(UTC) - entry["LastModified"]
    assert abs(age.total_seconds()) < 300
    assert st.list_names("s3://ts-bucket/d", start_after="") == ["a.json"]


def test_a_folders_files_are_stated_from_one_listing(s3_server: str) -> None:
    """`stat_files` gives what a HEAD of each file gives (size, ETag; None when the
    file is absent), from one listing, also when the listing takes several pages."""
    from rlstream.io.s3 import list_stats

    st = Storage.for_url("s3://stat-bucket", {"endpoint_url": s3_server})
    st.fs.mkdir("stat-bucket")
    run = "s3://stat-bucket/runs/r1"
    for name, data in [("a.txt", b"x"), ("rollouts.jsonl", b"{}\n" * 3), ("run.json", b"{}")]:
        st.write_atomic(f"{run}/{name}", data)
    st.write_atomic(f"{run}/steps.jsonl", b'{"step": 0}\n')
    st.write_atomic(f"{run}/transcripts/a0.json", b"{}")
    names = ("run.json", "steps.jsonl", "rollouts.jsonl", "missing.jsonl")
    want = [st.stat(f"{run}/{n}") for n in names]
    assert want[-1] is None and want[1].size == 12 and want[1].etag
    assert st.stat_files(run, names) == want
    paged = list_stats(st.fs, "stat-bucket/runs/r1", list(names), page=2)
    assert {n: (s.size, s.etag) for n, s in zip(names, want, strict=True) if s} == paged
