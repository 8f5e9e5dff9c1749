"""Spills: a commit's large row sets go to the tables before the resume state.

A commit normally carries a run's new rows in its resume state's outbox
(`rlstream.pipeline.commit`), so the state must be written before the tables. A run
catching up on a backlog (a watch started or restarted behind its writers, or one
that fell behind) would carry thousands of rows there. Instead, when a run's new rows
for a table in `SPILL_TABLES` exceed `max_rows` (`PipelineConfig.commit_max_rows`),
they are appended first, in one Delta commit per table for every such run, recording
the application transaction `rlstream:<run_id>:spill` = the commit's `seq`, and left
out of the outbox. The outbox, so the resume state, holds at most `max_rows` rows of
each of those tables. (Keeping the backlog's steps pending instead, not final, would
cost more: a step's partial aggregates take several times the bytes of its row.)

A table whose rows of the previous commit are carried (their append did not land) is
not spilled in that commit: the carried rows and the new ones land in one append, so
a run's steps rows reach the table in step order (the step digest relies on it,
rlstream.sinks.digest), at the cost of one larger outbox after a failed append.

Orphans. If the run's state is then not written (the write fails, or the process
dies first), the spilled rows are in the table while the resume state still describes
the previous commit, and the run will produce them again. Before a run commits for
the first time in a process, and after a failed spill or state write, `clean_orphans`
reads its spill transaction: a version above the seq of its last written state means
orphans, which are deleted:

    steps, samples: run_id = <id> and step > F    F: final_through of the last written state
    quarantine: run_id = <id> and commit_seq > S  S: seq of the last written state

Only rows of commits whose state was never written match: the rows a written state
accounts for have `step <= final_through` and `commit_seq <= seq`. So a kill between
any two writes still gives the rows of an uninterrupted run, none lost, none twice
(tests/pipeline/test_failpoints.py).
"""

from __future__ import annotations

import logging
from typing import Any

import pyarrow as pa

from rlstream.pipeline.failpoint import failpoint
from rlstream.pipeline.state import RunState
from rlstream.sinks.delta import DeltaSink

log = logging.getLogger("rlstream")

SPILL_TABLES = ("steps", "quarantine", "cohorts", "samples")
"""Tables whose rows can be spilled: their orphans can be told by a column (a band row
carries the run that wrote it and that run's commit_seq)."""


def spill_id(run_id: str) -> str:
    """The application-transaction id of a run's spills (one per table)."""
    return f"rlstream:{run_id}:spill"


def take_spill(
    new: dict[str, pa.Table], max_rows: int | None, carried: set[str] | frozenset[str] = frozenset()
) -> dict[str, pa.Table]:
    """Remove from a run's new rows (table -> rows) the tables that have more than
    `max_rows` rows, and return them (none when `max_rows` is None); tables in
    `carried` (rows of the previous commit still to land) are never spilled."""
    if max_rows is None:
        return {}
    out = {
        t: new[t]
        for t in SPILL_TABLES
        if t in new and t not in carried and new[t].num_rows > max_rows
    }
    for t in out:
        del new[t]
    return out


def append_spills(sink: DeltaSink, spills: list[tuple[RunState, dict[str, pa.Table]]]) -> set[int]:
    """One append per table of the spilled rows, each run's spill transaction at its
    (already advanced) `seq`. Returns the `id()`s of runs whose spill may not have
    landed in some table: their commit must not write their state (they are marked
    for `clean_orphans`, as a spill that raised may still have landed)."""
    failed: set[int] = set()
    for table in SPILL_TABLES:
        part = [(st, rows[table]) for st, rows in spills if table in rows and id(st) not in failed]
        if not part:
            continue
        data = pa.concat_tables([t for _, t in part], promote_options="default")
        try:
            sink.append(table, data, {spill_id(st.run_id): st.seq for st, _ in part})
        except Exception:
            log.exception(
                "spill of %d rows to %s failed for %d runs; retried", len(data), table, len(part)
            )
            failed.update(id(st) for st, _ in part)
            continue
        failpoint("after_spill")
    for st, _ in spills:
        st.spill_check = True  # until its state is written (commit_runs clears it)
    return failed


def clean_orphans(sink: DeltaSink, states: list[RunState]) -> dict[str, int]:
    """Delete the orphaned spilled rows of the runs marked `spill_check` (above);
    returns rows deleted per table. Raises if a table cannot be read or changed (the
    commit is retried)."""
    todo = [s for s in states if s.spill_check]
    deleted: dict[str, int] = {}
    if not todo:
        return deleted
    for table in SPILL_TABLES:
        got = sink.txn_versions(table, [spill_id(s.run_id) for s in todo])
        for s in todo:
            v = got[spill_id(s.run_id)]
            if v is None or v <= s.durable_seq:
                continue
            quoted = s.run_id.replace("'", "''")
            cut = (
                f"step > {int(s.durable_through)}"
                if table in ("steps", "samples")
                else f"commit_seq > {int(s.durable_seq)}"
            )
            n = sink.delete_where(table, f"run_id = '{quoted}' AND {cut}")
            log.warning(
                "%s: %d rows of an unfinished commit (spill %d) deleted from %s; "
                "they are written again",
                s.run_id,
                n,
                v,
                table,
            )
            deleted[table] = deleted.get(table, 0) + n
    for s in todo:
        s.spill_check = False
    return deleted


def count_spilled(written: Any, spilled: dict[str, pa.Table]) -> None:
    """Count a run's spilled rows in `written` (`commit.Written`) once its state is
    written: only then are they the run's for good."""
    if written is not None:
        for table, rows in spilled.items():
            written.rows[table] += rows.num_rows
