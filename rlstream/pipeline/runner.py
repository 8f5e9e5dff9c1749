"""`RunGroup`: the tailer's logic for a set of runs, with no Ray in it.

One poll: for every run, follow what its format's `streams` name (`pipeline.runs`,
the same for every format: Loops stats run.json and its JSONL files, then lists new
transcripts), and turn what is new into work units; an executor runs the units (here, or on Ray worker
actors) and each result is folded into its run's state. Then rows past the watermark
are finalized. `commit` hands every changed run to the commit protocol
(rlstream.pipeline.commit): one Delta append per table, then the resume states. On an
object store the runs of a poll are planned concurrently, each run's stats together.

The stat of each JSONL file is taken before the transcript listing, and a worker
reads exactly up to that size: so every transcript written before a step's line was
listed in the poll that read the line, and the watermark is safe.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from rlstream.config import PipelineConfig
from rlstream.errors import RlstreamError
from rlstream.formats import DEFAULT
from rlstream.formats.quarantine import QuarantineRow, excerpt
from rlstream.io.storage import Storage
from rlstream.io.tail import FileCursor
from rlstream.pipeline.commit import app_id, commit_group, write_rejected
from rlstream.pipeline.discover import detect_run
from rlstream.pipeline.names import advance_names
from rlstream.pipeline.runs import REJECTED, plan_run, tails
from rlstream.pipeline.runs import add_run as take_run
from rlstream.pipeline.shards import PLAN_THREADS, cohort_chunks, run_key
from rlstream.pipeline.state import (
    RunState,
    emit,
    finalize,
    fold,
    is_finished,
    watermark,
)
from rlstream.pipeline.work import (
    Unit,
    UnitFailure,
    UnitResult,
)
from rlstream.sinks.delta import DeltaSink

log = logging.getLogger("rlstream")

Executor = Callable[[list[Unit]], Iterator[UnitResult | UnitFailure]]
"""Runs units and yields their results in any order (a `UnitFailure` for a unit that
could not be run)."""

HealthHook = Callable[[RunState, list[dict[str, Any]], float], list[dict[str, Any]]]
"""Folds new final rows (maybe none) into the run's health state, sets its status,
firing codes and findings, and returns alert events. Called for every run each poll."""


UNIT_RETRIES = 3
"""Extra rounds for failed units in batch mode before `analyze` gives up loudly."""


class RunGroup:
    """The runs one tailer owns, their states, and the poll/commit cycle."""

    def __init__(
        self,
        storage: Storage,
        sink: DeltaSink,
        cfg: PipelineConfig,
        health: HealthHook | None = None,
        peers: Any = None,
    ) -> None:
        self.storage = storage
        self.sink = sink
        self.cfg = cfg
        self.health = health
        self.peers = peers
        """Cohorts, peer bands and `unlike_peers` across the group's runs
        (`pipeline.cohorts.PeerFold`), called once per poll."""
        self.runs: dict[str, RunState] = {}
        self.polls = 0
        self.totals: Counter[str] = Counter()
        """Running totals for progress displays: bytes, tokens, units, rows, runs_done."""
        self.rejected: dict[str, QuarantineRow] = {}
        """Run URLs that could not be added (no readable run.json or resume state)."""
        self.rejected_written: set[str] = set()
        self.dirty: set[str] = set()
        self.written: Counter[str] = Counter()
        """Rows per table of this group's commits whose resume states were written (`tally`)."""
        self.streams: dict[str, tuple[Any, ...]] = {}
        """Run URL -> what its format follows (`Format.streams`)."""
        self._final = False

    # -- runs ----------------------------------------------------------------------
    def add_run(self, run_url: str) -> RunState | None:
        """Start tracking a run, resuming from its resume state when one exists."""
        if run_url in self.runs:
            return self.runs[run_url]
        fmt, names = detect_run(self.storage, run_url, self.cfg.input_format)
        return take_run(self, run_url, fmt or self.cfg.input_format or DEFAULT, names)

    # -- polling -------------------------------------------------------------------
    def plan(self, state: RunState) -> list[Unit]:
        """Units for what is new in one run (stats and listings only; no data read)."""
        return plan_run(self, state)

    def poll(self, execute: Executor, now: float | None = None, final: bool = False) -> int:
        """One poll of every run that is due; returns the number of new final rows."""
        now = time.time() if now is None else now
        self.polls += 1
        due = [s for s in self.runs.values() if final or self._due(s, now)]
        self._final = final
        units = [u for plan in self._plan_all(due) for u in plan]
        by_id = {s.run_id: s for s in due}
        failed = self._run_units(execute, units, by_id, now)
        # Batch mode finalizes everything it has, so a unit whose worker kept dying
        # (its node was lost) must be run again, never skipped. In watch mode the
        # run's cursors and listings have not moved: the next poll plans it again.
        for _ in range(UNIT_RETRIES if final else 0):
            if not failed:
                break
            log.warning("retrying %d failed work units", len(failed))
            failed = self._run_units(execute, failed, by_id, now)
        if failed and final:
            raise RlstreamError(
                f"{len(failed)} work units failed {UNIT_RETRIES + 1} times (last: {failed[0]!r}); "
                "nothing was finalized from them: rerun to resume from the resume states"
            )
        new_rows = 0
        finalized: dict[str, list[dict[str, Any]]] = {}
        # A run with a failed unit finalizes nothing until the unit has run again: a
        # step read whole by its other units would be written without it.
        held = {u.run_id for u in failed}
        for state in due:
            advance_names(state, self.cfg.transcript_window)
            if final:
                self._note_leftovers(state, *tails(self.streams.get(state.run_url)))
            rows = (
                []
                if state.run_id in held
                else finalize(state, watermark(state, now, self.cfg, final))
            )
            if rows:
                new_rows += len(rows)
                self.totals["rows"] += len(rows)
                self.dirty.add(state.run_url)
                finalized[state.run_url] = rows
            if self.health is not None:
                events = self.health(state, rows, now)
                if events:
                    emit(state, "alerts", events)
                    self.dirty.add(state.run_url)
        if self.peers is not None:
            self.dirty |= self.peers.fold(self.runs.values(), finalized, now)
        return new_rows

    def _plan_all(self, due: list[RunState]) -> list[list[Unit]]:
        """`plan` of every due run. On an object store the runs are planned by
        `PLAN_THREADS` threads, so a poll costs a few round trips, not a few per run
        (each `plan` touches only its own run's state)."""
        if self.storage.is_local or len(due) < 2:
            return [self.plan(s) for s in due]
        _ = self.storage.fs  # opened once, before the threads share it
        with ThreadPoolExecutor(min(len(due), PLAN_THREADS), "rlstream-plan") as pool:
            return list(pool.map(self.plan, due))

    def _run_units(
        self, execute: Executor, units: list[Unit], by_id: dict[str, RunState], now: float
    ) -> list[Unit]:
        """Run units, fold each result once; returns the units that failed."""
        failed: list[Unit] = []
        if not units:
            return failed
        for res in execute(units):
            if isinstance(res, UnitFailure):
                failed.append(res.unit)
                self.totals["failed_units"] += 1
                continue
            state = by_id[res.run_id]
            self.totals["bytes"] += res.bytes
            self.totals["tokens"] += res.tokens
            self.totals["units"] += 1
            fold(state, res, now)
            self.dirty.add(state.run_url)
        return failed

    def _due(self, state: RunState, now: float) -> bool:
        """Runs with no new bytes for `idle_backoff_seconds` are polled only every
        `idle_poll_every` polls (staggered by run), so a quiet fleet costs little; a
        run that wakes up is seen within that many polls."""
        if self.health is not None and state.status is None:
            return True  # just restored: the health hook derives its status (snapshot)
        if state.last_change is None or now - state.last_change < self.cfg.idle_backoff_seconds:
            return True
        every = max(1, self.cfg.idle_poll_every)
        return (self.polls + int(run_key(state.run_url)[:8], 16)) % every == 0

    def _note_leftovers(
        self,
        state: RunState,
        files: tuple[str, ...],
        optional: frozenset = frozenset(),
    ) -> None:
        """At the end of a batch pass, say what could not be read of the run's `Tail`
        files (once each); a missing `optional` file is not worth a row."""
        for file in files:
            stat = self.storage.stat(Storage.join(state.run_url, file))
            if stat is None and file in optional:
                continue
            cur = state.cursors.get(file, FileCursor())
            why = self.storage.unsafe(Storage.join(state.run_url, file))
            if why is not None:
                key, reason, offset = f"unsafe:{file}", "unsafe_file", None
                detail = f"not opened: {why}"
            elif stat is None:
                key, reason, offset, detail = f"missing:{file}", "missing_file", None, ""
            elif stat.size == 0:
                key, reason, offset, detail = f"empty:{file}", "empty_file", None, ""
            elif cur.position < stat.size:
                data = self.storage.read_range(
                    Storage.join(state.run_url, file),
                    cur.position,
                    min(stat.size, cur.position + 480),
                )
                key, reason, offset = (
                    f"partial:{file}:{cur.position}",
                    "incomplete_line",
                    cur.position,
                )
                detail = excerpt(data)
            else:
                continue
            if key not in state.noted:
                state.noted.add(key)
                state.out_quarantine.append(
                    QuarantineRow(state.run_id, file, offset, reason, detail)
                )
                state.counters["quarantined"] += 1
                self.dirty.add(state.run_url)

    # -- committing ----------------------------------------------------------------
    def commit(self, now: float | None = None, force: bool = False) -> int:
        """Commit every changed run (rlstream.pipeline.commit). Returns runs written;
        runs whose commit failed stay dirty, and the next commit retries them."""
        now = time.time() if now is None else now
        if REJECTED in self.dirty:
            todo = {u: r for u, r in self.rejected.items() if u not in self.rejected_written}
            ids = {app_id(f"{REJECTED}:{run_key(u)[:16]}"): r for u, r in todo.items()}
            if write_rejected(self.sink, ids, self.written):
                self.rejected_written.update(todo)
                self.dirty.discard(REJECTED)
        urls = set(self.runs) if force else self.dirty - {REJECTED}
        retry = commit_group(
            self.sink,
            self.runs,
            urls,
            now,
            self.cfg.commit_threads,
            self.written,
        )
        self.dirty = (self.dirty & {REJECTED}) | retry
        return len(urls - retry)

    def chunks(self, urls: list[str]) -> list[list[str]]:
        """The batch plan: the runs `analyze_chunk_runs` at a time. With the cohort
        fold, runs are read cohort by cohort and a chunk ends only where a cohort does
        (`pipeline.shards.cohort_chunks`), so each run is judged against every peer."""
        step = max(1, self.cfg.analyze_chunk_runs)
        urls = list(dict.fromkeys(urls))  # overlapping ROOTs name a run twice
        if self.peers is not None:
            return cohort_chunks(self.storage, urls, self.peers.cohort, step)
        return [urls[i : i + step] for i in range(0, len(urls), step)]

    def analyze(
        self, urls: list[str], execute: Executor, chunks: list[list[str]] | None = None
    ) -> Iterator[RunState]:
        """Batch mode: read runs to the end of what exists, chunk by chunk (default
        `self.chunks(urls)`); commit each chunk and drop its state, yielding it."""
        for part in self.chunks(urls) if chunks is None else chunks:
            chunk = [u for u in part if self.add_run(u) is not None]
            self.poll(execute, final=True)
            self.commit()
            self.totals["runs_done"] += len(chunk)
            for u in chunk:
                state = self.runs.pop(u)
                if self.peers is not None:
                    self.peers.release(state)
                yield state

    def tally(self) -> dict[str, Any]:
        """What this group's commits wrote ({table: rows}) and the runs it rejected
        ({run URL: why}), for the command's closing report (`pipeline.outcome`)."""
        return {
            "written": dict(self.written),
            "rejected": {
                url: f"run.json {r.detail}" if r.reason == "bad_run_json" else str(r.detail)
                for url, r in self.rejected.items()
            },
        }

    def all_finished(self) -> bool:
        return all(
            is_finished(s) and s.final_through >= s.max_known_step for s in self.runs.values()
        )

    def states(self) -> Iterable[RunState]:
        return self.runs.values()
