"""Is this an rlstream OUT? And which runs did it reject?

`check_out(storage, out)` is the one place that decides whether a path given to
`status`, `report` (and any command that reads OUT) is the output folder of
`rlstream analyze` or `watch`: it raises `InputError` with a one-line message naming
the path and what to do when OUT does not exist, cannot be read, or holds none of the
tables. It is called before anything else runs.

`read_rejected(out)` lists the runs that could not be read at all (their run.json is
missing a run_id, is not JSON, ...): the quarantine rows under the `_rejected` run id,
one per run folder, as {run_uri, reason, detail}. They have no run_health row, so the
fleet views show them from here.
"""

from __future__ import annotations

import logging
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from rlstream.errors import InputError
from rlstream.io.storage import Storage
from rlstream.pipeline.discover import normalize_root, probe_folder
from rlstream.pipeline.runner import REJECTED

log = logging.getLogger("rlstream")

TABLES = ("steps", "run_health", "quarantine", "alerts", "_checkpoints")
"""Folders of which at least one is under every OUT that analyze or watch wrote to."""


def rejected_folder(out: str) -> str:
    """Where the quarantine rows of rejected runs are."""
    return Storage.join(normalize_root(out), "quarantine", f"run_id={REJECTED}")


def check_out(storage: Storage, out: str) -> None:
    """Raise `InputError` unless `out` is an rlstream output folder."""
    url = normalize_root(out)
    why = probe_folder(storage, url)
    if why is not None:
        raise InputError(
            f"OUT {out} {why}: give the --out folder of `rlstream analyze` or "
            "`rlstream watch` (a watch creates it at its first commit)"
        )
    try:
        names = set(storage.list_dirs(url))
    except Exception as e:  # listing a bucket can fail after it was found
        raise InputError(f"OUT {out} cannot be read ({type(e).__name__}: {e})") from e
    if not names & set(TABLES):
        raise InputError(
            f"{out} is not an rlstream output (none of {', '.join(t + '/' for t in TABLES)} "
            "under it): give the --out folder of `rlstream analyze` or `rlstream watch`"
        )


def read_rejected(out: str, storage_options: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """Runs that could not be read, sorted by URI: [{run_uri, reason, detail}]."""
    folder = rejected_folder(out)
    storage = Storage.for_url(normalize_root(out), storage_options)
    rows: list[dict[str, Any]] = []
    for name in storage.list_names(folder):
        if not name.endswith(".parquet"):
            continue
        try:
            data = storage.read(Storage.join(folder, name))
        except (FileNotFoundError, OSError) as e:  # replaced or removed while listed
            log.debug("skipping %s: %s", name, e)
            continue
        t = pq.read_table(
            pa.BufferReader(data),
            columns=["file", "reason", "detail"],
            use_threads=False,
            pre_buffer=False,
        )
        rows.extend(
            {"run_uri": r["file"], "reason": r["reason"], "detail": r["detail"]}
            for r in t.to_pylist()
        )
    return sorted(rows, key=lambda r: r["run_uri"])
