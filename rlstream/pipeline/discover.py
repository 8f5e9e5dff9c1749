"""Finding runs: a run is a folder holding run.json, anywhere under a ROOT."""

from __future__ import annotations

import logging
import os

from rlstream.io.storage import Storage

RUN_JSON = "run.json"

log = logging.getLogger("rlstream")


def normalize_root(url: str) -> str:
    """Local roots become absolute paths so a run's URL is stable across restarts."""
    if "://" in url and not url.startswith("file://"):
        return url.rstrip("/")
    return os.path.abspath(url.removeprefix("file://"))


def find_runs(storage: Storage, root: str, max_depth: int = 4) -> list[str]:
    """URLs of every run folder under `root` (the root itself may be a run), sorted."""
    root = normalize_root(root)
    found: list[str] = []

    # Level by level: the run.json stats of a level go out together (`stat_many`: one
    # round trip on an object store, not one per folder).
    level, depth = [root], 0
    while level:
        stats = storage.stat_many([Storage.join(u, RUN_JSON) for u in level])
        deeper: list[str] = []
        for url, st in zip(level, stats, strict=True):
            if st is not None:
                found.append(url)
            elif depth < max_depth:
                deeper.extend(
                    Storage.join(url, name)
                    for name in storage.list_dirs(url)
                    if not name.startswith((".", "_"))
                )
        level, depth = deeper, depth + 1
    if not found:
        log.warning(
            "no runs under %s (a run is a folder holding run.json)%s",
            root,
            "" if storage.exists(root) else "; that path does not exist",
        )
    return sorted(found)
