"""`ActorPools`: the tailer and worker actors of a Ray run, and which tailer owns which
run (not the fleet view, which is `rlstream.fleet`); their sizes are `RuntimeConfig`.

It is one of the two holders of runs the driver loop drives (`runtime/driver.py`; the
other is `runtime/held.py`). `ActorPools` creates its tailer actors first and its worker actors next, without waiting
for either: the driver's first call to a tailer waits for it, and a tailer's first
units wait for the workers. Runs found by the driver go to the tailer their cohort
(else their URL) hashes to (`pipeline.shards.Sharder`); a tailer that died is
restarted by Ray and given its runs again, which it resumes from their resume states.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections import Counter
from collections.abc import Sequence
from typing import Any

import ray

from rlstream.config import PipelineConfig
from rlstream.io.storage import Storage
from rlstream.pipeline.discover import find_runs, normalize_root
from rlstream.pipeline.local import input_storage
from rlstream.pipeline.outcome import Outcome
from rlstream.pipeline.shards import Sharder
from rlstream.runtime.actors import Tailer, Worker
from rlstream.runtime.cluster import cluster_cpus, forwarded_env
from rlstream.runtime.executors import OBJECT_STORE_UNITS_PER_WORKER
from rlstream.runtime.progress import Progress
from rlstream.runtime.sizes import RuntimeConfig, default_tailers

log = logging.getLogger("rlstream")


class ActorPools:
    """The actor pools and which tailer owns which run."""

    def __init__(
        self,
        roots: Sequence[str],
        out: str,
        cfg: PipelineConfig,
        rt: RuntimeConfig,
        hooks_factory: Any = None,
        watch: bool = True,
        workers: list[Any] | None = None,
    ) -> None:
        self.roots = [normalize_root(r) for r in roots]
        self.storage = input_storage(
            self.roots, cfg.storage_options, cfg.read_inflight_bytes, cfg.max_file_bytes
        )
        self.input_format = cfg.input_format
        out_url = normalize_root(out)
        out_storage = Storage.for_url(out_url, cfg.storage_options)
        # AWS_* of this process go to every actor, wherever it runs.
        env = {"runtime_env": {"env_vars": forwarded_env()}} if forwarded_env() else {}
        # On an object store a worker runs a few units at once, so that their round
        # trips overlap (each unit's reads are already concurrent within it).
        units_at_once = 1 if self.storage.is_local else OBJECT_STORE_UNITS_PER_WORKER
        self.workers = workers or [
            Worker.options(**env, max_concurrency=units_at_once).remote(self.storage)
            for _ in range(rt.workers or cluster_cpus())
        ]
        self.n_tailers = rt.tailers or default_tailers(len(self.workers), watch)
        self._spawn = lambda: Tailer.options(**env).remote(
            self.storage, out_url, out_storage, cfg, hooks_factory
        )
        self.tailers = [self._spawn() for _ in range(self.n_tailers)]
        # Not waited for: a tailer runs its calls in order, and the first answer the
        # driver waits for (`ready`, `discover`) tells whether it started.
        for t in self.tailers:
            t.set_workers.remote(self.workers)
        self.sharder = Sharder(self.storage, hooks_factory, self.n_tailers)
        self.owned: set[str] = set()
        self.assigned: list[list[str]] = [[] for _ in self.tailers]
        self.tailer_restarts = 0
        self.worker_restarts = 0
        self._pids: dict[int, int] = {}
        self.carried: Counter[str] = Counter()
        """Totals of the work the driver did before the tailers took over."""
        self._pid_refs: dict[Any, int] = {}
        self.done: list[dict[str, Any]] = []
        """Summaries of the runs `drain` analysed."""

    def _call(self, method: str, *args: Any) -> list[Any]:
        """Call every tailer; a tailer that died is restarted by Ray, so give the new
        instance its workers and runs again (it resumes them from their resume states)
        and call it once more."""
        refs = [getattr(t, method).remote(*args) for t in self.tailers]
        out = []
        for i, ref in enumerate(refs):
            try:
                out.append(ray.get(ref))
            except ray.exceptions.RayError as e:
                if not _gone(e):
                    raise
                log.warning(
                    "tailer %d died (%s); restoring its %d runs", i, e, len(self.assigned[i])
                )
                self.tailer_restarts += 1
                out.append(self._restore(i, method, args))
        return out

    def _restore(self, i: int, method: str, args: tuple[Any, ...]) -> Any:
        """Give restarted tailer `i` its workers and runs, then call `method` again. A
        tailer that cannot be restarted (its node died) is replaced by a new one."""

        def call() -> Any:
            t = self.tailers[i]
            try:
                ray.get(t.set_workers.remote(self.workers))
                ray.get(t.add_runs.remote(self.assigned[i]))  # runs it has are skipped
                return ray.get(getattr(t, method).remote(*args))
            except _UNPLACEABLE:
                log.warning("tailer %d cannot be restarted; starting a new one", i)
                t = self.tailers[i] = self._spawn()
                raise

        return _once_up(call)

    def ready(self) -> None:
        """Wait until every tailer has started (raises if one could not)."""
        ray.get([t.run_urls.remote() for t in self.tailers])

    def discover(self) -> int:
        """Find runs under every root and hand new ones to their tailers."""
        return self.adopt(
            [u for root in self.roots for u in find_runs(self.storage, root, fmt=self.input_format)]
        )

    def adopt(self, urls: Sequence[str]) -> int:
        """Hand the runs of `urls` not owned yet to their tailers, which resume each
        from its resume state if it has one; returns how many were added."""
        found = [u for u in dict.fromkeys(urls) if u not in self.owned]
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

    def drain(self, urls: Sequence[str], progress: Progress | None = None) -> bool:
        """The driver loop's step in `analyze`: every tailer reads its shard of `urls`
        to its end, a chunk at a time, all in parallel; nothing is left after it
        (`done` holds the runs' summaries)."""
        shards = self.sharder.split(list(urls))
        refs = [t.analyze.remote(urls) for t, urls in zip(self.tailers, shards, strict=True)]
        total = sum(len(s) for s in shards)
        while len(ray.wait(refs, num_returns=len(refs), timeout=1.0)[0]) < len(refs):
            self._show(progress, total)
        self._show(progress, total, final=True)
        out: list[dict[str, Any]] = []
        for i, ref in enumerate(refs):
            try:
                out.extend(ray.get(ref))
            except ray.exceptions.RayError as e:
                if not _gone(e):
                    raise
                # Runs already committed resume from their resume states: only what
                # the dead tailer had not committed is read again.
                log.warning("tailer %d died (%s); analysing its shard again", i, e)
                self.tailer_restarts += 1
                out.extend(self._restore(i, "analyze", (shards[i],)))
        self.done = sorted(out, key=lambda s: s["run_id"])
        return True

    def __len__(self) -> int:
        return len(self.owned)

    def successor(self, outcome: Outcome | None) -> None:
        """The runs stay here (`HeldRuns` hands its runs over to an `ActorPools`)."""
        return None

    def pause(self, seconds: float, told: threading.Event) -> None:
        told.wait(seconds)

    def actor_counts(self) -> tuple[int, int, int]:
        """Workers, worker restarts, tailer restarts (for `MetricsExporter.on_commit`)."""
        return len(self.workers), self.check_workers(), self.tailer_restarts

    def _show(self, progress: Progress | None, runs: int, final: bool = False) -> None:
        if progress is None:
            return
        # A tailer that died answers nothing: `analyze` retries its shard.
        with contextlib.suppress(ray.exceptions.RayError):
            progress.show(self.totals(), runs, final)

    def totals(self) -> dict[str, int]:
        out: dict[str, int] = dict(self.carried)
        for got in ray.get([t.progress.remote() for t in self.tailers]):
            for k, v in got.items():
                out[k] = out.get(k, 0) + v
        return out

    def poll(self, final: bool = False) -> list[dict[str, int]]:
        return self._call("poll", final)

    def commit(self) -> int:
        return sum(self._call("commit"))

    def summaries(self) -> list[dict[str, Any]]:
        held = [s for got in self._call("summaries") for s in got]
        return sorted(self.done + held, key=lambda s: s["run_id"])

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


def _once_up(call: Any, wait: float = 120.0) -> Any:
    """`call()` (calls to one restarted actor), made again while Ray is still
    restarting it (such calls fail at once, `ActorUnavailableError`) until it answers
    or `wait` seconds have passed. A call that ran a while before it failed (its actor
    lost again, mid-work) starts the wait afresh."""
    deadline = time.monotonic() + wait
    pause = 0.05
    while True:
        started = time.monotonic()
        try:
            return call()
        except ray.exceptions.RayError as e:
            now = time.monotonic()
            if now - started > 5.0:
                deadline, pause = now + wait, 0.05
            if not _gone(e) or now > deadline:
                raise
            time.sleep(pause)
            pause = min(2 * pause, 1.0)


_UNPLACEABLE = (ray.exceptions.ActorDiedError, ray.exceptions.ActorUnschedulableError)
"""A tailer that will not come back: its node died (it was pinned there) or it was
killed for good."""


def _gone(e: Exception) -> bool:
    """Whether a call failed because its actor is gone (dead or restarting), or
    because the actor's node is going: its own calls into Ray fail (an `OSError` or
    a Ray error inside the method). Any other error is the method's own and is raised."""
    if isinstance(e, (ray.exceptions.RayActorError, ray.exceptions.ActorUnschedulableError)):
        return True
    cause = getattr(e, "cause", None)
    return isinstance(e, ray.exceptions.RayTaskError) and isinstance(
        cause, (OSError, ray.exceptions.RayError)
    )
