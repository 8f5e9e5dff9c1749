"""Finding runs: a run is a folder holding run.json, anywhere under a ROOT.

`check_root(storage, root)` says, before anything starts, whether a ROOT named on the
command line is a folder this process can list (an `InputError` naming the path and
what to do if not); `find_runs` then lists the runs under it.
"""

from __future__ import annotations

import logging
import os

from rlstream.errors import InputError
from rlstream.io.storage import Storage

RUN_JSON = "run.json"

log = logging.getLogger("rlstream")


def normalize_root(url: str) -> str:
    """Local roots become absolute paths so a run's URL is stable across restarts."""
    if "://" in url and not url.startswith("file://"):
        return url.rstrip("/")
    return os.path.abspath(url.removeprefix("file://"))


def probe_folder(storage: Storage, url: str) -> str | None:
    """None if `url` is a folder (or, on object storage, a bucket or a prefix holding
    objects) that this process can list; otherwise why not, as a short phrase."""
    path = storage.strip(url).rstrip("/")
    if storage.is_local:
        if not os.path.exists(path):
            return "does not exist"
        if not os.path.isdir(path):
            return "is a file, not a folder"
        if not os.access(path, os.R_OK | os.X_OK):
            return "cannot be read (permission denied)"
        return None
    bucket = path.split("/", 1)[0]
    try:
        fs = storage.fs
        if not fs.exists(bucket):
            return f"does not exist (no bucket {bucket!r})"
        if bucket != path and not fs.isdir(path):
            return (
                "is a file, not a folder"
                if fs.exists(path)
                else "does not exist (no object under that prefix)"
            )
    except PermissionError as e:
        return f"cannot be read (access denied: {e})"
    except Exception as e:  # an endpoint or credentials problem: say what it was
        return f"cannot be read ({type(e).__name__}: {e})"
    return None


def check_root(storage: Storage, root: str) -> None:
    """Raise `InputError` unless `root` is a folder that can be listed for runs."""
    why = probe_folder(storage, normalize_root(root))
    if why is not None:
        raise InputError(
            f"ROOT {root} {why}: give a folder (or URL) holding run folders, each with a run.json"
        )


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
