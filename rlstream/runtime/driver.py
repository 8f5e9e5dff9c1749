"""The driver: one loop for both commands, over one of two holders of runs.

`run(...)` picks the holder, then `_drive` runs the loop:

- `HeldRuns` (runtime/held.py): the runs in a `RunGroup` of this process, its units
  run by a `WorkerPool` over a private Ray's workers, in this process until they are
  ready (or for good when no Ray is started: analyze's plan, watch's measured work,
  `--in-process`). Used whenever this command would start the Ray
  (`RuntimeConfig.early_start`); in `watch` it hands its runs over to the tailers
  (`ActorPools`) once a private Ray it started is ready.
- `ActorPools` (runtime/pools.py): the runs sharded over tailer actors next to the
  workers. Used on a joined cluster, and with `early_start=False`.

The loop: `analyze` steps (`drain`: a chunk read to its end and committed) until
nothing is left. `watch` polls every `poll_seconds`, commits after its first poll and
then every `commit_seconds`, rediscovers runs so that new ones join, maintains OUT
every `maintenance.every_seconds` in a thread (runtime/maintenance.py), until
Ctrl-C, SIGTERM, `stop()` or `--exit-when-finished`; then one more poll and a final
commit. While it runs, Ctrl-C and SIGTERM only set a flag read before the next poll:
a fold or a commit is never cut in the middle. `analyze`, and a watch that
`--exit-when-finished` ends, end with one maintenance pass.
"""

from __future__ import annotations

import logging
import math
import signal
import sys
import threading
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Protocol, TextIO

from rlstream.config import PipelineConfig
from rlstream.pipeline.commit import open_sink
from rlstream.pipeline.discover import normalize_root
from rlstream.pipeline.local import input_storage, runs_or_fail
from rlstream.pipeline.outcome import Outcome, plural
from rlstream.runtime import held
from rlstream.runtime.cluster import connect, disconnect, private_ray
from rlstream.runtime.executors import RayStart, wanted
from rlstream.runtime.maintenance import Maintainer
from rlstream.runtime.progress import Progress, StartupLog
from rlstream.runtime.sizes import RuntimeConfig, default_tailers

if TYPE_CHECKING:
    from rlstream.runtime.pools import ActorPools

__all__ = ["COMMIT_LOG", "RuntimeConfig", "default_tailers", "run"]


def __getattr__(name: str) -> Any:
    # `ActorPools` imports Ray: only when a command needs it (an analyze the driver
    # finishes alone never does).
    if name == "ActorPools":
        from rlstream.runtime.pools import ActorPools

        return ActorPools
    raise AttributeError(name)


log = logging.getLogger("rlstream")


