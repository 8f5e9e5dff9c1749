"""Reading OUT for the fleet view: latest health rows, step rows, example completions.

`read_latest(out)` returns one dict per run: the newest row per run of `run_latest`
and of the `run_health` rows that may be newer (rlstream.sinks.maintain); an empty
list when OUT has no health yet. `read_steps(out, run_id, columns)` returns a run's
step rows in step order as column lists. Both read the Delta tables through delta-rs:
one log replay per table (a checkpoint and at most 10 JSON commits) and the data
files the file statistics cannot rule out (after compaction, a handful), so a refresh
costs the same after 10 steps or 10,000, on local disk or S3.

`read_run_points(out)` returns each run's step series as chart points
(rlstream.metrics.downsample): OUT's `step_digest` table plus the steps rows committed
since it was last written (rlstream.sinks.step_digest), what the report draws.

`read_bands(out, cohorts)` returns the bands the report draws: the newest band of the
first step of each bin of steps, per (cohort, figure) (OUT's `band_digest` and the
`cohorts` rows committed since, rlstream.sinks.band_digest; every step's newest band
while a cohort spans at most `metrics.downsample.MAX_BINS` steps), as {cohort: {figure:
{column: values}}} in step order.

`read_heldout(out, run_id)` returns a run's held-out evaluation scores by eval name
(the `reported_eval` map of its steps rows), for the reward chart.

`example_completions(out, run_id, since_step)` returns a few completion texts of a
run's newest kept samples (OUT/samples), for the report's degenerate_outputs and
entropy_collapse sections.

The fleet view reads tables only: never a resume state, never a run's own files.
"""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from rlstream.config import PipelineConfig
from rlstream.metrics.downsample import RunPoints
from rlstream.pipeline.commit import open_sink
from rlstream.sinks.band_digest import current_bands
from rlstream.sinks.delta import DeltaSink
from rlstream.sinks.maintain import newest_per_run, read_latest_rows
from rlstream.sinks.step_digest import current_step_digest


def out_sink(
    out: str, storage_options: dict[str, Any] | None = None, retention_seconds: int = 300
) -> DeltaSink:
    """A handle on OUT (for reads and maintenance), opened as a pipeline opens it
    (`pipeline.commit.open_sink`); an OUT of the earlier Parquet layout is refused."""
    cfg = PipelineConfig(
        storage_options=dict(storage_options or {}), retention_seconds=retention_seconds
    )
    return open_sink(out, cfg)


