"""The driver: discovery, the poll/commit loop on Ray, progress, clean shutdown.

`run(...)` is both commands. `analyze` (watch=False) discovers runs; on a Ray it
starts itself it works while Ray starts (runtime/batch.py), else it has each tailer
read its runs to the end and finalize every step row. `watch` polls every `poll_seconds`,
commits every `commit_seconds`, rediscovers runs so that new ones join, maintains
OUT's tables every `maintenance.every_seconds` in a thread (runtime/maintenance.py),
and stops cleanly after a final commit on Ctrl-C (or when `stop()` returns True).
`analyze` ends with one maintenance pass.
"""

from __future__ import annotations

import contextlib
import logging
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, TextIO

import ray

from rlstream.config import PipelineConfig
from rlstream.io.storage import Storage
from rlstream.pipeline.discover import find_runs, normalize_root
from rlstream.pipeline.local import input_storage, runs_or_fail
from rlstream.pipeline.outcome import Outcome
from rlstream.pipeline.shards import Sharder
from rlstream.runtime import batch
from rlstream.runtime.actors import OBJECT_STORE_UNITS_PER_WORKER, Tailer, Worker
from rlstream.runtime.cluster import (
    RayConfig,
    cluster_cpus,
    connect,
    disconnect,
    forwarded_env,
    private_ray,
)
from rlstream.runtime.maintenance import Maintainer
from rlstream.runtime.progress import Progress
from rlstream.sinks.delta import DeltaSink
from rlstream.sinks.maintain import MaintenanceConfig

log = logging.getLogger("rlstream")

COMMIT_LOG_EVERY = 10
COMMIT_LOG = (
    "commits: mean %.3f s, max %.3f s over the last %d (%d run commits, %d step rows); "
    "polls: mean %.3f s, max %.3f s over %d"
)
"""Once per this many commits a watch logs its commits' and polls' mean and max time
(a poll longer than `--poll` means the watch is behind)."""


@dataclass(frozen=True)
class RuntimeConfig:
    """Sizes of the actor pools and how discovery repeats."""

    workers: int | None = None
    """Worker actors; default: the cluster's CPUs."""
    tailers: int | None = None
    """Tailer actors; default (`default_tailers`): for watch as many as workers, at
    most 4 (polls and commits of different shards then run in parallel); for analyze
    one per 8 workers, at most 4."""
    discover_every_seconds: float = 10.0
    ray: RayConfig = field(default_factory=RayConfig)
    maintenance: MaintenanceConfig = field(default_factory=MaintenanceConfig)
    early_start: bool | None = None
    """analyze in the driver, working while Ray starts (runtime/batch.py); None: auto."""


