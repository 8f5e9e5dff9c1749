"""`OUT/band_digest`: the cohort bands the report draws, one step per bin of steps.

The report draws a cohort's p10-p90 band of a figure under each run's chart: at most
one point per pixel column is visible. The digest keeps, per (cohort, figure) and
per bin of `width` steps (a power of two, at most `metrics.downsample.MAX_BINS` bins),
the band row of the bin's first step that has one, in its newest version (largest
n, then newest `as_of`, then `commit_seq`: `sinks.cohorts.newest_bands`). With width
1 that is every step's newest band, as the `cohorts` table read whole gives.

`fold_bands(digest, rows)` is exact for any order of arrival: the newest version of
each step wins whatever came first, a band for an earlier step of a bin becomes its
step, a later step of a bin is dropped, doubling the width keeps the first of two
bins' steps, and the width follows the highest banded step seen (`last_step`, kept
even when its band is not). A row seen twice (a file compaction rewrote) changes
nothing.

As for the step digest (rlstream.sinks.step_digest), only maintenance writes it, by
overwrite, with the `cohorts` files it covers (rows of figure `_covered`, the file's
name in `file`); a reader folds the rows of files committed since.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from rlstream.metrics.downsample import bin_width
from rlstream.sinks.cohorts import COHORTS_SCHEMA, newest_bands
from rlstream.sinks.delta import DeltaSink
from rlstream.sinks.step_digest import COVERED, Compact, files_holding, rewrite, uncovered_rows

BAND_DIGEST_TABLE = "band_digest"
BAND_COLUMNS = ("cohort", "figure", "step", "n", "p10", "p50", "p90", "median", "mad", "as_of")
_ORDER = (*BAND_COLUMNS, "commit_seq")
_ROWS = pa.schema(
    [
        COHORTS_SCHEMA.field(c).with_type(pa.timestamp("us", tz="UTC")).with_nullable(True)
        if c == "as_of"
        else COHORTS_SCHEMA.field(c).with_nullable(True)
        for c in _ORDER
    ]
)
"""Band rows as read back from Delta (which stores timestamps in microseconds)."""
BAND_SCHEMA = pa.schema(
    [
        *_ROWS,
        pa.field("width", pa.int64()),
        pa.field("last_step", pa.int64()),
        pa.field("file", pa.string()),
    ],
    metadata={"rlstream.schema_version": "1", "rlstream.table": BAND_DIGEST_TABLE},
)


def fold_bands(digest: pa.Table | None, rows: pa.Table) -> pa.Table:
    """The digest rows (`_ORDER` columns, `width` and `last_step`) of `digest`'s bands
    with band `rows` (`_ORDER` columns, any order) added, sorted by (cohort, figure,
    step). `last_step` is the highest banded step of the (cohort, figure), kept or not:
    the width is that of the steps the rows hold, whatever the order they came in."""
    parts = [rows.select(list(_ORDER)).cast(_ROWS)]
    lasts = [rows.select(["cohort", "figure", "step"])]
    if digest is not None and digest.num_rows:
        parts.append(digest.select(list(_ORDER)).cast(_ROWS))
        last = "last_step" if "last_step" in digest.column_names else "step"
        lasts.append(
            pa.table(
                {c: digest.column(c) for c in ("cohort", "figure")}
                | {"step": digest.column(last).cast(pa.int64())}
            )
        )
    t = newest_bands(pa.concat_tables(parts))
    if not t.num_rows:
        return t.append_column("width", pa.array([], pa.int64())).append_column(
            "last_step", pa.array([], pa.int64())
        )
    high = (
        pa.concat_tables([x.cast(lasts[0].schema) for x in lasts])
        .group_by(["cohort", "figure"])
        .aggregate([("step", "max")])
    )
    top = dict(
        zip(
            zip(high.column("cohort").to_pylist(), high.column("figure").to_pylist(), strict=True),
            high.column("step_max").to_pylist(),
            strict=True,
        )
    )
    keys = [t.column(c).to_numpy(zero_copy_only=False) for c in ("cohort", "figure")]
    steps = t.column("step").to_numpy()
    group = np.ones(t.num_rows, dtype=bool)
    group[1:] = (keys[0][1:] != keys[0][:-1]) | (keys[1][1:] != keys[1][:-1])
    starts = np.flatnonzero(group)
    ends = [top[(keys[0][a], keys[1][a])] for a in starts.tolist()]
    widths = [bin_width(int(steps[a]), int(b)) for a, b in zip(starts, ends, strict=True)]
    sizes = np.diff(np.append(starts, t.num_rows))
    width = np.repeat(np.asarray(widths, dtype=np.int64), sizes)
    bins = steps // width
    first = group.copy()
    first[1:] |= bins[1:] != bins[:-1]
    keep = pa.array(np.flatnonzero(first))
    t = t.take(keep).append_column("width", pa.array(width).take(keep))
    return t.append_column("last_step", pa.array(np.repeat(ends, sizes)).take(keep))


def read_band_digest(
    sink: DeltaSink, cohorts: list[str] | None, dt: Any = None
) -> tuple[pa.Table, set[str]]:
    """(the stored digest rows of these cohorts (all if None), covered file names);
    `dt`: the digest table as already opened."""
    from deltalake import DeltaTable

    if dt is None:
        if not sink.exists(BAND_DIGEST_TABLE):
            return fold_bands(None, _ROWS.empty_table()), set()
        dt = DeltaTable(sink.uri(BAND_DIGEST_TABLE), storage_options=sink.options)
    t = sink.dataset(dt).to_table()
    is_file = pc.equal(t.column("figure"), COVERED)
    covered = set(t.filter(is_file).column("file").to_pylist())
    t = t.filter(pc.invert(is_file))
    if cohorts is not None:
        t = t.filter(pc.field("cohort").isin(sorted(set(cohorts))))
    return t.drop_columns(["file"]), covered


def current_bands(
    sink: DeltaSink,
    cohorts: list[str] | None = None,
    dt: Any = None,
    compact: Compact | None = None,
) -> tuple[pa.Table, list[str]]:
    """The stored digest (`dt`: as already opened) with the band rows committed since
    folded in (these cohorts, all if None), and the `cohorts` files it then covers
    (`compact`: `sinks.step_digest.uncovered_rows`)."""
    digest, covered = read_band_digest(sink, cohorts, dt)
    rows, files = uncovered_rows(sink, covered, "cohorts", _ORDER, compact)
    if cohorts is not None and rows.num_rows:
        rows = rows.filter(pc.field("cohort").isin(sorted(set(cohorts))))
    return _folded(digest, rows), files


def _folded(digest: pa.Table, rows: pa.Table) -> pa.Table:
    if not rows.num_rows:  # stored sorted, but a dataset may list its files in any order
        return digest.sort_by([(c, "ascending") for c in ("cohort", "figure", "step")])
    return fold_bands(digest, rows)


def refresh_bands(sink: DeltaSink, compact: Compact | None = None) -> int | None:
    """Fold the band rows committed since the last pass into OUT's band digest and
    write it (`sinks.step_digest.rewrite`; `compact`: `uncovered_rows`); returns its rows,
    covered files included, None if no `cohorts` file was committed or compacted since."""

    def build(dt: Any) -> pa.Table | None:
        digest, covered = read_band_digest(sink, None, dt)
        rows, files = uncovered_rows(sink, covered, "cohorts", _ORDER, compact)
        if dt is not None and set(files) == covered:
            return None
        return to_table(_folded(digest, rows), files)

    return rewrite(sink, BAND_DIGEST_TABLE, build)


def rewind_cohorts(sink: DeltaSink, cohorts: list[str]) -> None:
    """Drop cohorts from the band digest and uncover the `cohorts` files that may hold
    their rows, after band rows of theirs were deleted (`pipeline.rewind`): the next
    pass, and a reader, fold them again from the rows the table holds now (a row seen
    twice changes nothing). With no digest yet, an empty one is created, so that a
    pass that read the rows before the delete cannot create it; it is written even
    when it changes nothing, so that such a pass's overwrite fails and builds again."""

    def build(dt: Any) -> pa.Table:
        if dt is None:
            return to_table(fold_bands(None, _ROWS.empty_table()), [])
        digest, covered = read_band_digest(sink, None, dt)
        holding = covered & files_holding(sink, "cohorts", "cohort", cohorts)
        drop = pc.field("cohort").isin(sorted(set(cohorts)))
        return to_table(
            _folded(digest.filter(~drop), _ROWS.empty_table()), sorted(covered - holding)
        )

    rewrite(sink, BAND_DIGEST_TABLE, build)


def to_table(bands: pa.Table, files: list[str]) -> pa.Table:
    """The band digest's rows: `bands` (`fold_bands`), then one per covered file."""
    t = bands.append_column("file", pa.nulls(bands.num_rows, pa.string()))
    n = len(files)
    covered: dict[str, Any] = {c: pa.nulls(n, BAND_SCHEMA.field(c).type) for c in BAND_SCHEMA.names}
    covered.update(
        cohort=pa.array([""] * n),
        figure=pa.array([COVERED] * n),
        step=pa.array([0] * n, pa.int64()),
        n=pa.array([0] * n, pa.int64()),
        as_of=pa.array([0] * n, pa.timestamp("us", tz="UTC")),
        commit_seq=pa.array([0] * n, pa.int64()),
        file=pa.array(files, pa.string()),
    )
    return pa.concat_tables([t.cast(BAND_SCHEMA), pa.table(covered, schema=BAND_SCHEMA)])