def read_latest(out: str, storage_options: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """One dict per run (the run_health columns, `as_of`/`last_activity` as datetimes)."""
    sink = out_sink(out, storage_options)
    rows = read_latest_rows(sink)
    if not rows.num_rows:
        return []
    return newest_per_run(rows).to_pylist()


class StepsTable:
    """OUT's `steps` table opened once (one log replay). The first `run()` reads the
    columns it asks for, for every run, in one scan; later calls slice that (a report
    asks for every run with the same columns)."""

    def __init__(self, out: str, storage_options: dict[str, Any] | None = None) -> None:
        from deltalake import DeltaTable

        sink = out_sink(out, storage_options)
        self.dataset = None
        self._cols: list[str] = []
        self._all: pa.Table | None = None
        self._ranges: dict[str, tuple[int, int]] = {}
        if sink.exists("steps"):
            dt = DeltaTable(sink.uri("steps"), storage_options=sink.options)
            self.dataset = sink.dataset(dt)

    def _scan(self, have: list[str]) -> pa.Table:
        if self._all is None or not set(have) <= set(self._cols):
            assert self.dataset is not None
            self._cols = sorted({*have, "run_id"})
            # The system allocator: with pyarrow's default (mimalloc) some scans of
            # the map columns paid for returning and faulting in pages again, a
            # cost that came and went from one report to the next.
            pool = pa.system_memory_pool()
            t = self.dataset.to_table(columns=self._cols, memory_pool=pool)
            ranges = _run_ranges(t)
            if ranges is None:  # a run's rows apart or out of step order: sort them
                order = pc.sort_indices(t, [("run_id", "ascending"), ("step", "ascending")])
                t = pc.take(t, order, memory_pool=pool)
                ranges = _run_ranges(t)
            assert ranges is not None
            self._all, self._ranges = t, ranges
        return self._all

    def arrays(self, run_id: str, columns: list[str]) -> dict[str, pa.Array]:
        """The run's step rows as {column: Arrow array}, in step order, with no Python
        object per row; missing columns are all null (a column another version adds)."""
        cols = ["step", *columns]
        if self.dataset is None:
            return {c: pa.array([], pa.int64() if c == "step" else pa.null()) for c in cols}
        names = set(self.dataset.schema.names)
        have = [c for c in cols if c in names]
        t = self._scan(have)
        lo, hi = self._ranges.get(run_id, (0, 0))
        t = t.slice(lo, hi - lo)
        return {
            c: t.column(c).combine_chunks() if c in have else pa.nulls(hi - lo, pa.float64())
            for c in cols
        }

    def run(self, run_id: str, columns: list[str]) -> dict[str, list[Any]]:
        """The run's step rows as {column: values} (Python lists; see `arrays`)."""
        return {c: a.to_pylist() for c, a in self.arrays(run_id, columns).items()}


def _run_ranges(t: pa.Table) -> dict[str, tuple[int, int]] | None:
    """{run_id: (first row, end)} when each run's rows are one block in step order (as
    a batch or a compacted table usually has them: no copy needed), else None."""
    n = t.num_rows
    if not n:
        return {}
    enc = pc.dictionary_encode(t.column("run_id").combine_chunks())
    codes = enc.indices.to_numpy(zero_copy_only=False)
    steps = t.column("step").combine_chunks().to_numpy(zero_copy_only=False)
    cut = np.flatnonzero(codes[1:] != codes[:-1]) + 1
    starts, ends = np.concatenate([[0], cut]), np.concatenate([cut, [n]])
    rising = np.diff(steps) > 0
    rising[cut - 1] = True  # a new run may start at any step
    block = codes[starts]
    if not rising.all() or np.unique(block).size != block.size:
        return None
    names = enc.dictionary.to_pylist()
    return {
        names[c]: (a, b)
        for c, a, b in zip(block.tolist(), starts.tolist(), ends.tolist(), strict=True)
    }


def read_steps(
    out: str,
    run_id: str,
    columns: list[str],
    storage_options: dict[str, Any] | None = None,
) -> dict[str, list[Any]]:
    """The run's step rows as {column: values}, in step order (see `StepsTable`)."""
    return StepsTable(out, storage_options).run(run_id, columns)


def read_run_points(
    out: str, storage_options: dict[str, Any] | None = None
) -> dict[str, RunPoints]:
    """{run_id: RunPoints} of every run with step rows (see the module docstring)."""
    return current_step_digest(out_sink(out, storage_options))[0]


def read_table(
    out: str,
    table: str,
    storage_options: dict[str, Any] | None = None,
    columns: list[str] | None = None,
    where: tuple[str, Any] | None = None,
) -> pa.Table:
    """A table of OUT as Arrow (empty, with its schema, before its first commit):
    `columns` only, if given, and only the rows where column `where[0]` equals
    `where[1]` (a filter the file statistics and partitions can prune with)."""
    from deltalake import DeltaTable

    from rlstream.pipeline.rows import STEPS_SCHEMA
    from rlstream.sinks.cohorts import COHORTS_SCHEMA
    from rlstream.sinks.delta import QUARANTINE_SCHEMA
    from rlstream.sinks.health import ALERTS_SCHEMA, RUN_HEALTH_SCHEMA

    sink = out_sink(out, storage_options)
    if not sink.exists(table):
        schemas = {
            "steps": STEPS_SCHEMA,
            "quarantine": QUARANTINE_SCHEMA,
            "alerts": ALERTS_SCHEMA,
            "run_health": RUN_HEALTH_SCHEMA,
            "run_latest": RUN_HEALTH_SCHEMA,
            "cohorts": COHORTS_SCHEMA,
        }
        empty = schemas[table].empty_table() if table in schemas else pa.table({})
        return empty.select(columns) if columns and empty.num_columns else empty
    ds = sink.dataset(DeltaTable(sink.uri(table), storage_options=sink.options))
    flt = None if where is None else pc.field(where[0]) == where[1]
    return ds.to_table(columns=columns, filter=flt)


def read_bands(
    out: str, cohorts: list[str] | None = None, storage_options: dict[str, Any] | None = None
) -> dict[str, dict[str, dict[str, list[Any]]]]:
    """Bands of these cohorts (all if None): {cohort: {figure: {step, n, p10, p50, p90,
    median, mad}}}, each list in step order; {} before the first band is written."""
    t = current_bands(out_sink(out, storage_options), cohorts)[0]
    cols = ["cohort", "figure", "step", "n", "p10", "p50", "p90", "median", "mad", "as_of"]
    out_: dict[str, dict[str, dict[str, list[Any]]]] = {}
    if t.num_rows == 0:
        return out_
    # Rows come sorted by (cohort, figure, step): each (cohort, figure) is one slice,
    # and a column converts to Python objects once, not a dict per row.
    keys = [t.column(c).to_numpy(zero_copy_only=False) for c in ("cohort", "figure")]
    change = np.zeros(t.num_rows, dtype=bool)
    change[0] = True
    for k in keys:
        change[1:] |= k[1:] != k[:-1]
    starts = [*np.flatnonzero(change).tolist(), t.num_rows]
    values = {k: t.column(k).to_pylist() for k in cols[2:-1]}
    for a, b in itertools.pairwise(starts):
        per = out_.setdefault(keys[0][a], {})
        per[keys[1][a]] = {k: v[a:b] for k, v in values.items()}
    return out_


def example_completions(
    out: str,
    run_id: str,
    since_step: int | None,
    storage_options: dict[str, Any] | None = None,
    limit: int = 4,
    scan: int = 48,
    max_chars: int = 400,
) -> list[dict[str, Any]]:
    """Up to `limit` completion texts of the run's newest `scan` kept samples at or
    after `since_step` (OUT/samples, their `returned` excerpts; newest: highest step,
    then attempt id): {attempt_id, task_id, step, text, count}, where `count` is how
    many of those samples returned the same text (a degenerate run shows one text many
    times), most repeated first, then newest. Texts are cut at `max_chars`. Reads one
    run's partition of the samples table; [] when the run has no kept samples (its
    transcripts record no text, or no step is final yet)."""
    cols = ["step", "attempt_id", "task_id", "returned"]
    t = read_table(out, "samples", storage_options, cols, ("run_id", run_id))
    if not t.num_rows:
        return []
    rows = [
        r
        for r in t.to_pylist()
        if isinstance(r["returned"], str) and (since_step is None or r["step"] >= since_step)
    ]
    rows.sort(key=lambda r: (r["step"], r["attempt_id"]), reverse=True)
    seen: dict[str, dict[str, Any]] = {}
    for r in rows[:scan]:
        text = r["returned"]
        key = text[:max_chars]
        if key in seen:
            seen[key]["count"] += 1
            continue
        seen[key] = {
            "attempt_id": r["attempt_id"],
            "task_id": r["task_id"],
            "step": r["step"],
            "text": key + ("…" if len(text) > max_chars else ""),
            "count": 1,
        }
    ranked = sorted(seen.values(), key=lambda e: (-e["count"], -e["step"]))
    return ranked[:limit]


def read_heldout(
    out: str, run_id: str, storage_options: dict[str, Any] | None = None, max_points: int = 512
) -> dict[str, tuple[list[int], list[float | None]]]:
    """The run's held-out evaluations ({eval name: (steps, scores)}, in step order,
    the last `max_points` eval steps): the `reported_eval` map of its steps rows that
    have one. Reads one column of one run's partition of the steps table."""
    t = read_table(out, "steps", storage_options, ["step", "reported_eval"], ("run_id", run_id))
    if not t.num_rows or "reported_eval" not in t.column_names:
        return {}
    steps, evals = t.column("step").to_pylist(), t.column("reported_eval").to_pylist()
    got = sorted((s, e) for s, e in zip(steps, evals, strict=True) if e)[-max_points:]
    out_: dict[str, tuple[list[int], list[float | None]]] = {}
    for step, e in got:
        for name, v in e.items() if isinstance(e, dict) else e:
            st, vs = out_.setdefault(name, ([], []))
            st.append(step)
            vs.append(v)
    return out_
