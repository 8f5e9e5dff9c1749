"""Maintenance of OUT's Delta tables: compaction, the latest-row table, log checkpoints,
log cleanup and vacuum. Run on a schedule inside `watch`, once at the end of
`analyze`, and by hand with `rlstream compact OUT`.

One pass, per table: `optimize.compact()` bin-packs the files below `target_file_mb`
(the commits' small files since the last pass, and the compacted file still growing)
into files of up to that size; a file already that large is left alone, so a pass
rewrites at most `target_file_mb` plus what arrived since the last one;
then, for `run_health`, `run_latest` is rebuilt (below). For `steps` and `cohorts`
the step and band digests (rlstream.sinks.step_digest, rlstream.sinks.band_digest) first
fold the rows of the files committed since the last pass, then the snapshot they read
is compacted and the digest is written covering the files the compaction wrote (read
from its commit's log entry; their rows are in it already): a pass reads each row
once, and its cost follows what arrived since the last pass, not the history.
Then a full `vacuum` of the
files the table no longer references, once older than `sink.retention_seconds` (a
table property set when the table is created; a pass that finds another value sets
it, which may make one concurrent append fail and be retried), a log checkpoint and
log cleanup. The retention must exceed the longest append (data files written, commit
not yet in the log): the default is minutes.
Files under OUT are then bounded by time (commits of the last retention window plus
one period), not by the length of the watch. A reader that started before a vacuum
keeps its files for that long, so a concurrent `status` never fails.

`run_latest` holds one row per run: the newest `run_health` row of each run as of
the pass, written by maintenance alone (an overwrite; tailers only ever append to
`run_health`, and blind appends never conflict with compaction). As for the digests,
the overwrite records the `run_health` data files it covers (the commit's custom
metadata `rlstream.covered`, a JSON list of names), after the pass compacted them.
A reader takes `run_latest` plus the rows of the `run_health` files it does not cover
and keeps the newest row per run: a handful of files whatever the history, and
every row a commit appended, however long before the newest it was stamped
(fleet/read.py).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote

import numpy as np
import orjson
import pyarrow as pa

from rlstream.io.storage import Storage
from rlstream.sinks.band_digest import BAND_DIGEST_TABLE, refresh_bands
from rlstream.sinks.delta import (
    STEP_DIGEST_TABLE,
    TABLES,
    DeltaSink,
    table_config,
    writer_properties,
)
from rlstream.sinks.step_digest import Compact, refresh_step_digest, uncovered_rows

log = logging.getLogger("rlstream")

COVERED_KEY = "rlstream.covered"
"""Custom metadata of a `run_latest` overwrite: the `run_health` files it covers."""


@dataclass(frozen=True)
class MaintenanceConfig:
    """When and how OUT's tables are maintained (docs/runtime.md, "Maintenance")."""

    every_seconds: float = 120.0
    """Seconds between passes in `watch`: the small files of ~60 commits (one every
    2 s) are then compacted; readers see at most that many small files per table."""
    target_file_mb: int = 32
    """Compacted files grow up to this size, then are left alone."""


def newest_per_run(table: pa.Table) -> pa.Table:
    """The row with the greatest (as_of, commit_seq) of each run_id."""
    if table.num_rows == 0:
        return table
    t = table.sort_by(
        [("run_id", "ascending"), ("as_of", "ascending"), ("commit_seq", "ascending")]
    )
    ids = t.column("run_id").to_numpy(zero_copy_only=False)
    last = np.flatnonzero(np.append(ids[1:] != ids[:-1], True))
    return t.take(pa.array(last))


