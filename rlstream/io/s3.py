"""S3 specifics of `Storage`: how its s3fs filesystem is opened, and listing after a name.

- `open_s3`: s3fs with no instance or listing cache (a grown object must show its new
  size and ETag), a connection pool as large as the requests kept in flight, the
  endpoint from `AWS_ENDPOINT_URL_S3` / `AWS_ENDPOINT_URL` when the options name none,
  and a timestamp parser that reads the ISO 8601 times of S3's XML (every
  `LastModified` of a listing) with `datetime.fromisoformat`, and a header's RFC 822
  time (`Last-Modified` of every GET) with the standard library's RFC 822 parser,
  instead of botocore's general parser (dateutil), which costs a watch more CPU than
  the rest of a listing's parsing. Anything else still goes to botocore's parser.
- `list_after`: ListObjectsV2 with `StartAfter`, so a listing costs O(new names).
- `list_stats`: the size and ETag of a few files of one folder from one listing,
  instead of a HEAD each; `object_size`: one object's size from a one-key listing
  (known before its GET, so an object above the per-file limit is never fetched).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from datetime import datetime
from email.utils import parsedate_to_datetime
from typing import Any

POOL_CONNECTIONS = 64
"""Size of the S3 connection pool: the requests `Storage` keeps in flight at most."""


def parse_timestamp(value: Any) -> datetime:
    """A timezone-aware datetime from an S3 response's timestamp."""
    if isinstance(value, str):
        try:
            if "T" in value:
                return datetime.fromisoformat(value)
            if value.endswith("GMT"):
                return parsedate_to_datetime(value)
        except (ValueError, TypeError):
            pass
    from botocore.utils import parse_timestamp as general

    return general(value)


def open_s3(protocol: str, options: dict[str, Any]) -> Any:
    """An s3fs filesystem for `options` (see the module docstring), session set up."""
    import fsspec

    opts = dict(options)
    opts.setdefault("skip_instance_cache", True)
    opts.setdefault("use_listings_cache", False)
    opts.setdefault("config_kwargs", {"max_pool_connections": POOL_CONNECTIONS})
    endpoint = os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL")
    if endpoint and "endpoint_url" not in opts:
        opts["endpoint_url"] = endpoint
    fs = fsspec.filesystem(protocol, **opts)
    fs.connect()  # the session exists from here on: its response parsers can be set
    factory = fs.session.get_component("response_parser_factory")
    factory.set_parser_defaults(timestamp_parser=parse_timestamp)
    return fs


def _objects(fs: Any, path: str, **extra: Any) -> Iterator[tuple[str, dict[str, Any]]]:
    """(base name, listing entry) of the objects directly under `path`, in key order,
    a ListObjectsV2 page at a time (`extra`: StartAfter, MaxKeys)."""
    from fsspec.asyn import sync

    bucket, _, prefix = path.partition("/")
    prefix = f"{prefix}/" if prefix else ""
    kwargs: dict[str, Any] = {"Bucket": bucket, "Prefix": prefix, "Delimiter": "/", **extra}
    if "StartAfter" in kwargs:
        kwargs["StartAfter"] = prefix + kwargs["StartAfter"]
    while True:
        resp = sync(fs.loop, fs._call_s3, "list_objects_v2", **kwargs)
        for o in resp.get("Contents", []):
            yield o["Key"][len(prefix) :], o
        token = resp.get("NextContinuationToken")
        if not resp.get("IsTruncated") or not token:
            return
        kwargs = {**kwargs, "ContinuationToken": token}
        kwargs.pop("StartAfter", None)


def list_after(fs: Any, path: str, start_after: str) -> list[str]:
    """Sorted base names of the objects directly under `path` that sort after
    `start_after` (one ListObjectsV2 request per 1,000 names)."""
    return sorted(name for name, _ in _objects(fs, path, StartAfter=start_after))


def list_stats(
    fs: Any, path: str, names: list[str], page: int = 1000, start_after: str = ""
) -> dict[str, tuple[int, str | None]]:
    """(size, ETag) of each of `names` found directly under `path`, from one
    ListObjectsV2 request (more only when over `page` objects sort between
    `start_after`, which must sort before every name, and the last name): a listing
    shows the same size and ETag as a HEAD of each object."""
    wanted, last = set(names), max(names)
    got: dict[str, tuple[int, str | None]] = {}
    extra: dict[str, Any] = {"StartAfter": start_after} if start_after else {}
    for name, o in _objects(fs, path, MaxKeys=page, **extra):
        if name in wanted:
            etag = o.get("ETag")
            got[name] = (int(o["Size"]), str(etag).strip('"') if etag else None)
        if name >= last:
            break
    return got


def object_size(fs: Any, path: str) -> int | None:
    """The size of the object at `path` from a one-key listing (Prefix = its key), or
    None when there is none: known before its GET, as a HEAD would tell."""
    from fsspec.asyn import sync

    bucket, _, key = path.partition("/")
    resp = sync(fs.loop, fs._call_s3, "list_objects_v2", Bucket=bucket, Prefix=key, MaxKeys=1)
    for o in resp.get("Contents", []):
        if o["Key"] == key:
            return int(o["Size"])
    return None
