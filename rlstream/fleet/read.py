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

`example_completions(run_uri, since_step)` is the one read outside OUT: a few
completion texts from the newest transcripts of a run, for the report's
degenerate_outputs and entropy_collapse sections. Given the newest names the
pipeline read (`newest_names`, the name window of the run's resume state in OUT) it
lists nothing and reads a fixed number of files, on local disk or S3, however long
the run; without a readable state it lists the run's transcripts folder.
"""

from __future__ import annotations

import itertools
import logging
from typing import Any

import numpy as np
import orjson
import pyarrow as pa
import pyarrow.compute as pc

from rlstream.io.storage import Storage
from rlstream.metrics.downsample import RunPoints
from rlstream.pipeline.discover import normalize_root
from rlstream.sinks.band_digest import current_bands
from rlstream.sinks.delta import DeltaSink
from rlstream.sinks.maintain import newest_per_run, read_latest_rows
from rlstream.sinks.step_digest import current_step_digest

log = logging.getLogger("rlstream")


def out_sink(
    out: str, storage_options: dict[str, Any] | None = None, retention_seconds: int = 300
) -> DeltaSink:
    """A handle on OUT (for reads and maintenance); an OUT of the earlier Parquet
    layout is refused."""
    out = normalize_root(out)
    sink = DeltaSink(
        out, Storage.for_url(out, storage_options), storage_options, True, retention_seconds
    )
    sink.check_layout()
    return sink


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


def _names_fields(
    out: str, run_id: str, storage_options: dict[str, Any] | None
) -> tuple[Any, Any] | None:
    """(`names_low`, `names_window`) of the run's resume state in OUT, as stored;
    None without a state this version can read."""
    from rlstream.pipeline.resume import peek_field

    try:
        data = out_sink(out, storage_options).load_state(run_id)
        if data is None:
            return None
        return peek_field(data, run_id, "names_low"), peek_field(data, run_id, "names_window")
    except Exception:  # a state this version cannot read: the caller lists everything
        return None


def names_mark(out: str, run_id: str, storage_options: dict[str, Any] | None = None) -> str | None:
    """The run's transcript-name watermark (`names_low` of its resume state in OUT):
    every name at or below it was read, and the transcripts written last sort above
    it (docs/run-format.md, "Listing order"). None without a readable state."""
    fields = _names_fields(out, run_id, storage_options)
    return fields[0] if fields is not None and isinstance(fields[0], str) else None


def newest_names(
    out: str, run_id: str, storage_options: dict[str, Any] | None = None
) -> list[str] | None:
    """The newest transcript names the pipeline read for the run, in name order: the
    `names_window` of its resume state in OUT (the names read above the watermark, at
    most `PipelineConfig.transcript_window`; all of them while the run is shorter). A
    list bounded by that window whatever the run's length, read without listing the
    run's folder. None without a readable state."""
    fields = _names_fields(out, run_id, storage_options)
    if fields is None or not isinstance(fields[1], list):
        return None
    return sorted(n for n in fields[1] if isinstance(n, str))


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
    run_uri: str,
    since_step: int | None,
    storage_options: dict[str, Any] | None = None,
    limit: int = 4,
    scan: int = 48,
    max_chars: int = 400,
    start_after: str | None = None,
    names: list[str] | None = None,
) -> list[dict[str, Any]]:
    """Up to `limit` completions from the newest `scan` transcripts of the run whose
    step is at or after `since_step`: {attempt_id, task_id, step, text, count}, where
    `count` is how many of the scanned completions had the same text (a degenerate
    run shows one text many times). Texts are cut at `max_chars`. With `names` (the
    transcript names to choose from, in name order: `newest_names`), the folder is
    not listed; otherwise only the names after `start_after` are (`names_mark`), or
    all. Returns [] when the run has no readable full-trace transcripts; never raises
    for a bad file."""
    storage = Storage.for_url(run_uri, storage_options)
    folder = Storage.join(run_uri, "transcripts")
    if names is not None:
        names = [n for n in names if n.endswith(".json")]
    else:
        try:
            names = [n for n in storage.list_names(folder, start_after) if n.endswith(".json")]
        except Exception as e:  # the run folder may be gone or unreachable: no examples
            log.warning("cannot list transcripts of %s: %s", run_uri, e)
            return []
    seen: dict[str, dict[str, Any]] = {}
    for name in reversed(names[-scan:]):
        try:
            doc = orjson.loads(storage.read(Storage.join(folder, name)))
        except Exception:
            continue
        if not isinstance(doc, dict):
            continue
        step = doc.get("step")
        if since_step is not None and isinstance(step, int) and step < since_step:
            continue
        for g in doc.get("generations") or []:
            text = g.get("text") if isinstance(g, dict) else None
            if not isinstance(text, str):
                continue
            key = text[:max_chars]
            if key in seen:
                seen[key]["count"] += 1
                continue
            seen[key] = {
                "attempt_id": str(doc.get("attempt_id")),
                "task_id": str(doc.get("task_id")),
                "step": step if isinstance(step, int) else None,
                "text": key + ("…" if len(text) > max_chars else ""),
                "count": 1,
            }
    ranked = sorted(seen.values(), key=lambda e: (-e["count"], -(e["step"] or 0)))
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
