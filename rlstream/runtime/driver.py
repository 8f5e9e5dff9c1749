"""The driver: discovery, the poll/commit loop on Ray, progress, clean shutdown.

`run(...)` is both commands. `analyze` (watch=False) discovers runs; on a Ray it
starts itself it works while Ray starts (runtime/batch.py), else it has each tailer
read its runs to the end and finalize every step row. `watch` polls every `poll_seconds`,
commits after its first poll and then every `commit_seconds` (on a Ray it starts
itself, the driver polls and commits while Ray starts, then hands the runs to the
tailers: runtime/early.py), rediscovers runs so that new ones join, maintains
OUT's tables every `maintenance.every_seconds` in a thread (runtime/maintenance.py),
and stops cleanly after a final commit on Ctrl-C (or when `stop()` returns True).
`analyze`, and a watch that `--exit-when-finished` ends, end with one maintenance
pass.
"""

from __future__ import annotations

import logging
import math
import sys
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, TextIO

from rlstream.config import PipelineConfig
from rlstream.pipeline.commit import open_sink
from rlstream.pipeline.discover import normalize_root
from rlstream.pipeline.local import input_storage, runs_or_fail
from rlstream.pipeline.outcome import Outcome, plural
from rlstream.runtime import batch
from rlstream.runtime.cluster import connect, disconnect, private_ray
from rlstream.runtime.early import EarlyWatch, StartupLog
from rlstream.runtime.maintenance import Maintainer
from rlstream.runtime.progress import Progress
from rlstream.runtime.sizes import RuntimeConfig, default_tailers
from rlstream.sinks.delta import DeltaSink

if TYPE_CHECKING:
    from rlstream.runtime.fleet import Fleet

__all__ = ["COMMIT_LOG", "RuntimeConfig", "default_tailers", "run"]


def __getattr__(name: str) -> Any:
    # `Fleet` imports Ray: only when a command needs it (an analyze the driver
    # finishes alone never does).
    if name == "Fleet":
        from rlstream.runtime.fleet import Fleet

        return Fleet
    raise AttributeError(name)


log = logging.getLogger("rlstream")

COMMIT_LOG_EVERY = 10
COMMIT_LOG = (
    "commits: mean %.3f s, max %.3f s over the last %d (%d run commits, %d step rows); "
    "polls: mean %.3f s, max %.3f s over %d"
)
"""Once per this many commits a watch logs its commits' and polls' mean and max time
(a poll longer than `--poll` means the watch is behind)."""


