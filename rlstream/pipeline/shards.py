"""Which tailer owns a run on Ray: every run of a cohort goes to the same tailer, so
that tailer's cohort fold (`pipeline.cohorts`: bands and `unlike_peers`) sees all of
the cohort's runs.

`Sharder(storage, hooks_factory, n).split(urls)` returns n lists of run URLs.
`cohort_chunks(storage, urls, cohort, size)` orders a batch's runs by cohort and cuts
them into chunks of at least `size` runs that end where a cohort ends (`analyze`). A run's
key is its cohort, from its reader's identity (Loops' run.json, another trainer's
files) read here once (`hooks_factory.cohort`, the same function the tailer's fold applies),
hashed; else its URL (hooks without cohorts, or files that cannot be read yet). With one tailer nothing is read. A fleet of one large cohort lands
on one tailer: the price of judging a run against all of its peers.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from rlstream.io.storage import Storage

PLAN_THREADS = 16
"""Runs planned (or their run.json read) at once on an object store: a round trip each."""


def run_key(run_url: str) -> str:
    """Stable shard key of a run: used to assign runs to tailers."""
    return hashlib.sha1(run_url.encode()).hexdigest()


def cohort_key(storage: Storage, url: str, cohort: Any) -> str | None:
    """The run's cohort (`cohort(run_id, url, config)`) from its reader's identity
    (`Format.identity`: Loops' run.json), or None when it cannot be read (yet) or
    `cohort` is None."""
    if cohort is None:
        return None
    from rlstream.pipeline.discover import detect_run
    from rlstream.pipeline.streams import identify

    try:
        fmt, names = detect_run(storage, url, listed=False)
        if fmt is None:
            return None
        info, _, _ = identify(storage, url, fmt, names)
        return cohort(info.run_id, url, info.config)
    except Exception:  # unreadable now: the tailer reports it
        return None


def _map(storage: Storage, fn: Any, urls: Sequence[str]) -> list[Any]:
    if storage.is_local or len(urls) < 2:
        return [fn(u) for u in urls]
    _ = storage.fs  # opened once, before the threads share it
    with ThreadPoolExecutor(min(len(urls), PLAN_THREADS), "rlstream-cohort") as pool:
        return list(pool.map(fn, urls))


def cohort_chunks(storage: Storage, urls: Sequence[str], cohort: Any, size: int) -> list[list[str]]:
    """The runs in cohort order (stable; runs without a known cohort last, alone), cut
    into chunks of at least `size` runs ending at a cohort's end."""
    keys = _map(storage, lambda u: cohort_key(storage, u, cohort), urls)
    order = sorted(range(len(urls)), key=lambda i: (keys[i] is None, keys[i] or "", i))
    chunks: list[list[str]] = [[]]
    for n, i in enumerate(order):
        chunks[-1].append(urls[i])
        nxt = order[n + 1] if n + 1 < len(order) else None
        ends = nxt is None or keys[i] is None or keys[nxt] != keys[i]
        if ends and len(chunks[-1]) >= size:
            chunks.append([])
    return [c for c in chunks if c]


class Sharder:
    def __init__(self, storage: Storage, hooks_factory: Any, n: int) -> None:
        self.storage = storage
        self.cohort = getattr(hooks_factory, "cohort", None)
        self.n = max(1, n)

    def key(self, url: str) -> str:
        cohort = cohort_key(self.storage, url, self.cohort)
        return run_key(url) if cohort is None else run_key("cohort:" + cohort)

    def split(self, urls: Sequence[str]) -> list[list[str]]:
        out: list[list[str]] = [[] for _ in range(self.n)]
        if self.n == 1:
            out[0] = list(urls)
            return out
        keys = _map(self.storage, self.key, urls)
        for url, key in zip(urls, keys, strict=True):
            out[int(key, 16) % self.n].append(url)
        return out
