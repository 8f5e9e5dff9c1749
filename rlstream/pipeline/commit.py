"""The commit protocol: the tables first, the resume states last.

Every row a commit writes carries its run's `run_id` and commit number `commit_seq`,
and each table's append records one Delta application transaction per run (app id
`rlstream:<run_id>`, version = that `commit_seq`) in the same Delta commit as the
rows. A run's resume state records its `seq`: the run's rows with `commit_seq` at or
below it are its for good; rows above it belong to a commit whose state was never
written.

One commit of a set of runs (`commit_runs`):

1. **Rewind** (`rlstream.pipeline.rewind`). A run marked `check` (its first commit in
   this process, or after a failed one) reads its txn in every table; in a table where
   it is above the run's durable `seq`, the rows above it are deleted and the digests
   rewound.
2. **Rows.** Each run takes `seq + 1` and gathers its rows per table (`TABLES`): the
   rows the pipeline handed it (`pipeline.state.emit`), its quarantine rows and its
   `run_health` row if that changed.
3. **Tables.** One append per table with the rows of every run, one txn per run.
4. **States.** Each run's resume state is written, atomically (`commit_threads`).

A run whose append raised (it may have landed) or whose state was not written is put
back as it was before the commit, its rows waiting for the next one, and marked
`check`: the next commit deletes what may have landed, then writes it again. A kill at
any instant leaves each run either with its new state and all its rows in the tables,
or with its old state: rows above it are deleted at the restart's first commit, and
the input is read again from the state's cursors. No row is lost and none is written
twice (tests/pipeline/test_failpoints.py).

Adding a table: a builder in `TABLES` (rows, as dicts, to an Arrow table of its
schema) and `emit(state, name, rows)` where the pipeline makes them; the table's name
in `sinks.delta.TABLES` (maintenance, `--reset-run`).
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import orjson
import pyarrow as pa

from rlstream.config import PipelineConfig
from rlstream.io.storage import Storage
from rlstream.pipeline.failpoint import failpoint
from rlstream.pipeline.resume import Memo, decode_state, encode_state
from rlstream.pipeline.rewind import app_id, rewind
from rlstream.pipeline.rows import steps_table
from rlstream.pipeline.state import RunState, is_finished
from rlstream.sinks.cohorts import cohorts_table
from rlstream.sinks.delta import QUARANTINE_SCHEMA, DeltaSink, quarantine_table
from rlstream.sinks.health import alerts_table, health_row, run_health_table
from rlstream.sinks.samples import samples_table

log = logging.getLogger("rlstream")

TABLES: dict[str, Callable[[list[dict[str, Any]]], pa.Table]] = {
    "steps": steps_table,
    "quarantine": lambda rows: pa.Table.from_pylist(rows, schema=QUARANTINE_SCHEMA),
    "alerts": alerts_table,
    "run_health": run_health_table,
    "cohorts": cohorts_table,
    "samples": samples_table,
}
"""The tables a commit appends to, in this order, and how rows become Arrow."""

__all__ = [
    "TABLES",
    "app_id",
    "commit_group",
    "commit_runs",
    "load_state",
    "open_sink",
    "write_rejected",
]


def _health_sig(row: dict[str, Any]) -> str:
    body = {k: v for k, v in row.items() if k not in ("as_of", "commit_seq")}
    data = orjson.dumps(body, option=orjson.OPT_SORT_KEYS | orjson.OPT_SERIALIZE_NUMPY)
    return hashlib.blake2b(data, digest_size=12).hexdigest()


def _rows(st: RunState, now: float) -> dict[str, list[dict[str, Any]]]:
    """The run's rows of this commit per table (its `seq` already advanced), each
    stamped with `run_id` and `commit_seq`; its health signature is updated."""
    out = {t: list(rows) for t, rows in st.out.items() if rows}
    if st.out_quarantine:
        out.setdefault("quarantine", []).extend(dataclasses.asdict(q) for q in st.out_quarantine)
    row = health_row(st, now, is_finished(st))
    sig = _health_sig(row)
    if sig != st.health_sig:
        out.setdefault("run_health", []).append(row)
        st.health_sig = sig
    stamp = {"run_id": st.run_id, "commit_seq": st.seq}
    return {t: [{**r, **stamp} for r in rows] for t, rows in out.items()}


def _append_all(
    sink: DeltaSink, states: list[RunState], rows: list[dict[str, list[dict[str, Any]]]]
) -> set[int]:
    """One append per table of every run's rows (one Arrow table per kind for all
    runs: building a wide table costs milliseconds per call, whatever its rows).
    Returns the `id()`s of runs in an append that raised (it may have landed)."""
    failed: set[int] = set()
    for table in [*TABLES, *sorted({t for r in rows for t in r} - set(TABLES))]:
        part = [(st, r[table]) for st, r in zip(states, rows, strict=True) if r.get(table)]
        part = [(st, r) for st, r in part if id(st) not in failed]
        if not part:
            continue
        try:
            build = TABLES.get(table)
            if build is None:
                raise KeyError(f"no table {table!r} in pipeline.commit.TABLES")
            data = build([x for _, r in part for x in r])
            sink.append(table, data, {app_id(st.run_id): st.seq for st, _ in part})
        except Exception:
            log.exception("append to %s failed for %d runs; retried", table, len(part))
            failed.update(id(st) for st, _ in part)
            continue
        failpoint("after_append")
    return failed


def _save(sink: DeltaSink, st: RunState) -> bool:
    try:
        if st.memo is None:
            st.memo = Memo()
        sink.save_state(st.run_id, encode_state(st, st.memo))
    except Exception:
        log.exception("%s: resume state of commit %d not written; retried", st.run_id, st.seq)
        return False
    failpoint("after_state")
    return True


def commit_runs(
    sink: DeltaSink,
    states: list[RunState],
    now: float,
    threads: int = 8,
    written: Counter[str] | None = None,
) -> list[RunState]:
    """Steps 2-4 above (run `rewind` first); returns the runs to retry (an append or
    their state failed: put back as they were, marked `check`). `written`, if given,
    counts per table the rows of every run whose state was written."""
    saved = {id(st): (st.seq, st.health_sig, st.out, st.out_quarantine) for st in states}
    for st in states:
        st.seq += 1
    rows = [_rows(st, now) for st in states]
    for st in states:
        st.out, st.out_quarantine = {}, []
    failed = _append_all(sink, states, rows)
    todo = [st for st in states if id(st) not in failed]
    if len(todo) > 1 and threads > 1:
        with ThreadPoolExecutor(min(threads, len(todo))) as pool:
            ok = dict(zip(map(id, todo), pool.map(lambda s: _save(sink, s), todo), strict=True))
    else:
        ok = {id(st): _save(sink, st) for st in todo}
    retry: list[RunState] = []
    for st, r in zip(states, rows, strict=True):
        if ok.get(id(st)):
            st.durable_seq = st.seq
            if written is not None:
                written.update({t: len(x) for t, x in r.items()})
            continue
        st.seq, st.health_sig, st.out, st.out_quarantine = saved[id(st)]
        st.check = True
        retry.append(st)
    return retry


def commit_group(
    sink: DeltaSink,
    runs: dict[str, RunState],
    urls: set[str],
    now: float,
    threads: int,
    written: Counter[str] | None = None,
) -> set[str]:
    """One commit of a tailer's runs (by URL): rewind every run marked `check` (the
    ones in `urls` and the others), then commit the runs in `urls`. Returns the URLs
    of the runs to retry at the next commit."""
    checking = [st for st in runs.values() if st.check]
    try:
        rewind(sink, checking, TABLES)
    except Exception:
        log.exception("could not rewind the tables to the runs' resume states; retried")
        return set(urls) | {st.run_url for st in checking}
    targets = [runs[u] for u in sorted(urls) if u in runs]
    if not targets:
        return set()
    return {st.run_url for st in commit_runs(sink, targets, now, threads, written)}


def open_sink(out: str, cfg: PipelineConfig, storage: Storage | None = None) -> DeltaSink:
    """The sink a pipeline commits through, on OUT (a path or URL; `storage`: OUT's, if
    already opened), configured from `cfg`; an OUT of the earlier layout is refused."""
    from rlstream.pipeline.discover import normalize_root

    url = normalize_root(out)
    storage = storage or Storage.for_url(url, cfg.storage_options)
    sink = DeltaSink(url, storage, cfg.storage_options, cfg.fsync, cfg.retention_seconds)
    sink.check_layout()
    return sink


def load_state(sink: DeltaSink, run_id: str, reset: bool = False) -> RunState | None:
    """The run's resume state (None: a new run). `ResumeStateError` for a file that
    cannot be read, saying what to do. With `reset` (`--reset-run`), the state is
    moved aside and the run's rows deleted from the tables: it is read again from the
    start, and its commits continue above the txn versions already recorded."""
    data = sink.load_state(run_id)
    if reset:
        if data is not None:
            log.warning(
                "%s: --reset-run: resume state moved to %s", run_id, sink.move_state_aside(run_id)
            )
        deleted = sink.delete_run(run_id)
        log.warning("%s: --reset-run: %d rows deleted; reading it again", run_id, deleted)
        seqs = [v for t in TABLES for v in sink.txn_versions(t, [app_id(run_id)]).values() if v]
        return RunState(run_id=run_id, run_url="", seq=max(seqs, default=0)) if seqs else None
    if data is None:
        return None
    way_out = (
        f"rerun with --reset-run {run_id} to read the run again from the start "
        "(its rows are replaced), or move the file aside"
    )
    return decode_state(data, sink.state_url(run_id), way_out)


def write_rejected(
    sink: DeltaSink, rows: dict[str, Any], written: Counter[str] | None = None
) -> bool:
    """Quarantine rows of runs that could not be added (app id -> row), each written
    once: its txn (version 1) says whether it already was. False if it failed.
    `written` counts the rows appended."""
    try:
        done = sink.txn_versions("quarantine", list(rows)) if rows else {}
        todo = {a: r for a, r in rows.items() if done[a] is None}
        if todo:
            table = quarantine_table(list(todo.values()), 0)
            sink.append("quarantine", table, dict.fromkeys(todo, 1))
            if written is not None:
                written["quarantine"] += table.num_rows
        return True
    except Exception:
        log.exception("could not write the rejected runs' quarantine rows; retried")
        return False
