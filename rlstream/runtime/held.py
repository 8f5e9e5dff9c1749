"""`HeldRuns`: the runs the driver holds itself, in one `RunGroup`, while a private Ray
starts (or instead of one).

It is one of the two holders of runs the driver loop drives (`runtime/driver.py`;
the other is `runtime.pools.ActorPools`, the tailer actors). Its executor is a
`WorkerPool` over `RayStart.workers` (`runtime/executors.py`): units run in this
process until the workers have answered, then on them; with `in_process`
(`analyze --in-process`) the start is stopped before it began and every unit runs
here.

- `analyze`: `drain` reads one chunk of runs (cohort by cohort, as in-process) to
  its end and commits it per call. Unless Ray was asked for, the first chunk's plan
  chooses whether worker processes are started beside the driver
  (`runtime.placement`, `runtime.processes.LocalStart`; the pool then sends units to
  them); once the last chunk's units are folded, the workers (or Ray) are stopped in
  the background while the driver commits and maintains.
- `watch`: `poll`, `commit` and `discover` as the loop asks. Unless Ray was asked
  for (`--ray`) or ruled out (`--in-process`), the driver's measured work chooses
  (`runtime.load`): above `WatchPlacement.ray_above` of a core over a window, a
  private Ray is started (and discovery here stops: later runs are the tailers').
  Once `RayStart.then` has made the tailers (`ActorPools`) and every run is
  committed, `successor` hands the runs over: each tailer adds its runs from the
  resume states just committed and the driver forgets them. A run has one owner at
  a time and the tailer starts from the cursors the driver committed, so nothing is
  read, folded or written twice. If Ray or its actors fail to start, what was
  folded here is committed and the error raised (`RlstreamError`).
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

from rlstream.config import PipelineConfig
from rlstream.errors import RlstreamError
from rlstream.io.storage import Storage
from rlstream.pipeline.discover import find_runs
from rlstream.pipeline.outcome import Outcome, plural
from rlstream.pipeline.runner import RunGroup
from rlstream.pipeline.runs import REJECTED
from rlstream.pipeline.state import state_summary
from rlstream.pipeline.work import Unit
from rlstream.runtime.executors import (
    START_NOW_TRANSCRIPTS,
    WORK_HERE_TOO,
    RayStart,
    WorkerPool,
    phases_text,
)
from rlstream.runtime.load import DriverLoad, WatchPlacement, placement_line
from rlstream.runtime.placement import Placement, choose
from rlstream.runtime.processes import PROCESS_CALLS, LocalStart
from rlstream.runtime.progress import Progress, StartupLog
from rlstream.runtime.threaded import ThreadedHere, here_threads
from rlstream.sinks.delta import DeltaSink

log = logging.getLogger("rlstream")


class HeldRuns:
    """Runs in a `RunGroup` of this process, their units run by `WorkerPool` over
    `start`'s workers. `make_pools(workers, cfg)` (watch) makes the `ActorPools`
    around the started workers and waits for its tailers; it runs in the start's
    thread once the runs were found here, with `cfg` less the `--reset-run` runs the
    driver has already reset."""

    def __init__(
        self,
        storage: Storage,
        sink: DeltaSink,
        cfg: PipelineConfig,
        hooks_factory: Any,
        start: Callable[..., RayStart],
        phases: StartupLog,
        progress: Progress,
        make_pools: Callable[[list[Any], PipelineConfig], Any] | None = None,
        in_process: bool = False,
        processes: int | None = None,
        watch: WatchPlacement | None = None,
    ) -> None:
        self.in_process = in_process
        self.processes = processes
        self.cfg = cfg
        self.storage = storage
        self.phases = phases
        self.progress = progress
        self.group = RunGroup(storage, sink, cfg, **(hooks_factory() if hooks_factory else {}))
        self._found = threading.Event()
        self._make_pools = make_pools
        self.start = start(then=self._pools if make_pools is not None else None)
        self.pool = WorkerPool(
            storage,
            self.start.workers,
            cfg.max_inflight_units,
            on_result=self._show,
            on_drained=self.start.stop,
            here_too=WORK_HERE_TOO,
            on_first=self._sized if make_pools is None and not in_process else None,
        )
        self.done: list[dict[str, Any]] = []
        self.chunks: list[list[str]] | None = None
        self.chosen: list[Placement] = []
        self.local: LocalStart | None = None
        """The worker processes, when the plan chose them."""
        self._urls = 0
        self._next = 0
        self._shown = 0.0
        self._t0 = time.monotonic()
        # watch: where the work runs (runtime/load.py). Ray is asked for once the
        # measured work is above the share, at once with `--ray`, never in-process.
        self.watch = watch
        self._roots: list[str] = []
        self._asked = self.start.delay is not None and not in_process
        measured = watch is not None and self.start.delay is None
        self.load = DriverLoad(watch.window_seconds) if measured else None
        # In the driver on an object store, units run on threads (runtime/threaded.py).
        self.here = (
            ThreadedHere(storage, here_threads(), cfg.max_inflight_units, self._show)
            if watch is not None and not storage.is_local
            else None
        )
        self.peak_share: float | None = None
        """The highest share of a core measured over a whole window (watch)."""
        self.why_ray: str | None = None

    # -- the loop's interface (`runtime/driver.py`) -----------------------------------

    def __len__(self) -> int:
        return len(self.group.runs)

    def totals(self) -> dict[str, int]:
        return {"runs": len(self.group.runs), **self.group.totals}

    def discover(self, roots: Sequence[str] | None = None) -> int:
        """Add the runs under `roots` (the first call's, again on later calls) not held
        yet, resetting those of `--reset-run`; then the tailers may be made. Once a
        private Ray is asked for, no more: runs that appear later are found by the
        tailers after the handover, whose `--reset-run` list leaves out the runs the
        driver reset (so none is reset twice)."""
        if roots is not None:
            self._roots = list(roots)
        if self._found.is_set() and self._asked:
            return 0
        added = 0
        try:
            for root in self._roots:
                for url in find_runs(self.storage, root, fmt=self.cfg.input_format):
                    if url not in self.group.runs and self.group.add_run(url) is not None:
                        added += 1
        finally:
            self._found.set()
        self.phases.mark("runs found")
        return added

    def poll(self) -> None:
        # Once Ray is asked for, the pool sends units to its workers when they are ready.
        execute = self.pool if self._asked or self.here is None else self.here
        with self.load.measure() if self.load else contextlib.nullcontext():
            self.group.poll(execute)
        self._place()

    def commit(self) -> int:
        with self.load.measure() if self.load else contextlib.nullcontext():
            return self.group.commit()

    def drain(self, urls: Sequence[str], progress: Progress) -> bool:
        """The loop's step in `analyze`: the next chunk of `urls` read to its end,
        committed and dropped; True once the last one is."""
        if self.chunks is None:
            urls = list(dict.fromkeys(urls))
            self._urls = len(urls)
            self.chunks = self.group.chunks(urls)  # cohort by cohort, as in-process
        k = self._next
        chunk = self.chunks[k]
        self.pool.last = k == len(self.chunks) - 1
        self.done += [state_summary(s) for s in self.group.analyze(chunk, self.pool, [chunk])]
        self._next = k + 1
        if self._next < len(self.chunks):
            return False
        progress.show(self.group.totals, self._urls, final=True)
        return True

    def summaries(self) -> list[dict[str, Any]]:
        held = [state_summary(s) for s in self.group.states()]
        return sorted(self.done + held, key=lambda s: s["run_id"])

    def all_finished(self) -> bool:
        return bool(self.group.runs) and self.group.all_finished()

    def tally(self, outcome: Outcome) -> None:
        outcome.add_tally(self.group.tally())

    def actor_counts(self) -> tuple[int, int, int]:
        return 0, 0, 0

    def pause(self, seconds: float, told: threading.Event) -> None:
        """Until the next poll or `told`, and while a start is under way not past the
        moment it settles (the handover follows)."""
        if not self._asked or self.start.settled.is_set():
            told.wait(seconds)
            return
        end = time.monotonic() + seconds
        while not (told.is_set() or self.start.settled.is_set()):
            left = end - time.monotonic()
            if left <= 0:
                break
            self.start.settled.wait(min(left, 0.1))

    def successor(self, outcome: Outcome | None) -> Any:
        """The `ActorPools` holding these runs from now on, once its tailers answered
        and every run here is committed; else None. If Ray or its actors could not
        start, commit what was folded here and raise the start's error."""
        if self._make_pools is None:
            return None
        try:
            ready = self.start.workers() is not None and self.start.made is not None
        except RlstreamError:
            self.group.commit()
            raise
        if not ready:
            return None
        self.group.commit()
        if self.group.dirty - {REJECTED}:
            return None  # a commit failed: the runs stay until one lands
        pools = self.start.made
        pools.carried.update(self.group.totals)  # progress and metrics keep counting
        urls = list(self.group.runs)
        if outcome is not None:
            self.tally(outcome)
        self.group.runs.clear()
        self.phases.mark("handed over")
        log.info(
            "%d runs handed over to the tailers (%d units ran in the driver, %d on workers)",
            len(urls),
            self.pool.counts["here"] + (self.here.done if self.here else 0),
            self.pool.counts["workers"],
        )
        pools.adopt(urls)
        pools.discover()  # runs that appeared while Ray started
        return pools

    def close(self) -> None:
        """Stop what the start started, once its start ended (the tailers, their
        workers, the Ray; or the worker processes)."""
        self.start.join()
        if self.local is not None:
            self.local.join()
        if self.here is not None:
            self.here.close()

    def watched_where(self) -> str:
        """Where a watch ran and why, for the closing report's last line."""
        if self.in_process:
            return "watched in this process (asked for: --in-process)"
        assert self.watch is not None
        if self.why_ray is None and self.start.delay is None:
            w, above = self.watch.window_seconds, 100 * self.watch.ray_above
            if self.peak_share is None:  # stopped before a whole window
                return (
                    f"watched in this process (a private Ray starts once its polls and "
                    f"commits take above {above:.0f} % of a core over {w:g} s)"
                )
            return (
                f"watched in this process (its polls and commits took at most "
                f"{100 * self.peak_share:.0f} % of a core over {w:g} s; a private Ray "
                f"starts above {above:.0f} %)"
            )
        why = self.why_ray or (
            "asked for: --ray" if self.start.delay == 0 else f"after {self.start.delay:g} s"
        )
        if self.start.made is None or self.group.runs:
            return f"watched in this process while a private Ray started ({why})"
        return f"watched on a private Ray ({why})"

    # -- internals ---------------------------------------------------------------------

    def _place(self) -> None:
        """watch: start a private Ray once the driver's measured work is above the
        share (`runtime.load`); from then on no run is discovered here."""
        if self.load is None or self._asked:
            return
        share = self.load.share()
        if share is None:
            return
        self.peak_share = max(self.peak_share or 0.0, share)
        assert self.watch is not None
        if self.in_process or share <= self.watch.ray_above:
            return
        self._asked = True
        self.why_ray = placement_line(share, self.watch)
        log.info("starting a private Ray for the watch: %s", self.why_ray)
        self.phases.mark("Ray asked for")
        self.start.now()

    def _pools(self, workers: list[Any]) -> Any:
        assert self._make_pools is not None
        self._found.wait()
        done = {s.run_id for s in self.group.runs.values()}
        cfg = replace(self.cfg, reset_runs=tuple(r for r in self.cfg.reset_runs if r not in done))
        self.phases.mark("Ray up", self.start._t0 + self.start.phases["ray"])
        pools = self._make_pools(workers, cfg)
        self.phases.mark("tailers ready")
        return pools

    def _show(self) -> None:
        if self._urls and time.monotonic() - self._shown >= 0.5:
            self._shown = time.monotonic()
            self.progress.show(self.group.totals, self._urls)

    def _sized(self, units: list[Unit]) -> None:
        """`analyze`: the first chunk's plan chooses whether worker processes start
        (no Ray asked for), or when the Ray asked for starts."""
        assert self.chunks is not None
        listed = sum(len(getattr(u, "names", ())) for u in units)
        if self.start.delay is None:  # the plan chooses (runtime/placement.py)
            self.start.stop()
            asked = self.processes
            self.chosen.append(
                choose(listed, len(self.chunks))
                if asked is None
                else Placement(asked, f"asked for: --processes {asked}")
            )
            if self.chosen[0].processes:
                self.local = LocalStart(self.storage, self.chosen[0].processes, delay=0)
                self.pool.use(self.local.workers, PROCESS_CALLS, self.local.stop)
        elif len(self.chunks) > 1 or listed > START_NOW_TRANSCRIPTS:
            self.start.now()

    def report(self, outcome: Outcome | None) -> None:
        """`analyze`'s closing log line and where the work ran (after `close`)."""
        start, took, n = self.start, time.monotonic() - self._t0, plural(len(self.done), "run")
        here, there = self.pool.counts["here"], self.pool.counts["workers"]
        if outcome is not None:
            outcome.where = self._where()
        if start.error is not None:
            log.warning("Ray did not start (%r): every unit ran in the driver", start.error)
        if self.local is not None and self.local.error is not None:
            log.warning(
                "worker processes did not start (%r): every unit ran in the driver",
                self.local.error,
            )
        if self.in_process:
            log.info("analyzed %s in %.1f s in this process (asked for: --in-process)", n, took)
        elif self.local is not None:
            log.info(
                "analyzed %s in %.1f s: %d units here, %d in worker processes (%s; %s)",
                *(n, took, here, there, self.local.text(), self.chosen[0].why),
            )
        elif self.chosen:
            log.info(
                "analyzed %s in %.1f s in this process, no Ray started (%s)",
                n,
                took,
                self.chosen[0].why,
            )
        elif "skipped" in start.phases:
            log.info(
                "analyzed %s in %.1f s: %d units here, no Ray started (done within %.1f s)",
                *(n, took, here, start.delay),
            )
        else:
            log.info(
                "analyzed %s in %.1f s: %d units here, %d on %d workers (%s)",
                *(n, took, here, there, len(start._actors), phases_text(start.phases)),
            )

    def _where(self) -> str:
        """Where the work ran and why, for the closing report's last line."""
        start, chosen = self.start, self.chosen
        if self.in_process:
            return "ran in this process (asked for: --in-process)"
        if chosen and self.local is not None and self.pool.counts["workers"] == 0:
            return f"ran in this process ({chosen[0].why}): done before the worker processes were ready"
        if chosen:
            return chosen[0].summary()
        if "skipped" in start.phases or start.delay is None:
            return "ran in this process (done before a private Ray was due)"
        why = "asked for: --ray" if start.delay == 0 else f"after {start.delay:g} s alone"
        if self.pool.counts["workers"] == 0:
            return f"ran in this process while a private Ray started ({why}): done before its workers were ready"
        return f"ran on a private Ray ({why})"
