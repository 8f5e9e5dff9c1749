"""`watch` on a Ray this command starts: the first polls and commits before Ray is ready.

A private Ray, its worker actors and its tailer actors take seconds to start
(bench/README.md), and a watch used to wait for all of them before its first poll.
Instead, while `batch.RayStart` starts Ray, the workers and the `Fleet` (tailers) in a
thread, `EarlyWatch` has the driver:

- find the runs and hold them in one `RunGroup` (the class the tailers and the
  in-process runner use), with `batch.Handover` as its executor: units run in the
  driver until the workers have answered, then on them;
- poll every `poll_seconds` and commit after its first poll, then every
  `commit_seconds`, so the first run_health rows land before Ray is up;
- once the tailers have answered, commit every run and hand them over
  (`hand_over`): each tailer adds its runs as a restarted watch does, from the
  resume states just committed, and the driver forgets them. A run has one owner at
  a time and a tailer starts from the cursors the driver committed, so nothing is
  read, folded or written twice (the commit protocol, docs/runtime.md).

Told to stop before the handover (`stop()`, Ctrl-C, SIGTERM, `--exit-when-finished`),
the driver polls once more, commits and returns; Ray is stopped once its start ends.
Ctrl-C and SIGTERM only set a flag meanwhile, read before each poll: the driver folds
here, and a fold or commit cut in the middle would leave a half-updated state.
If Ray or its actors fail to start, what the driver folded is committed and the
watch stops with the error (`RlstreamError`).

`StartupLog` is the phase log of a watch's start: seconds since the process began.
"""

from __future__ import annotations

import logging
import math
import signal
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

from rlstream.config import PipelineConfig
from rlstream.errors import RlstreamError
from rlstream.io.storage import Storage
from rlstream.pipeline.discover import find_runs
from rlstream.pipeline.outcome import Outcome
from rlstream.pipeline.runner import RunGroup
from rlstream.pipeline.runs import REJECTED
from rlstream.pipeline.state import state_summary
from rlstream.runtime import procs
from rlstream.runtime.batch import Handover, RayStart
from rlstream.runtime.cluster import RayConfig
from rlstream.runtime.progress import Progress
from rlstream.sinks.delta import DeltaSink

log = logging.getLogger("rlstream")


class StartupLog:
    """When each phase of a watch's start ended, in seconds since the process began
    (its imports included); `line()` is the log line."""

    def __init__(self) -> None:
        self.t0 = time.monotonic() - procs.process_age()
        self.marks: dict[str, float] = {}

    def mark(self, phase: str, at: float | None = None) -> None:
        """`phase` ended now (or at monotonic time `at`); the first mark of a name stays."""
        self.marks.setdefault(phase, (time.monotonic() if at is None else at) - self.t0)

    def line(self) -> str:
        order = sorted(self.marks.items(), key=lambda kv: kv[1])
        return "start-up (s since the process began): " + ", ".join(
            f"{k} {v:.2f}" for k, v in order
        )


