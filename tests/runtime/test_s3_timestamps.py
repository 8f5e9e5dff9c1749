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
