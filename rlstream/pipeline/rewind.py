"""Rewind: the tables brought back to a run's last resume state.

A commit writes the tables before the resume state (`rlstream.pipeline.commit`), so a
commit whose state was not written (a kill, a failed append or state write) may have
left rows in some tables: rows of the run with `commit_seq` above the `seq` of its
last written state (`durable_seq`), which the run will produce again from the state's
cursors. Before a run commits for the first time in a process, and after a failed
commit, `rewind` reads its application transaction (`app_id`) in every table; a
version above `durable_seq` means such rows, and they are deleted:

    run_id = <id> AND commit_seq > <durable_seq>

(from `run_latest` too when `run_health` had some). Only rows of commits whose state
was never written match: a written state accounts for every row at or below its seq.
Then the digests maintenance built from those rows are rewound
(`sinks.step_digest.rewind_runs`, `sinks.band_digest.rewind_cohorts`): the runs (cohorts)
are dropped from them and the files that hold their rows read again, so no digest
keeps a deleted row's values.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

import pyarrow.compute as pc

from rlstream.pipeline.state import RunState
from rlstream.sinks.band_digest import rewind_cohorts
from rlstream.sinks.delta import DeltaSink
from rlstream.sinks.step_digest import rewind_runs

log = logging.getLogger("rlstream")


def app_id(run_id: str) -> str:
    """The Delta application-transaction id of a run (its rows in every table)."""
    return f"rlstream:{run_id}"


def rewind(sink: DeltaSink, states: Iterable[RunState], tables: Iterable[str]) -> int:
    """Delete the rows of unfinished commits of the runs marked `check` from `tables`
    (the commit's), rewind the digests, and clear the marks; returns the rows deleted.
    Raises if a table cannot be read or changed (the commit is retried)."""
    todo = {app_id(s.run_id): s for s in states if s.check}
    if not todo:
        return 0
    total = 0
    steps: list[str] = []
    cohorts: set[str] = set()
    for table in tables:
        got = sink.txn_versions(table, list(todo))
        for a, s in todo.items():
            v = got[a]
            if v is None or v <= s.durable_seq:
                continue
            quoted = s.run_id.replace("'", "''")
            where = f"run_id = '{quoted}' AND commit_seq > {int(s.durable_seq)}"
            if table == "cohorts":
                cohorts |= _cohorts_of(sink, s.run_id, s.durable_seq)
            n = sink.delete_where(table, where)
            if table == "run_health":
                sink.delete_where("run_latest", where)
            if table == "steps":
                steps.append(s.run_id)
            log.warning(
                "%s: %d rows of an unfinished commit (%d) deleted from %s; written again",
                s.run_id,
                n,
                v,
                table,
            )
            total += n
    if steps:
        rewind_runs(sink, steps)
    if cohorts:
        rewind_cohorts(sink, sorted(cohorts))
    for s in todo.values():
        s.check = False
    return total


def _cohorts_of(sink: DeltaSink, run_id: str, seq: int) -> set[str]:
    """Cohorts of the band rows a run carried in commits above `seq`."""
    dt = sink.handle("cohorts")
    if dt is None:
        return set()
    flt = (pc.field("run_id") == run_id) & (pc.field("commit_seq") > seq)
    t = sink.dataset(dt).to_table(columns=["cohort"], filter=flt)
    return set(t.column("cohort").to_pylist())