class EarlyWatch:
    """The driver's share of a watch until the fleet is ready. `make_fleet(workers,
    cfg)` makes the `Fleet` (tailers) around the started workers and waits for its
    tailers; it runs in the start's thread once the runs were found here, with `cfg`
    less the `--reset-run` runs the driver has already reset."""

    def __init__(
        self,
        storage: Storage,
        sink: DeltaSink,
        cfg: PipelineConfig,
        hooks_factory: Any,
        ray_cfg: RayConfig,
        n_workers: int | None,
        make_fleet: Callable[[list[Any], PipelineConfig], Any],
        phases: StartupLog,
    ) -> None:
        self.cfg = cfg
        self.storage = storage
        self.phases = phases
        self.group = RunGroup(storage, sink, cfg, **(hooks_factory() if hooks_factory else {}))
        self._found = threading.Event()
        self._make_fleet = make_fleet
        self.start = RayStart(ray_cfg, storage, n_workers, then=self._fleet)
        self.handover = Handover(storage, self.start.workers, cfg.max_inflight_units)

    def _fleet(self, workers: list[Any]) -> Any:
        self._found.wait()
        done = {s.run_id for s in self.group.runs.values()}
        cfg = replace(self.cfg, reset_runs=tuple(r for r in self.cfg.reset_runs if r not in done))
        self.phases.mark("Ray up", self.start._t0 + self.start.phases["ray"])
        fleet = self._make_fleet(workers, cfg)
        self.phases.mark("tailers ready")
        return fleet

    def discover(self, roots: Sequence[str], fmt: str | None) -> None:
        """Add the runs under `roots` (resetting those of `--reset-run`); then the
        fleet may be made."""
        try:
            for root in roots:
                for url in find_runs(self.storage, root, fmt=fmt):
                    self.group.add_run(url)
        finally:
            self._found.set()
        self.phases.mark("runs found")

    def run(
        self,
        stop: Callable[[], bool] | None,
        progress: Progress,
        metrics: Any = None,
        exit_when_finished: bool = False,
    ) -> bool:
        """Poll and commit here until the fleet is ready and every run is committed
        (True: `hand_over` next), or until the watch is to stop (False: `finish`).

        The driver folds here, so Ctrl-C and SIGTERM must not land in the middle of a
        fold or a commit (the state would be half-updated): meanwhile they only set a
        flag, seen before the next poll."""
        told = threading.Event()
        handlers = {}
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM):
                handlers[sig] = signal.signal(sig, lambda *_: told.set())
        try:
            return self._loop(stop, told, progress, metrics, exit_when_finished)
        finally:
            for sig, handler in handlers.items():
                signal.signal(sig, handler)
            if told.is_set():
                log.info("interrupted: committing before exit")

    def _loop(
        self,
        stop: Callable[[], bool] | None,
        told: threading.Event,
        progress: Progress,
        metrics: Any,
        exit_when_finished: bool,
    ) -> bool:
        group, last_commit = self.group, -math.inf
        while not told.is_set() and not (stop and stop()):
            t0, wall = time.monotonic(), time.time()
            if self._fleet_ready():
                group.commit()
                if not group.dirty - {REJECTED}:
                    return True
            group.poll(self.handover)
            self.phases.mark("first poll")
            totals = {"runs": len(group.runs), **group.totals}
            progress.show(totals, len(group.runs))
            if metrics is not None:
                metrics.on_poll(totals, wall, time.monotonic() - t0)
            if t0 - last_commit >= self.cfg.commit_seconds:
                group.commit()
                last_commit = t0
                self.phases.mark("first commit")
                if metrics is not None:
                    metrics.on_commit(self.summaries(), time.time(), 0, 0, 0)
                if exit_when_finished and group.runs and group.all_finished():
                    return False
            # Until the next poll, but not past the moment the fleet is ready.
            pause = max(0.0, self.cfg.poll_seconds - (time.monotonic() - t0))
            (told if self.start.settled.is_set() else self.start.settled).wait(pause)
        return False

    def _fleet_ready(self) -> bool:
        """True once Ray, its workers and the tailers have started; if they could not,
        commit what was folded here and raise the start's error."""
        try:
            ready = self.start.workers() is not None and self.start.made is not None
        except RlstreamError:
            self.group.commit()
            raise
        return ready

    def hand_over(self, outcome: Outcome | None) -> list[str]:
        """The runs for the tailers (all committed); the driver keeps none of them."""
        urls = list(self.group.runs)
        if outcome is not None:
            outcome.add_tally(self.group.tally())
        self.group.runs.clear()
        self.phases.mark("handed over")
        log.info(
            "%d runs handed over to the tailers (%d units ran in the driver, %d on workers)",
            len(urls),
            self.handover.counts["here"],
            self.handover.counts["ray"],
        )
        return urls

    def finish(self, outcome: Outcome | None) -> list[dict[str, Any]]:
        """Stop before the handover: one more poll, a final commit, the summaries."""
        self.group.poll(self.handover)
        self.group.commit()
        summaries = self.summaries()
        if outcome is not None:
            outcome.add_tally(self.group.tally())
            outcome.add_summaries(summaries)
        return summaries

    def summaries(self) -> list[dict[str, Any]]:
        return sorted((state_summary(s) for s in self.group.states()), key=lambda s: s["run_id"])
