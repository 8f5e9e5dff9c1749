"""Reading OUT for the fleet view: latest health rows, step rows, example completions.

`read_latest(out)` returns one dict per run from `run_health/latest/` (an empty list
when OUT has no health yet). `read_steps(out, run_id, columns)` returns a run's step
rows in step order as column lists. Both go through `Storage`, so OUT may be local or
any fsspec URL, and both tolerate a file being replaced while they read (the writer
renames atomically; a vanished file is skipped and shows up on the next read).

`example_completions(run_uri, since_step)` is the one read outside OUT: a few
completion texts from the newest transcripts of a run, for the report's
degenerate_outputs and entropy_collapse sections.
"""

from __future__ import annotations

import logging
from typing import Any

import orjson
import pyarrow as pa
import pyarrow.parquet as pq

from rlstream.io.storage import Storage
from rlstream.pipeline.discover import normalize_root
from rlstream.sinks.parquet import partition

log = logging.getLogger("rlstream")

LATEST = "run_health/latest"


def _table(storage: Storage, url: str, columns: list[str] | None = None) -> pa.Table | None:
    try:
        data = storage.read(url)
    except (FileNotFoundError, OSError) as e:
        log.debug("skipping %s: %s", url, e)
        return None
    # No threads at all: pyarrow 26 sometimes aborts at interpreter exit ("terminate
    # called without an active exception") after threaded reads from memory buffers,
    # and pre-buffering (on by default) still completes reads on the I/O thread pool,
    # where a CI run saw a crash in ~FileReaderImpl. In memory it buys nothing.
    return pq.read_table(
        pa.BufferReader(data), columns=columns, use_threads=False, pre_buffer=False
    )


def read_latest(out: str, storage_options: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """One dict per run (the run_health columns, `as_of`/`last_activity` as datetimes)."""
    out = normalize_root(out)
    storage = Storage.for_url(out, storage_options)
    folder = Storage.join(out, LATEST)
    rows: list[dict[str, Any]] = []
    for name in storage.list_names(folder):
        if not name.endswith(".parquet"):
            continue
        t = _table(storage, Storage.join(folder, name))
        if t is not None:
            rows.extend(t.to_pylist())
    return rows


def read_steps(
    out: str,
    run_id: str,
    columns: list[str],
    storage_options: dict[str, Any] | None = None,
) -> dict[str, list[Any]]:
    """The run's step rows as {column: values}, in step order; missing columns are
    all None (an older OUT, or a column another version adds)."""
    out = normalize_root(out)
    storage = Storage.for_url(out, storage_options)
    folder = Storage.join(out, "steps", partition(run_id))
    tables = []
    for name in storage.list_names(folder):
        if name.endswith(".parquet"):
            t = _table(storage, Storage.join(folder, name))
            if t is not None and t.num_rows:
                tables.append(t)
    if not tables:
        return {c: [] for c in ["step", *columns]}
    t = pa.concat_tables(tables, promote_options="default").sort_by("step")
    n = t.num_rows
    return {
        c: (t.column(c).to_pylist() if c in t.column_names else [None] * n)
        for c in ["step", *columns]
    }


def example_completions(
    run_uri: str,
    since_step: int | None,
    storage_options: dict[str, Any] | None = None,
    limit: int = 4,
    scan: int = 48,
    max_chars: int = 400,
) -> list[dict[str, Any]]:
    """Up to `limit` completions from the newest `scan` transcripts of the run whose
    step is at or after `since_step`: {attempt_id, task_id, step, text, count}, where
    `count` is how many of the scanned completions had the same text (a degenerate
    run shows one text many times). Texts are cut at `max_chars`. Returns [] when the
    run has no readable full-trace transcripts; never raises for a bad file."""
    storage = Storage.for_url(run_uri, storage_options)
    folder = Storage.join(run_uri, "transcripts")
    try:
        names = [n for n in storage.list_names(folder) if n.endswith(".json")]
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