def maintain(sink: DeltaSink, cfg: MaintenanceConfig | None = None) -> dict[str, Any]:
    """One maintenance pass over every table of OUT; returns what it did per table.
    A table that fails is logged and skipped (the next pass tries again)."""
    from deltalake import DeltaTable

    cfg = cfg or MaintenanceConfig()
    report: dict[str, Any] = {}
    want = table_config(sink.retention_seconds)
    for name in TABLES:
        if name == "run_latest" or not sink.exists(name):
            continue
        t0 = time.monotonic()
        try:
            dt = DeltaTable(sink.uri(name), storage_options=sink.options)
            conf = dt.metadata().configuration
            if any(conf.get(k) != v for k, v in want.items()):
                dt.alter.set_table_properties(want)
            removed = (
                _compact_and_refresh(sink, cfg, name, report)
                if name in DIGEST_TABLES
                else _compact(dt, cfg, name)[0]
            )
            dt = DeltaTable(sink.uri(name), storage_options=sink.options)
            _tidy(dt)
            report[name] = {"compacted": removed, "seconds": round(time.monotonic() - t0, 3)}
        except Exception as e:  # maintenance is retried next pass; never stops the watch
            log.warning("maintenance of %s failed: %s", name, e)
            report[name] = {"error": str(e)}
    return report


def refresh_latest(sink: DeltaSink, compact: Compact | None = None, tries: int = 3) -> int | None:
    """Overwrite `run_latest` with the newest row per run of it and of the `run_health`
    files it does not cover, covering every file of the snapshot read (`compact`: as
    for the digests); returns its rows, None if no file was committed or compacted
    since. The overwrite commits against the version read: if a delete (`--reset-run`,
    a rewind) or another pass changed it meanwhile, it is built again."""
    from deltalake import CommitProperties, write_deltalake
    from deltalake.exceptions import CommitFailedError, DeltaError

    for attempt in range(tries):
        latest = sink.handle("run_latest")
        rows, files, covered = _latest(sink, latest, compact)
        if latest is not None and covered is not None and set(files) == covered:
            return None
        rows = newest_per_run(rows)
        try:
            write_deltalake(
                latest if latest is not None else sink.uri("run_latest"),
                rows,
                mode="overwrite",
                schema_mode="overwrite",
                storage_options=sink.options,
                configuration=table_config(sink.retention_seconds),
                commit_properties=CommitProperties(
                    custom_metadata={COVERED_KEY: orjson.dumps(sorted(files)).decode()}
                ),
            )
            return rows.num_rows
        except (CommitFailedError, DeltaError):
            sink._handles.pop("run_latest", None)
            if attempt == tries - 1:
                raise
    raise AssertionError("unreachable")


DIGEST_TABLES = {
    "steps": (STEP_DIGEST_TABLE, refresh_step_digest),
    "cohorts": (BAND_DIGEST_TABLE, refresh_bands),
    "run_health": ("run_latest", refresh_latest),
}
"""Tables with a digest: compacted inside the digest's refresh (`_compact_and_refresh`)."""


def _compact(dt: Any, cfg: MaintenanceConfig, name: str = "") -> tuple[int, int | None]:
    """Compact `dt` (table `name`) at the snapshot it holds; (files removed, version of
    the compaction's commit or None when there was nothing to compact). Its files are
    written as appends write them (`delta.writer_properties`)."""
    m = dt.optimize.compact(
        target_size=cfg.target_file_mb << 20, writer_properties=writer_properties(name)
    )
    removed = int(m.get("numFilesRemoved", 0))
    return removed, dt.version() if removed else None


def compact_covered(
    sink: DeltaSink, table: str, files: list[str], version: int | None
) -> list[str]:
    """The data files a digest of `files` (a snapshot) covers once the compaction of
    that snapshot committed `version`: its removed files leave, the files it wrote
    join (they hold only rows of the snapshot), from the commit's own log entry. A
    commit that removed a file outside the snapshot leaves `files` as they are."""
    if version is None:
        return files
    entry = sink.storage.read(Storage.join(sink.out, table, "_delta_log", f"{version:020d}.json"))
    added, removed = set(), set()
    for line in entry.splitlines():
        action = orjson.loads(line) if line.strip() else {}
        for kind, into in (("add", added), ("remove", removed)):
            if kind in action:
                into.add(unquote(action[kind]["path"]).rsplit("/", 1)[-1])
    have = set(files)
    return sorted((have - removed) | added) if removed <= have else files