def _sigterm_as_interrupt() -> Any:
    """SIGTERM (Kubernetes, `timeout`, systemd) stops like Ctrl-C: after a final commit.
    Returns the previous handler (None off the main thread, where none is installed)."""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        return None

    def handler(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    return signal.signal(signal.SIGTERM, handler)


def run(
    roots: Sequence[str],
    out: str,
    cfg: PipelineConfig,
    rt: RuntimeConfig,
    watch: bool = False,
    stop: Callable[[], bool] | None = None,
    hooks_factory: Any = None,
    progress_out: TextIO | None = None,
    exit_when_finished: bool = False,
    metrics: Any = None,
    outcome: Outcome | None = None,
) -> list[dict[str, Any]]:
    """Run analyze (watch=False) or watch on Ray; returns per-run summaries.

    `metrics` (watch only; a `rlstream.fleet.prometheus.MetricsExporter`) is told
    about every poll and commit. `outcome`, if given, is told what was read, written
    and rejected. `analyze` finds its runs before Ray starts and raises `NoDataError`
    without starting it when there are none."""
    if hooks_factory is None:
        from rlstream.pipeline.verdicts import HealthHooks

        hooks_factory = HealthHooks()
    urls: list[str] | None = None
    if not watch:
        storage, urls = runs_or_fail(roots, out, cfg)
    sink = open_sink(out, cfg)
    maintainer = Maintainer(sink, rt.maintenance)
    previous_sigterm = _sigterm_as_interrupt()
    fleet, started, early = None, False, None
    progress = Progress(progress_out or sys.stderr, enabled=progress_out is not None)
    phases = StartupLog()
    try:
        if urls is not None and batch.wanted(rt.early_start, rt.ray):
            # The work begins here; Ray starts beside it (maybe later: `start_ray_after`).
            start = batch.RayStart(rt.ray, storage, rt.workers, delay=rt.start_ray_after)
            return batch.analyze(
                urls, storage, sink, cfg, start, maintainer, hooks_factory, progress, outcome
            )
        if watch and batch.wanted(rt.early_start, rt.ray):
            # Polls and commits begin in the driver while Ray and the actors start.
            early = _early_watch(roots, out, sink, cfg, rt, hooks_factory, phases)
            maintainer.start()
            if not early.run(stop, progress, metrics, exit_when_finished):
                summaries = early.finish(outcome)
                log.info(phases.line())
                if exit_when_finished and early.group.all_finished():
                    _last_pass(maintainer)
                return summaries
            fleet = early.start.made
            fleet.carried.update(early.group.totals)  # progress and metrics keep counting
            fleet.adopt(early.hand_over(outcome))
            fleet.discover()  # runs that appeared while Ray started
            log.info(phases.line())
        else:
            from rlstream.runtime.fleet import Fleet

            t_start = time.monotonic()
            started = connect(rt.ray)
            t_ray = time.monotonic()
            fleet = Fleet(roots, out, cfg, rt, hooks_factory, watch=watch)
            fleet.ready()
            t_actors = time.monotonic()
            phases.mark("Ray up", t_ray)
            phases.mark("tailers ready", t_actors)
            log.info(
                "Ray %s in %.1f s; %d workers and %d tailers ready in %.1f s",
                "started" if private_ray() else "joined",
                t_ray - t_start,
                len(fleet.workers),
                len(fleet.tailers),
                t_actors - t_ray,
            )
            if not watch:
                summaries = fleet.analyze(progress, urls)
                took = time.monotonic() - t_actors
                log.info("analyzed %s in %.1f s", plural(len(summaries), "run"), took)
                if outcome is not None:
                    fleet.tally(outcome)
                    outcome.add_summaries(summaries)
                    outcome.where = _joined_where(started)
                maintainer.run_once()
                return summaries
            fleet.discover()
            phases.mark("runs found")
            maintainer.start()
        summaries = _watch_loop(
            fleet, cfg, rt, stop, progress, metrics, exit_when_finished, outcome, phases, early
        )
        if exit_when_finished and fleet.all_finished():
            _last_pass(maintainer)
        return summaries
    finally:
        maintainer.stop()
        progress.close()
        if early is not None:
            early.start.join()  # once its start ended: the fleet, its workers, its Ray
        elif fleet is not None:
            fleet.close()
        if started:
            t_stop = time.monotonic()
            disconnect()
            log.info("Ray stopped in %.1f s", time.monotonic() - t_stop)
        if previous_sigterm is not None:
            import signal

            signal.signal(signal.SIGTERM, previous_sigterm)


def _last_pass(maintainer: Maintainer) -> None:
    """A watch that ends because every run finished leaves OUT maintained, as `analyze`
    does (stopped by Ctrl-C or SIGTERM, it exits at once instead)."""
    maintainer.stop()
    try:
        maintainer.run_once()
    except Exception:  # the rows are committed; a pass can run later (`rlstream compact`)
        log.exception("final maintenance pass failed; run `rlstream compact OUT`")


def _watch_loop(
    fleet: Fleet,
    cfg: PipelineConfig,
    rt: RuntimeConfig,
    stop: Callable[[], bool] | None,
    progress: Progress,
    metrics: Any,
    exit_when_finished: bool,
    outcome: Outcome | None,
    phases: StartupLog,
    early: EarlyWatch | None,
) -> list[dict[str, Any]]:
    """The watch on the fleet: poll, commit (the first at once, unless the driver
    committed before the handover), rediscover, until told to stop."""
    last_commit = time.monotonic() if early is not None else -math.inf
    last_discover = time.monotonic()
    commit_times: list[float] = []
    poll_times: list[float] = []
    work = [0, fleet.carried.get("rows", 0)]  # run commits, step rows at the last log line
    try:
        while not (stop and stop()):
            t0, wall = time.monotonic(), time.time()
            fleet.poll()
            poll_times.append(time.monotonic() - t0)
            phases.mark("first poll")
            totals = fleet.totals()
            progress.show(totals, len(fleet.owned))
            if metrics is not None:
                metrics.on_poll(totals, wall, time.monotonic() - t0)
            if t0 - last_discover >= rt.discover_every_seconds:
                fleet.discover()
                last_discover = t0
            if t0 - last_commit >= cfg.commit_seconds:
                t_commit = time.monotonic()
                work[0] += fleet.commit()
                commit_times.append(time.monotonic() - t_commit)
                if "first commit" not in phases.marks:
                    phases.mark("first commit")
                    log.info(phases.line())
                if len(commit_times) == COMMIT_LOG_EVERY:
                    log.info(
                        COMMIT_LOG,
                        sum(commit_times) / len(commit_times),
                        max(commit_times),
                        len(commit_times),
                        work[0],
                        totals.get("rows", 0) - work[1],
                        sum(poll_times) / len(poll_times),
                        max(poll_times),
                        len(poll_times),
                    )
                    commit_times.clear()
                    poll_times.clear()
                    work[:] = [0, totals.get("rows", 0)]
                last_commit = t0
                if metrics is not None:
                    metrics.on_commit(
                        fleet.summaries(),
                        time.time(),
                        len(fleet.workers),
                        fleet.check_workers(),
                        fleet.tailer_restarts,
                    )
                if exit_when_finished and fleet.all_finished():
                    break
            time.sleep(max(0.0, cfg.poll_seconds - (time.monotonic() - t0)))
    except KeyboardInterrupt:
        log.info("interrupted: committing before exit")
    fleet.poll()
    fleet.commit()
    summaries = fleet.summaries()
    if outcome is not None:
        fleet.tally(outcome)
        outcome.add_summaries(summaries)
    return summaries


def _joined_where(started: bool) -> str:
    """The summary line's end for `analyze` on a Ray it did not choose from its plan."""
    if started:
        return "ran on a private Ray, started before the work"
    return "ran on the joined Ray cluster (a cluster is always used)"


def _early_watch(
    roots: Sequence[str],
    out: str,
    sink: DeltaSink,
    cfg: PipelineConfig,
    rt: RuntimeConfig,
    hooks_factory: Any,
    phases: StartupLog,
) -> EarlyWatch:
    """Start Ray, its workers and the fleet in a thread; find the runs here meanwhile."""
    norm = [normalize_root(r) for r in roots]
    storage = input_storage(norm, cfg.storage_options, cfg.read_inflight_bytes, cfg.max_file_bytes)

    def make_fleet(workers: list[Any], fleet_cfg: PipelineConfig) -> Any:
        from rlstream.runtime.fleet import Fleet

        fleet = Fleet(roots, out, fleet_cfg, rt, hooks_factory, watch=True, workers=workers)
        fleet.ready()
        return fleet

    early = EarlyWatch(storage, sink, cfg, hooks_factory, rt.ray, rt.workers, make_fleet, phases)
    try:
        early.discover(norm, cfg.input_format)
    except BaseException:
        early.start.join()
        raise
    return early
