"""Which tailer owns a run on Ray: every run of a cohort goes to the same tailer, so
that tailer's cohort fold (`pipeline.cohorts`: bands and `unlike_peers`) sees all of
the cohort's runs.

`Sharder(storage, hooks_factory, n).split(urls)` returns n lists of run URLs. A run's
key is its cohort, from its run.json read here once (`hooks_factory.cohort`, the same
function the tailer's fold applies), hashed; else its URL (hooks without cohorts, a
run.json that cannot be read yet, or a trainer format whose config is not a run.json,
docs/formats.md). With one tailer nothing is read. A fleet of one large cohort lands
on one tailer: the price of judging a run against all of its peers.
"""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from rlstream.io.storage import Storage
from rlstream.pipeline.runjson import read_run_json
from rlstream.pipeline.runner import PLAN_THREADS, run_key


class Sharder:
    def __init__(self, storage: Storage, hooks_factory: Any, n: int) -> None:
        self.storage = storage
        self.cohort = getattr(hooks_factory, "cohort", None)
        self.n = max(1, n)

    def key(self, url: str) -> str:
        if self.cohort is None:
            return run_key(url)
        try:
            meta, _, _ = read_run_json(self.storage, url)
        except Exception:  # unreadable now: the tailer reports it; shard by URL
            meta = None
        if meta is None:
            return run_key(url)
        return run_key("cohort:" + self.cohort(meta["run_id"], url, meta.get("config") or {}))

    def split(self, urls: Sequence[str]) -> list[list[str]]:
        out: list[list[str]] = [[] for _ in range(self.n)]
        if self.n == 1:
            out[0] = list(urls)
            return out
        if self.storage.is_local or len(urls) < 2:
            keys = [self.key(u) for u in urls]
        else:
            _ = self.storage.fs  # opened once, before the threads share it
            with ThreadPoolExecutor(min(len(urls), PLAN_THREADS), "rlstream-shard") as pool:
                keys = list(pool.map(self.key, urls))
        for url, key in zip(urls, keys, strict=True):
            out[int(key, 16) % self.n].append(url)
        return out