def _compact_and_refresh(
    sink: DeltaSink, cfg: MaintenanceConfig, name: str, report: dict[str, Any]
) -> int:
    """Fold table `name`'s new rows into its digest, compact the snapshot it read, and
    write the digest covering the files compaction wrote, so no later pass or reader
    reads those rows again; returns the files compaction removed. If the digest
    fails, the table is compacted alone (the digest catches up next pass)."""
    from deltalake import DeltaTable

    digest, refresh = DIGEST_TABLES[name]
    removed = 0

    def compact(dt: Any, files: list[str]) -> list[str]:
        nonlocal removed
        n, version = _compact(dt, cfg)
        removed += n
        return compact_covered(sink, name, files, version)

    try:
        rows = refresh(sink, compact)
        if digest == "run_latest":
            report[digest] = rows if rows is not None else {"unchanged": True}
        else:
            report[digest] = {"rows": rows} if rows is not None else {"unchanged": True}
        if rows is not None:
            dt = DeltaTable(sink.uri(digest), storage_options=sink.options)
            _tidy(dt, _covered_props(dt) if digest == "run_latest" else None)
    except Exception as e:  # retried next pass, as for the tables
        log.warning("maintenance of %s failed: %s", digest, e)
        report[digest] = {"error": str(e)}
        if not removed:
            removed = _compact(DeltaTable(sink.uri(name), storage_options=sink.options), cfg)[0]
    return removed


def _tidy(dt: Any, commit_properties: Any = None) -> None:
    # A full vacuum: every file under the table that the current version does not
    # reference, once older than the retention. The log's remove actions alone (a
    # plain vacuum) miss a removal that a commit's checkpoint dropped as expired before
    # this pass, and the files of an append whose commit never landed. Its commits
    # carry `commit_properties` (run_latest's covered files: log cleanup may remove
    # the overwrite's entry, never the newest).
    dt.vacuum(
        retention_hours=None,
        enforce_retention_duration=False,
        dry_run=False,
        full=True,
        commit_properties=commit_properties,
    )
    dt.create_checkpoint()
    dt.cleanup_metadata()


def _covered_props(latest: Any) -> Any:
    from deltalake import CommitProperties

    covered = covered_by(latest)
    if covered is None:
        return None
    return CommitProperties(custom_metadata={COVERED_KEY: orjson.dumps(sorted(covered)).decode()})


def covered_by(latest: Any) -> set[str] | None:
    """The `run_health` files a `run_latest` version covers, recorded by its last
    overwrite (and by the vacuum after it), which the deletes since (`--reset-run`, a
    rewind) leave valid. None: unknown (written by an earlier rlstream): the reader
    then reads every `run_health` file."""
    for limit in (3, 50):  # the overwrite, then its vacuum's two commits, usually
        for commit in latest.history(limit):
            if COVERED_KEY in commit:
                return set(orjson.loads(commit[COVERED_KEY]))
            if commit.get("operation") not in ("DELETE", "VACUUM START", "VACUUM END"):
                return None
    return None


def _latest(
    sink: DeltaSink, latest: Any, compact: Compact | None = None
) -> tuple[pa.Table, list[str], set[str] | None]:
    """(`run_latest`'s rows plus those of the `run_health` files it does not cover, the
    files of the snapshot read (or after `compact`), the files covered until now)."""
    parts, covered = [], None
    if latest is not None:
        covered = covered_by(latest)
        parts.append(sink.dataset(latest).to_table())
    rows, files = uncovered_rows(sink, covered or set(), "run_health", None, compact)
    # A newer rlstream may have added columns since run_latest was written: missing
    # ones read as null.
    parts.append(rows)
    return pa.concat_tables(parts, promote_options="permissive"), files, covered


def read_latest_rows(sink: DeltaSink) -> pa.Table:
    """`run_latest` plus the `run_health` rows it does not cover yet (not yet reduced
    to one per run). Reads a handful of files: run_latest's, and the run_health files
    committed since the last pass."""
    if not sink.exists("run_health"):
        return pa.table({})
    return _latest(sink, sink.handle("run_latest"))[0]
