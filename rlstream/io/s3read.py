"""`Storage.read_many` on S3: sizes from the listing first, then many GETs in flight.

One ListObjectsV2 per folder of the batch (starting just before its first name) gives
every object's size before any GET: an object above `max_file_bytes` is answered with
`FileTooLarge` and never fetched, one not listed is `None` (gone), one with a `..` in
its key is `UnsafeFile`. The rest are read through `rlstream.io.window.read_window`,
each counted at its decoded cost (its listed size times `DECODE_FACTOR`), so several
large objects at once stay within `read_inflight_bytes`. Results come in the order
given.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator, Sequence
from typing import Any

from rlstream.errors import FileTooLarge, UnsafeFile
from rlstream.io.localfs import dotdot
from rlstream.io.s3 import POOL_CONNECTIONS, list_stats
from rlstream.io.window import DECODE_FACTOR, read_window


def listed_sizes(storage: Any, urls: Sequence[str]) -> dict[str, int]:
    """Each URL's size from one listing per folder (absent: not listed)."""
    by_folder: dict[str, list[str]] = {}
    for u in urls:
        folder, _, name = storage.strip(u).rpartition("/")
        by_folder.setdefault(folder, []).append(name)
    sizes: dict[str, int] = {}
    for folder, names in by_folder.items():
        got = list_stats(storage.fs, folder, names, start_after=min(names)[:-1])
        for n, (size, _) in got.items():
            sizes[storage.url(f"{folder}/{n}")] = size
    return sizes


def read_many_s3(storage: Any, urls: Sequence[str]) -> Iterator[tuple[str, Any]]:
    """`(url, bytes | None | UnsafeFile)` for each of `urls`, in order (see the module
    docstring); other errors of a GET are raised."""
    fs = storage.fs
    limit = storage.max_file_bytes
    fine = [u for u in urls if dotdot(storage.strip(u)) is None]
    sizes = listed_sizes(storage, fine)
    fetch = [u for u in fine if u in sizes and sizes[u] <= limit]

    def submit(url: str) -> Any:
        coro = fs._cat_file(storage.strip(url), max_concurrency=1)
        return asyncio.run_coroutine_threadsafe(coro, fs.loop)

    window = read_window(
        submit,
        fetch,
        storage.read_inflight_bytes,
        POOL_CONNECTIONS,
        size_of=sizes.get,
        factor=DECODE_FACTOR,
    )
    try:
        for url in urls:
            path = storage.strip(url)
            why = dotdot(path)
            if why is not None:
                yield url, UnsafeFile(path, why)
            elif url not in sizes:
                yield url, None
            elif sizes[url] > limit:
                yield url, FileTooLarge(path, f"{sizes[url]} bytes, above the limit of {limit}")
            else:
                got_url, got = next(window)
                assert got_url == url
                if isinstance(got, FileNotFoundError):
                    yield url, None
                elif isinstance(got, BaseException):
                    raise got
                else:
                    yield url, got
    finally:
        window.close()