def default_tailers(workers: int, watch: bool) -> int:
    """Tailers when none are asked for. A watch polls every run every poll, so its
    shards are polled in parallel. In batch work a tailer only hands out units and
    folds their results, about a tenth of a worker's CPU (bench/README.md): one feeds
    8 workers, and on 2 cores a second one only takes CPU from the workers."""
    return min(4, workers if watch else -(-workers // 8))


class Fleet:
    """The actor pools and which tailer owns which run."""

    def __init__(
        self,
        roots: Sequence[str],
        out: str,
        cfg: PipelineConfig,
        rt: RuntimeConfig,
        hooks_factory: Any = None,
        watch: bool = True,
    ) -> None:
        self.roots = [normalize_root(r) for r in roots]
        self.storage = input_storage(self.roots, cfg.storage_options, cfg.read_inflight_bytes)
        self.input_format = cfg.input_format
        out_url = normalize_root(out)
        out_storage = Storage.for_url(out_url, cfg.storage_options)
        n_workers = rt.workers or cluster_cpus()
        # AWS_* of this process go to every actor, wherever it runs.
        env = {"runtime_env": {"env_vars": forwarded_env()}} if forwarded_env() else {}
        # On an object store a worker runs a few units at once, so that their round
        # trips overlap (each unit's reads are already concurrent within it).
        units_at_once = 1 if self.storage.is_local else OBJECT_STORE_UNITS_PER_WORKER
        self.workers = [
            Worker.options(**env, max_concurrency=units_at_once).remote(self.storage)
            for _ in range(n_workers)
        ]
        self.n_tailers = rt.tailers or default_tailers(n_workers, watch)
        self.tailers = [
            Tailer.options(**env).remote(self.storage, out_url, out_storage, cfg, hooks_factory)
            for _ in range(self.n_tailers)
        ]
        ray.get([t.set_workers.remote(self.workers) for t in self.tailers])
        self.sharder = Sharder(self.storage, hooks_factory, self.n_tailers)
        self.owned: set[str] = set()
        self.assigned: list[list[str]] = [[] for _ in self.tailers]
        self.tailer_restarts = 0
        self.worker_restarts = 0
        self._pids: dict[int, int] = {}
        self._pid_refs: dict[Any, int] = {}

    def _call(self, method: str, *args: Any) -> list[Any]:
        """Call every tailer; a tailer that died is restarted by Ray, so give the new
        instance its workers and runs again (it resumes them from their resume states)
        and call it once more."""
        refs = [getattr(t, method).remote(*args) for t in self.tailers]
        out = []
        for i, ref in enumerate(refs):
            try:
                out.append(ray.get(ref))
            except ray.exceptions.RayActorError as e:
                log.warning(
                    "tailer %d died (%s); restoring its %d runs", i, e, len(self.assigned[i])
                )
                self.tailer_restarts += 1
                t = self.tailers[i]
                ray.get(t.set_workers.remote(self.workers))
                ray.get(t.add_runs.remote(self.assigned[i]))
                out.append(ray.get(getattr(t, method).remote(*args)))
        return out

    def discover(self) -> int:
        """Find runs under every root and hand new ones to their tailers."""
        found: list[str] = []
        for root in self.roots:
            found.extend(
                u
                for u in find_runs(self.storage, root, fmt=self.input_format)
                if u not in self.owned
            )
        if not found:
            return 0
        shards = dict(enumerate(self.sharder.split(found)))  # a cohort's runs: one tailer
        refs = {i: self.tailers[i].add_runs.remote(urls) for i, urls in shards.items() if urls}
        added = []
        for i, ref in refs.items():
            got = ray.get(ref)
            self.assigned[i].extend(got)
            added.extend(got)
        # Runs that could not be added (bad run.json) are retried on the next discovery.
        self.owned.update(added)
        return len(added)

    def analyze(
        self, progress: Progress | None = None, urls: Sequence[str] | None = None
    ) -> list[dict[str, Any]]:
        """Batch mode: every tailer reads its shard of the runs (`urls`, default: found
        under the roots now) a chunk at a time."""
        if urls is None:
            urls = [
                u
                for root in self.roots
                for u in find_runs(self.storage, root, fmt=self.input_format)
            ]
        shards = self.sharder.split(urls)
        refs = [t.analyze.remote(urls) for t, urls in zip(self.tailers, shards, strict=True)]
        total = sum(len(s) for s in shards)
        while len(ray.wait(refs, num_returns=len(refs), timeout=1.0)[0]) < len(refs):
            self._show(progress, total)
        self._show(progress, total)
        out: list[dict[str, Any]] = []
        for i, ref in enumerate(refs):
            for attempt in range(3):
                try:
                    out.extend(ray.get(ref))
                    break
                except ray.exceptions.RayError as e:
                    if attempt == 2:
                        raise
                    # Runs already committed resume from their resume states: only what
                    # the dead tailer had not committed is read again.
                    log.warning("tailer %d failed (%s); analysing its shard again", i, e)
                    ray.get(self.tailers[i].set_workers.remote(self.workers))
                    ref = self.tailers[i].analyze.remote(shards[i])
        return sorted(out, key=lambda s: s["run_id"])

    def _show(self, progress: Progress | None, runs: int) -> None:
        if progress is None:
            return
        # A tailer that died answers nothing: `analyze` retries its shard.
        with contextlib.suppress(ray.exceptions.RayError):
            progress.show(self.totals(), runs)

    def totals(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for got in ray.get([t.progress.remote() for t in self.tailers]):
            for k, v in got.items():
                out[k] = out.get(k, 0) + v
        return out

    def poll(self, final: bool = False) -> list[dict[str, int]]:
        return self._call("poll", final)

    def commit(self) -> int:
        return sum(self._call("commit"))

    def summaries(self) -> list[dict[str, Any]]:
        return sorted(
            (s for got in self._call("summaries") for s in got), key=lambda s: s["run_id"]
        )

    def all_finished(self) -> bool:
        return bool(self.owned) and all(self._call("all_finished"))

    def tally(self, outcome: Outcome) -> None:
        for got in self._call("tally"):
            outcome.add_tally(got)

    def check_workers(self) -> int:
        """Count worker restarts: Ray restarts a dead worker in a new process, so its
        pid changes. Never blocks: answers not ready yet are read on a later call (a
        busy worker answers after its queued units)."""
        asked = set(self._pid_refs.values())
        for i, w in enumerate(self.workers):
            if i not in asked:
                self._pid_refs[w.info.remote()] = i
        ready, _ = ray.wait(list(self._pid_refs), num_returns=len(self._pid_refs), timeout=0)
        for ref in ready:
            i = self._pid_refs.pop(ref)
            try:
                pid = ray.get(ref)["pid"]
            except ray.exceptions.RayError:
                continue
            if self._pids.get(i, pid) != pid:
                self.worker_restarts += 1
            self._pids[i] = pid
        return self.worker_restarts

    def close(self) -> None:
        for a in [*self.tailers, *self.workers]:
            ray.kill(a)


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
    out_url = normalize_root(out)
    out_storage = Storage.for_url(out_url, cfg.storage_options)
    sink = DeltaSink(out_url, out_storage, cfg.storage_options, cfg.fsync, cfg.retention_seconds)
    sink.check_layout()
    maintainer = Maintainer(sink, rt.maintenance)
    previous_sigterm = _sigterm_as_interrupt()
    fleet, started = None, False
    progress = Progress(progress_out or sys.stderr, enabled=progress_out is not None)
    try:
        if urls is not None and batch.wanted(rt.early_start, rt.ray):
            start = batch.RayStart(rt.ray, storage, rt.workers)  # work begins while it starts
            return batch.analyze(
                urls, storage, sink, cfg, start, maintainer, hooks_factory, progress, outcome
            )
        t_start = time.monotonic()
        started = connect(rt.ray)
        t_ray = time.monotonic()
        fleet = Fleet(roots, out, cfg, rt, hooks_factory, watch=watch)
        t_actors = time.monotonic()
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
            log.info("analyzed %d runs in %.1f s", len(summaries), time.monotonic() - t_actors)
            if outcome is not None:
                fleet.tally(outcome)
                outcome.add_summaries(summaries)
            maintainer.run_once()
            return summaries
        fleet.discover()
        maintainer.start()
        last_commit = last_discover = time.monotonic()
        commit_times: list[float] = []
        poll_times: list[float] = []
        work = [0, 0]  # run commits and step rows since the last log line; rows at it
        try:
            while not (stop and stop()):
                t0, wall = time.monotonic(), time.time()
                fleet.poll()
                poll_times.append(time.monotonic() - t0)
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
    finally:
        maintainer.stop()
        progress.close()
        if fleet is not None:
            fleet.close()
        if started:
            t_stop = time.monotonic()
            disconnect()
            log.info("Ray stopped in %.1f s", time.monotonic() - t_stop)
        if previous_sigterm is not None:
            import signal

            signal.signal(signal.SIGTERM, previous_sigterm)
