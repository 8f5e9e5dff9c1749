"""The commit protocol: resume states first (with an outbox), then one Delta append per
table carrying every changed run, each run's rows tagged with a Delta application
transaction (app id `rlstream:<run_id>`, version = the run's commit number `seq`).

One commit of a set of runs (`commit_runs`):

1. **Resolve.** Runs whose outbox holds tables not known to have landed (after a
   restart: all of them; after a failed append: that table) look up their txn
   version in those tables. Version >= `outbox_seq`: it landed. Otherwise its rows
   are carried into this commit.
2. **Prepare.** Each run takes `seq + 1` and builds this commit's rows per table (new
   steps, quarantine and alerts rows; its run_health row if it changed; the cohort
   band rows computed for its new steps, `pipeline.cohorts`), plus any
   carried rows: that is its new `outbox`.
3. **Resume states.** Each run's state (cursors, pending aggregates, health, outbox)
   is written, atomically, before any table. A run whose state write fails is put
   back as it was and retried at the next commit.
4. **Appends.** One Delta commit per table with the outbox rows of every run whose
   state was written, and one txn per run.

A kill at any instant leaves either the old state (nothing of the commit anywhere:
the input is read again from the old cursors) or the new state with its outbox, in
which case step 1 of the next commit appends exactly the tables whose txn is behind.
No row is lost and none is written twice. The outbox stays in the state file until
the run's next commit replaces it, or the next commit of the group `settle`s it (an
idle run's state is rewritten once without it). A run with more than `max_rows` new
rows for steps or quarantine (catching up) appends those before its state instead,
so the outbox stays small (`rlstream.pipeline.spill`).
"""

from __future__ import annotations

import hashlib
import logging
from collections import Counter
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import orjson
import pyarrow as pa

from rlstream.pipeline.failpoint import failpoint
from rlstream.pipeline.resume import decode_state, encode_state
from rlstream.pipeline.rows import steps_table
from rlstream.pipeline.spill import (
    append_spills,
    clean_orphans,
    count_spilled,
    spill_id,
    take_spill,
)
from rlstream.pipeline.state import RunState, is_finished
from rlstream.sinks.cohorts import cohorts_table
from rlstream.sinks.delta import DeltaSink, quarantine_table
from rlstream.sinks.health import alerts_table, health_row, run_health_table
from rlstream.sinks.samples import samples_table

log = logging.getLogger("rlstream")

COMMIT_TABLES = ("steps", "quarantine", "alerts", "run_health", "cohorts", "samples")
"""Tables the commits append to, in this order (run_latest is maintenance's)."""


class Written:
    """Rows that landed per table in this process's appends (`rows`), for a command's
    closing report. An append that raised may still have landed: its rows wait in
    `unsure` ((run URL, table, outbox seq) -> rows) until `resolve` reads the txn and
    counts them if they did; rows carried into a later append count when it lands."""

    def __init__(self) -> None:
        self.rows: Counter[str] = Counter()
        self.unsure: dict[tuple[str, str, int], int] = {}

    def landed(self, state: RunState, table: str, rows: int) -> None:
        self.rows[table] += rows
        for key in [k for k in self.unsure if k[:2] == (state.run_url, table)]:
            del self.unsure[key]


def app_id(run_id: str) -> str:
    """The Delta application-transaction id of a run (its rows in every table)."""
    return f"rlstream:{run_id}"


def to_ipc(table: pa.Table) -> bytes:
    """An Arrow IPC stream, zstd-compressed whole (the schema of ~60 columns is most of
    a few rows' stream, and compresses 4x), after its 8-byte uncompressed size."""
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as w:
        w.write_table(table)
    raw = sink.getvalue()
    return raw.size.to_bytes(8, "little") + pa.Codec("zstd").compress(raw, asbytes=True)


def from_ipc(data: bytes) -> pa.Table:
    size = int.from_bytes(data[:8], "little")
    raw = pa.Codec("zstd").decompress(data[8:], decompressed_size=size)
    return pa.ipc.open_stream(pa.BufferReader(raw)).read_all()


def _health_sig(row: dict[str, Any]) -> str:
    body = {k: v for k, v in row.items() if k not in ("as_of", "commit_seq")}
    data = orjson.dumps(body, option=orjson.OPT_SORT_KEYS | orjson.OPT_SERIALIZE_NUMPY)
    return hashlib.blake2b(data, digest_size=12).hexdigest()