class Runs(Protocol):
    """What the loop drives: `HeldRuns` (runtime/held.py) or `ActorPools`
    (runtime/pools.py). Where the units run is the holder's executor's business."""

    def drain(self, urls: Sequence[str], progress: Progress) -> bool: ...
    def poll(self) -> Any: ...
    def commit(self) -> int: ...
    def discover(self) -> int: ...
    def successor(self, outcome: Outcome | None) -> Runs | None: ...
    def pause(self, seconds: float, told: threading.Event) -> None: ...
    def totals(self) -> dict[str, int]: ...
    def summaries(self) -> list[dict[str, Any]]: ...
    def all_finished(self) -> bool: ...
    def tally(self, outcome: Outcome) -> None: ...
    def actor_counts(self) -> tuple[int, int, int]: ...
    def close(self) -> None: ...
    def __len__(self) -> int: ...


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
    """Run analyze (watch=False) or watch; returns per-run summaries.

    `metrics` (watch only; a `rlstream.fleet.prometheus.MetricsExporter`) is told
    about every poll and commit. `outcome`, if given, is told what was read, written
    and rejected. `analyze` finds its runs before Ray starts and raises `NoDataError`
    without starting it when there are none."""
    if hooks_factory is None:
        from rlstream.pipeline.verdicts import HealthHooks

        hooks_factory = HealthHooks()
    norm = [normalize_root(r) for r in roots]
    if watch:
        urls: list[str] = []
        storage = input_storage(
            norm, cfg.storage_options, cfg.read_inflight_bytes, cfg.max_file_bytes
        )
    else:
        storage, urls = runs_or_fail(roots, out, cfg)
    sink = open_sink(out, cfg)
    maintainer = Maintainer(sink, rt.maintenance)
    previous_sigterm = _sigterm_as_interrupt()
    runs: Any = None
    owner: Any = None  # what to close at the end: the holder made here
    started = False
    progress = Progress(progress_out or sys.stderr, enabled=progress_out is not None)
    phases = StartupLog()
    try:
        if rt.in_process or wanted(rt.early_start, rt.ray):
            # The work begins here; a private Ray starts beside it when the plan
            # (analyze) or the measured work (watch) asks for one, or at once (`--ray`);
            # a watch's tailers are then made around its workers.
            def start(then: Any) -> RayStart:
                made = held.RayStart(
                    rt.ray, storage, rt.workers, then=then, delay=rt.start_ray_after
                )
                if rt.in_process:
                    made.stop()  # before its delay: no Ray at all
                return made

            make = _make_pools(roots, out, rt, hooks_factory) if watch else None
            runs = held.HeldRuns(
                storage,
                sink,
                cfg,
                hooks_factory,
                start,
                phases,
                progress,
                make,
                rt.in_process,
                rt.processes,
                watch=rt.watch if watch else None,
            )
            owner = runs
            if watch:
                runs.discover(norm)
        else:
            from rlstream.runtime.pools import ActorPools

            t_start = time.monotonic()
            started = connect(rt.ray)
            t_ray = time.monotonic()
            runs = owner = ActorPools(roots, out, cfg, rt, hooks_factory, watch=watch)
            runs.ready()
            t_actors = time.monotonic()
            phases.mark("Ray up", t_ray)
            phases.mark("tailers ready", t_actors)
            log.info(
                "Ray %s in %.1f s; %d workers and %d tailers ready in %.1f s",
                "started" if private_ray() else "joined",
                t_ray - t_start,
                len(runs.workers),
                len(runs.tailers),
                t_actors - t_ray,
            )
            if watch:
                runs.discover()
                phases.mark("runs found")
        if watch:
            maintainer.start()
        t_work = time.monotonic()
        runs, summaries = _drive(
            runs, urls, cfg, rt, watch, stop, progress, metrics, exit_when_finished, outcome, phases
        )
        if not watch and isinstance(runs, held.HeldRuns):
            maintainer.run_once()
            runs.close()  # Ray, if one was started, stops while the driver maintains
            runs.report(outcome)
        elif not watch:
            took = time.monotonic() - t_work
            log.info("analyzed %s in %.1f s", plural(len(summaries), "run"), took)
            if outcome is not None:
                outcome.where = _joined_where(started, "ran")
            maintainer.run_once()
        elif exit_when_finished and runs.all_finished():
            _last_pass(maintainer)
        if watch and outcome is not None:
            outcome.where = (
                owner.watched_where()
                if isinstance(owner, held.HeldRuns)
                else _joined_where(started, "watched")
            )
        return summaries
    finally:
        maintainer.stop()
        progress.close()
        if owner is not None:
            owner.close()  # a HeldRuns: once its start ended (the tailers, workers, Ray)
        if started:
            t_stop = time.monotonic()
            disconnect()
            log.info("Ray stopped in %.1f s", time.monotonic() - t_stop)
        if previous_sigterm is not None:
            signal.signal(signal.SIGTERM, previous_sigterm)


def _last_pass(maintainer: Maintainer) -> None:
    """A watch that ends because every run finished leaves OUT maintained, as `analyze`
    does (stopped by Ctrl-C or SIGTERM, it exits at once instead)."""
    maintainer.stop()
    try:
        maintainer.run_once()
    except Exception:  # the rows are committed; a pass can run later (`rlstream compact`)
        log.exception("final maintenance pass failed; run `rlstream compact OUT`")


