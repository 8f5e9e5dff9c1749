"""`OUT/step_digest`: the runs' step series as chart points (rlstream.metrics.downsample),
so that the report reads a bounded table, not every step row of every run.

Only maintenance writes it, by overwrite (`refresh_step_digest`): it reads the `steps`
data files the digest does not cover yet, folds their rows above each run's
`last_step` into the run's digest, and records every file of that `steps` snapshot
as covered (after the pass compacted that snapshot, the files the compaction wrote in
place of those it removed: `Compact`). A reader (`read_step_digest` + `uncovered_rows`) does the same in memory with
the files committed since: the digest plus a handful of small files, whatever the
history. Rows at or below a run's `last_step` are in the digest already: a steps
row is written once, in step order per run, so a file that compaction rewrote
(covered rows under a new name) adds nothing twice.

`--reset-run` drops the run from the digest after it deletes the run's steps rows
(`DeltaSink.delete_run`, `drop_run`); the other runs' digests stay. Every write of the
digest is an overwrite at the version it read (`rewrite`), and every version holds a
`_pass` row, so two writes that read the same version both remove its files and the
second fails and builds again: a pass that read the steps before the delete cannot
write after the drop, and a pass that wrote before it has the run dropped by it. The
files the delete rewrote are not covered, and their other rows are at or below their
runs' `last_step`. A crash between the delete and the drop leaves the run's digest
in place until `--reset-run` runs again (its rows are written again above
`last_step` only once the run passes it): rerun it.

Rows: one per (run_id, series, key) with the run's `width`, `last_step` and `rows`,
the series' `total` (map keys) and its points as two lists (`steps`, `values`); the
last `rollout_metadata` map as rows of series `rollout_metadata` (one point each);
the covered files as rows of series `_covered` with an empty run_id and the file's
name as `key`; and one row of series `_pass`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pyarrow as pa

from rlstream.metrics.downsample import COLUMNS, LAST_MAP, RunPoints, fold_runs
from rlstream.sinks.delta import STEP_DIGEST_TABLE, DeltaSink, table_config

COVERED = "_covered"
_LISTS = ("steps", "values")
PASS = "_pass"
"""A row every version of the digest has, so that two overwrites of one version
always remove a file in common: the second fails (delta-rs's conflict check)."""
STEP_DIGEST_SCHEMA = pa.schema(
    [
        pa.field("run_id", pa.string(), nullable=False),
        pa.field("series", pa.string(), nullable=False),
        pa.field("key", pa.string(), nullable=False),
        pa.field("width", pa.int64()),
        pa.field("last_step", pa.int64()),
        pa.field("rows", pa.int64()),
        pa.field("total", pa.float64()),
        pa.field("steps", pa.list_(pa.int64())),
        pa.field("values", pa.list_(pa.float64())),
    ],
    metadata={"rlstream.schema_version": "1", "rlstream.table": STEP_DIGEST_TABLE},
)


def to_table(by_run: dict[str, RunPoints], covered: list[str]) -> pa.Table:
    """The digest table's rows for these runs and covered steps files. The points go
    into the list columns as whole numpy arrays (no Python object per point)."""
    cols: dict[str, list[Any]] = {f.name: [] for f in STEP_DIGEST_SCHEMA if f.name not in _LISTS}
    points: list[tuple[np.ndarray, np.ndarray] | None] = []

    def add(rid: str, series: str, key: str, d: RunPoints | None, pts: Any, total: Any) -> None:
        for name, v in zip(
            cols,
            (rid, series, key, d and d.width, d and d.last_step, d and d.rows, total),
            strict=True,
        ):
            cols[name].append(v)
        points.append(pts)

    for rid in sorted(by_run):
        d = by_run[rid]
        for (series, key), pts in sorted(d.series.items(), key=lambda kv: kv[0]):
            add(rid, series, key, d, pts, d.totals.get((series, key)))
        for key, v in sorted((d.metadata or {}).items()):
            add(rid, LAST_MAP, key, d, (np.array([d.metadata_step]), np.array([v])), None)
    for name in sorted(covered):
        add("", COVERED, name, None, None, None)
    add("", PASS, "", None, None, None)
    sizes = np.array([0 if p is None else p[0].size for p in points], dtype=np.int32)
    offsets = pa.array(np.concatenate([[0], np.cumsum(sizes)]).astype(np.int32))
    mask = pa.array([p is None for p in points])
    lists = {}
    for i, (name, dtype) in enumerate(zip(_LISTS, (np.int64, np.float64), strict=True)):
        parts = [p[i].astype(dtype, copy=False) for p in points if p is not None]
        values = np.concatenate(parts) if parts else np.zeros(0, dtype)
        lists[name] = pa.ListArray.from_arrays(offsets, values, mask=mask)
    return pa.table({**cols, **lists}, schema=STEP_DIGEST_SCHEMA)


def from_table(t: pa.Table) -> tuple[dict[str, RunPoints], set[str]]:
    """(digest per run, covered steps file names) from the table's rows."""
    if not t.num_rows:
        return {}, set()
    py = {c: t.column(c).to_pylist() for c in ("run_id", "series", "key", "width", "last_step")}
    py.update({c: t.column(c).to_pylist() for c in ("rows", "total")})
    lists = {}
    for c in ("steps", "values"):
        arr = t.column(c).combine_chunks()
        lists[c] = (arr.offsets.to_numpy(), arr.values.to_numpy(zero_copy_only=False))
    by_run: dict[str, RunPoints] = {}
    covered: set[str] = set()
    for i, (rid, series, key) in enumerate(zip(py["run_id"], py["series"], py["key"], strict=True)):
        if series == COVERED:
            covered.add(key)
            continue
        if series == PASS:
            continue
        d = by_run.get(rid)
        if d is None:
            d = by_run[rid] = RunPoints(py["width"][i], py["last_step"][i], py["rows"][i])
        (so, sv), (vo, vv) = lists["steps"], lists["values"]
        st, vals = sv[so[i] : so[i + 1]].astype(np.int64), vv[vo[i] : vo[i + 1]].astype(np.float64)
        if series == LAST_MAP:
            d.metadata = {**(d.metadata or {}), key: float(vals[0])}
            d.metadata_step = int(st[0])
            continue
        d.series[(series, key)] = (st, vals)
        if py["total"][i] is not None:
            d.totals[(series, key)] = py["total"][i]
    return by_run, covered


def read_step_digest(sink: DeltaSink, dt: Any = None) -> tuple[dict[str, RunPoints], set[str]]:
    """The digest of OUT as stored ({} and no covered file before the first pass);
    `dt`: the digest table as already opened."""
    from deltalake import DeltaTable

    if dt is None:
        if not sink.exists(STEP_DIGEST_TABLE):
            return {}, set()
        dt = DeltaTable(sink.uri(STEP_DIGEST_TABLE), storage_options=sink.options)
    return from_table(sink.dataset(dt).to_table())


Compact = Callable[[Any, list[str]], list[str]]
"""Compacts a table at the snapshot read (its `DeltaTable`) and returns the data files
a digest of that snapshot then covers, given the snapshot's (the maintenance pass's
`sinks.maintain.compact_covered`): the files compaction wrote hold only rows of the
snapshot, so no pass reads them again."""


def uncovered_rows(
    sink: DeltaSink,
    covered: set[str],
    table: str = "steps",
    columns: tuple[str, ...] | None = COLUMNS,
    compact: Compact | None = None,
) -> tuple[pa.Table, list[str]]:
    """(`columns` (those the table has; None: all) of the rows of `table` in data files
    not in `covered`, the names of every data file of the snapshot read, or with
    `compact` of the files covered after it compacted that snapshot); the table's key
    column (`cohort` for `cohorts`, else `run_id`) first."""
    import pyarrow.dataset as pds
    from deltalake import DeltaTable

    key = "cohort" if table == "cohorts" else "run_id"
    if not sink.exists(table):
        return pa.table({key: pa.array([], pa.string())}), []
    dt = DeltaTable(sink.uri(table), storage_options=sink.options)
    ds = sink.dataset(dt)
    frags = list(ds.get_fragments())
    names = [_name(f.path) for f in frags]
    new = [f for f, n in zip(frags, names, strict=True) if n not in covered]
    want = ds.schema.names if columns is None else columns
    cols = [key, *(c for c in want if c in ds.schema.names and c != key)]
    part = pds.FileSystemDataset(new, ds.schema, ds.format, ds.filesystem)
    rows = part.to_table(columns=cols, memory_pool=pa.system_memory_pool())
    return rows, names if compact is None else compact(dt, names)


def _name(path: str) -> str:
    return path.rsplit("/", 1)[-1]


def current_step_digest(
    sink: DeltaSink, dt: Any = None, compact: Compact | None = None
) -> tuple[dict[str, RunPoints], list[str]]:
    """The stored digest (`dt`: as already opened) with the steps rows committed since
    folded in, and the steps files it now covers (`compact`: `uncovered_rows`)."""
    by_run, covered = read_step_digest(sink, dt)
    rows, files = uncovered_rows(sink, covered, compact=compact)
    return fold_runs(by_run, rows), files


def rewrite(
    sink: DeltaSink, name: str, build: Callable[[Any], pa.Table | None], tries: int = 3
) -> int | None:
    """Overwrite digest table `name` with `build(dt)`, `dt` the table as read (None
    before it exists); returns the rows written, or None when `build` returned None
    (nothing changed: nothing is written). The overwrite commits against the
    version read, so if another writer changed the table meanwhile (`--reset-run`
    emptying it, a concurrent pass) it fails, and the digest is built again from the
    new version: a digest is never written over a reset."""
    from deltalake import DeltaTable, write_deltalake
    from deltalake.exceptions import CommitFailedError, DeltaError

    for attempt in range(tries):
        dt = DeltaTable(sink.uri(name), storage_options=sink.options) if sink.exists(name) else None
        table = build(dt)
        if table is None:
            return None
        try:
            write_deltalake(
                dt if dt is not None else sink.uri(name),
                table,
                mode="overwrite" if dt is not None else "error",
                schema_mode="overwrite" if dt is not None else None,
                storage_options=sink.options,
                configuration=table_config(sink.retention_seconds),
            )
            return table.num_rows
        except (CommitFailedError, DeltaError):
            if attempt == tries - 1:
                raise
    raise AssertionError("unreachable")


def refresh_step_digest(sink: DeltaSink, compact: Compact | None = None) -> int | None:
    """Fold the steps rows committed since the last pass into OUT's digest and write
    it (`rewrite`; `compact`: `uncovered_rows`); returns its rows, None if no steps
    file was committed or compacted since (an idle fleet's pass writes nothing)."""

    def build(dt: Any) -> pa.Table | None:
        by_run, covered = read_step_digest(sink, dt)
        rows, files = uncovered_rows(sink, covered, compact=compact)
        if dt is not None and set(files) == covered:
            return None
        return to_table(fold_runs(by_run, rows), files)

    return rewrite(sink, STEP_DIGEST_TABLE, build)


def files_holding(sink: DeltaSink, table: str, column: str, values: list[str]) -> set[str]:
    """Names of `table`'s data files that may hold rows whose `column` is one of
    `values`, from the files' statistics (a file without them may hold any)."""
    dt = sink.handle(table)
    if dt is None:
        return set()
    acts = pa.table(dt.get_add_actions(flatten=True))
    names = [_name(p) for p in acts.column("path").to_pylist()]
    if f"min.{column}" not in acts.column_names:
        return set(names)
    lows = acts.column(f"min.{column}").to_pylist()
    highs = acts.column(f"max.{column}").to_pylist()
    return {
        n
        for n, lo, hi in zip(names, lows, highs, strict=True)
        if lo is None or hi is None or any(lo <= v <= hi for v in values)
    }


def rewind_runs(sink: DeltaSink, run_ids: list[str]) -> None:
    """Drop runs from the digest and uncover the `steps` files that may hold their
    rows, after rows of theirs were deleted (`pipeline.rewind`): the next pass, and a
    reader, fold those runs again from the rows the table holds now. The other runs'
    rows in those files are at or below their `last_step`: nothing is folded twice.
    With no digest yet, an empty one is created, as in `drop_run`. It is written even
    when it changes nothing: a pass that read the rows before the delete then fails
    its overwrite (the `_pass` row) and builds again from the rows left."""

    def build(dt: Any) -> pa.Table:
        if dt is None:
            return to_table({}, [])
        by_run, covered = read_step_digest(sink, dt)
        holding = covered & files_holding(sink, "steps", "run_id", run_ids)
        for r in run_ids:
            by_run.pop(r, None)
        return to_table(by_run, sorted(covered - holding))

    rewrite(sink, STEP_DIGEST_TABLE, build)


def drop_run(sink: DeltaSink, run_id: str) -> None:
    """Remove one run from the digest (`--reset-run`, after its steps rows are
    deleted), creating the digest empty if it does not exist yet, so that a first pass
    that read the steps before the delete cannot create it (module docstring)."""

    def build(dt: Any) -> pa.Table:
        if dt is None:
            return to_table({}, [])
        by_run, covered = read_step_digest(sink, dt)
        by_run.pop(run_id, None)
        return to_table(by_run, sorted(covered))

    rewrite(sink, STEP_DIGEST_TABLE, build)