def resolve(sink: DeltaSink, states: Iterable[RunState], written: Written | None = None) -> None:
    """Drop from each run's `unconfirmed` the tables where its outbox landed (counted in
    `written` when this process's append of it raised)."""
    by_table: dict[str, list[RunState]] = {}
    for st in states:
        for t in st.unconfirmed:
            by_table.setdefault(t, []).append(st)
    for table, sts in by_table.items():
        got = sink.txn_versions(table, [app_id(s.run_id) for s in sts])
        for s in sts:
            v = got[app_id(s.run_id)]
            if v is not None and v >= s.outbox_seq:
                s.unconfirmed.discard(table)
                if written is not None:
                    n = written.unsure.pop((s.run_url, table, s.outbox_seq), 0)
                    written.landed(s, table, n)


def _new_rows(states: list[RunState], now: float) -> list[dict[str, pa.Table]]:
    """Each run's new rows per table (after its `seq` was advanced). One Arrow table
    per kind for all runs, sliced per run: building a 60-column table costs
    milliseconds per call, whatever its rows."""
    health: list[dict[str, Any] | None] = []
    for st in states:
        row = health_row(st, now, is_finished(st))
        sig = _health_sig(row)
        health.append(row if sig != st.health_sig else None)
        st.health_sig = sig
    kinds = {
        "steps": (lambda st, _h: st.out_rows, steps_table),
        "alerts": (lambda st, _h: st.out_alerts, alerts_table),
        "run_health": (lambda _st, h: [h] if h is not None else [], run_health_table),
        "cohorts": (
            lambda st, _h: [
                {**r, "run_id": st.run_id, "as_of": now, "commit_seq": st.seq}
                for r in st.out_cohorts
            ],
            cohorts_table,
        ),
        "samples": (lambda st, _h: st.out_samples, samples_table),
    }
    out: list[dict[str, pa.Table]] = [{} for _ in states]
    for table, (rows_of, build) in kinds.items():
        per_run = [rows_of(st, h) for st, h in zip(states, health, strict=True)]
        if not any(per_run):
            continue
        whole = build([r for rows in per_run for r in rows])
        start = 0
        for i, rows in enumerate(per_run):
            if rows:
                out[i][table] = whole.slice(start, len(rows))
                start += len(rows)
    for i, st in enumerate(states):
        if st.out_quarantine:
            out[i]["quarantine"] = quarantine_table(st.out_quarantine, st.seq)
    return out


def _prepare(state: RunState, new: dict[str, pa.Table]) -> None:
    """Make the run's outbox: carried rows (not known to have landed) and new ones."""
    outbox: dict[str, bytes] = {}
    for t in COMMIT_TABLES:
        parts = [from_ipc(state.outbox[t])] if t in state.unconfirmed else []
        if t in new:
            parts.append(new[t])
        if parts:
            outbox[t] = to_ipc(pa.concat_tables(parts, promote_options="default"))
    state.outbox, state.outbox_seq, state.unconfirmed = outbox, state.seq, set(outbox)


def _undo(state: RunState, saved: tuple[Any, ...]) -> None:
    state.seq, state.outbox, state.outbox_seq, state.unconfirmed, state.health_sig = saved


def _save(sink: DeltaSink, state: RunState) -> None:
    sink.save_state(state.run_id, encode_state(state))
    failpoint("after_state")


def commit_runs(
    sink: DeltaSink,
    states: list[RunState],
    now: float,
    threads: int = 8,
    written: Written | None = None,
    max_rows: int | None = None,
) -> tuple[list[RunState], list[RunState]]:
    """Commit these runs (steps 2-4 above; run `resolve` and `spill.clean_orphans`
    first). Returns (runs whose state was written, runs to retry: state not written or
    an append failed). `written`, if given, counts the rows of each append that landed
    (`Written`). A run's steps or quarantine rows beyond `max_rows` are spilled."""
    saved = {
        id(st): (st.seq, st.outbox, st.outbox_seq, set(st.unconfirmed), st.health_sig)
        for st in states
    }
    for st in states:
        st.seq += 1
    spills: dict[int, dict[str, pa.Table]] = {}
    for st, new in zip(states, _new_rows(states, now), strict=True):
        spilled = take_spill(new, max_rows, st.unconfirmed)
        if spilled:
            spills[id(st)] = spilled
        _prepare(st, new)
    pending = [
        (st.out_rows, st.out_quarantine, st.out_alerts, st.out_cohorts, st.out_samples)
        for st in states
    ]
    for st in states:
        st.out_rows, st.out_quarantine, st.out_alerts, st.out_cohorts = [], [], [], []
        st.out_samples = []
    unspilled = append_spills(sink, [(st, spills[id(st)]) for st in states if id(st) in spills])

    def save(st: RunState) -> bool:
        if id(st) in unspilled:
            return False
        try:
            _save(sink, st)
            return True
        except Exception:
            log.exception("%s: resume state of commit %d not written; retried", st.run_id, st.seq)
            return False

    if len(states) > 1 and threads > 1:
        with ThreadPoolExecutor(min(threads, len(states))) as pool:
            ok = list(pool.map(save, states))
    else:
        ok = [save(st) for st in states]
    saved_ok: list[RunState] = []
    retry: list[RunState] = []
    for st, done, rows in zip(states, ok, pending, strict=True):
        if done:
            saved_ok.append(st)
            st.durable_through, st.durable_seq = st.final_through, st.seq
            if id(st) in spills:
                st.spill_check = False
                count_spilled(written, spills[id(st)])
        else:
            _undo(st, saved[id(st)])
            st.out_rows, st.out_quarantine, st.out_alerts, st.out_cohorts, st.out_samples = rows
            retry.append(st)
    failpoint("after_states")
    failed = append_outboxes(sink, saved_ok, written)
    return saved_ok, retry + [st for st in saved_ok if st.run_url in failed]