def _drive(
    runs: Runs,
    urls: Sequence[str],
    cfg: PipelineConfig,
    rt: RuntimeConfig,
    watch: bool,
    stop: Callable[[], bool] | None,
    progress: Progress,
    metrics: Any,
    exit_when_finished: bool,
    outcome: Outcome | None,
    phases: StartupLog,
) -> tuple[Runs, list[dict[str, Any]]]:
    """The one driver loop, over `runs` (`HeldRuns` or `ActorPools`): analyze until
    drained, watch until told to stop. Returns the holder at the end (a watch's
    `HeldRuns` may have handed its runs to an `ActorPools`) and the summaries."""
    told = threading.Event()
    handlers = {}
    if watch and threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGINT, signal.SIGTERM):
            handlers[sig] = signal.signal(sig, lambda *_: told.set())
    last_commit, last_discover = -math.inf, time.monotonic()
    commit_times: list[float] = []
    poll_times: list[float] = []
    work = [0, 0]  # run commits, step rows at the last commit log line
    try:
        while not told.is_set() and not (stop and stop()):
            t0, wall = time.monotonic(), time.time()
            if not watch:
                if runs.drain(urls, progress):
                    break
                continue
            successor = runs.successor(outcome)
            if successor is not None:  # the tailers took the runs, all committed
                runs, last_commit = successor, t0
                log.info(phases.line())
                work[1] = runs.totals().get("rows", 0)
            runs.poll()
            poll_times.append(time.monotonic() - t0)
            phases.mark("first poll")
            totals = runs.totals()
            progress.show(totals, len(runs))
            if metrics is not None:
                metrics.on_poll(totals, wall, time.monotonic() - t0)
            if t0 - last_discover >= rt.discover_every_seconds:
                runs.discover()
                last_discover = t0
            if t0 - last_commit >= cfg.commit_seconds:
                t_commit = time.monotonic()
                work[0] += runs.commit()
                commit_times.append(time.monotonic() - t_commit)
                last_commit = t0
                if "first commit" not in phases.marks:
                    phases.mark("first commit")
                    log.info(phases.line())
                if len(commit_times) == COMMIT_LOG_EVERY:
                    _log_commits(commit_times, poll_times, work, totals.get("rows", 0))
                if metrics is not None:
                    metrics.on_commit(runs.summaries(), time.time(), *runs.actor_counts())
                # A run that appeared since the last discovery keeps the watch going.
                if exit_when_finished and runs.all_finished() and not runs.discover():
                    break
            runs.pause(max(0.0, cfg.poll_seconds - (time.monotonic() - t0)), told)
    finally:
        for sig, handler in handlers.items():
            signal.signal(sig, handler)
    if told.is_set():
        log.info("interrupted: committing before exit")
    if watch:
        runs.poll()
        runs.commit()
    summaries = runs.summaries()
    if outcome is not None:
        runs.tally(outcome)
        outcome.add_summaries(summaries)
    return runs, summaries


def _log_commits(
    commit_times: list[float], poll_times: list[float], work: list[int], rows: int
) -> None:
    """`COMMIT_LOG`, then the counters start again."""
    log.info(
        COMMIT_LOG,
        sum(commit_times) / len(commit_times),
        max(commit_times),
        len(commit_times),
        work[0],
        rows - work[1],
        sum(poll_times) / len(poll_times),
        max(poll_times),
        len(poll_times),
    )
    commit_times.clear()
    poll_times.clear()
    work[:] = [0, rows]


def _joined_where(started: bool, verb: str) -> str:
    """The summary line's end on a Ray the command did not choose from its plan or
    its measured work (`verb`: ran, watched)."""
    if started:
        return f"{verb} on a private Ray, started before the work"
    return f"{verb} on the joined Ray cluster (a cluster is always used)"


def _make_pools(
    roots: Sequence[str], out: str, rt: RuntimeConfig, hooks_factory: Any
) -> Callable[[list[Any], PipelineConfig], ActorPools]:
    """What makes a watch's tailers around the workers a private Ray started."""

    def make(workers: list[Any], cfg: PipelineConfig) -> ActorPools:
        from rlstream.runtime.pools import ActorPools

        pools = ActorPools(roots, out, cfg, rt, hooks_factory, watch=True, workers=workers)
        pools.ready()
        return pools

    return make