def append_outboxes(
    sink: DeltaSink, states: list[RunState], written: Written | None = None
) -> set[str]:
    """One append per table of the unconfirmed outbox rows of `states`; returns the
    run URLs whose rows did not land in some table (their txn is checked next time).
    `written` counts, per table, the rows of each append that returned (new rows and
    carried outbox rows alike); the rows of one that raised wait in `written.unsure`."""
    failed: set[str] = set()
    for table in COMMIT_TABLES:
        sts = [s for s in states if table in s.unconfirmed]
        if not sts:
            continue
        parts = [from_ipc(s.outbox[table]) for s in sts]
        data = pa.concat_tables(parts, promote_options="default")
        try:
            sink.append(table, data, {app_id(s.run_id): s.outbox_seq for s in sts})
        except Exception:
            log.exception("append to %s failed for %d runs; retried", table, len(sts))
            failed.update(s.run_url for s in sts)
            if written is not None:
                for s, part in zip(sts, parts, strict=True):
                    written.unsure[(s.run_url, table, s.outbox_seq)] = part.num_rows
            continue
        for s, part in zip(sts, parts, strict=True):
            s.unconfirmed.discard(table)
            if written is not None:
                written.landed(s, table, part.num_rows)
        failpoint("after_append")
    return failed


def settle(sink: DeltaSink, states: Iterable[RunState]) -> None:
    """Rewrite the resume state of runs whose outbox fully landed, without it: a run
    that stays idle (or a batch run, never committed again) keeps a small state. A
    failed write is harmless (the outbox is only checked against the txn again)."""
    for st in states:
        if st.outbox and not st.unconfirmed:
            st.outbox = {}
            try:
                sink.save_state(st.run_id, encode_state(st))
            except Exception:
                log.exception("%s: resume state not rewritten without its outbox", st.run_id)


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
        ids = [app_id(run_id), spill_id(run_id)]
        seqs = [v for t in COMMIT_TABLES for v in sink.txn_versions(t, ids).values() if v]
        return RunState(run_id=run_id, run_url="", seq=max(seqs, default=0)) if seqs else None
    if data is None:
        return None
    way_out = (
        f"rerun with --reset-run {run_id} to read the run again from the start "
        "(its rows are replaced), or move the file aside"
    )
    return decode_state(data, sink.state_url(run_id), way_out)


def write_rejected(sink: DeltaSink, rows: dict[str, Any], written: Written | None = None) -> bool:
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
                written.rows["quarantine"] += table.num_rows
        return True
    except Exception:
        log.exception("could not write the rejected runs' quarantine rows; retried")
        return False


def commit_group(
    sink: DeltaSink,
    runs: dict[str, RunState],
    urls: set[str],
    now: float,
    threads: int,
    written: Written | None = None,
    max_rows: int | None = None,
) -> set[str]:
    """One commit of a tailer's runs (by URL): the runs in `urls` and those whose last
    outbox is not known to have landed. Runs outside the commit whose outbox landed are
    `settle`d. Returns the URLs of the runs to retry at the next commit."""
    unsure = [s for s in runs.values() if s.unconfirmed]
    try:
        resolve(sink, unsure, written)
        urls = set(urls) | {s.run_url for s in unsure if s.unconfirmed}
        targets = [runs[u] for u in sorted(urls) if u in runs]
        clean_orphans(sink, targets)
    except Exception:
        log.exception("could not read the tables' transactions; commit retried")
        return set(urls) | {s.run_url for s in unsure}
    settle(sink, [s for s in runs.values() if s.run_url not in urls])
    if not targets:
        return set()
    _, retry = commit_runs(sink, targets, now, threads, written, max_rows)
    return {st.run_url for st in retry}
