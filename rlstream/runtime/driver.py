"""The driver: discovery, the poll/commit loop on Ray, progress, clean shutdown.

`run(...)` is both commands. `analyze` (watch=False) discovers runs, polls each
tailer once with `final=True` (everything that exists is read and every step row
finalized), commits and returns. `watch` (watch=True) polls every `poll_seconds`,
commits every `commit_seconds`, rediscovers runs so that new ones join, and stops
cleanly after a final commit on Ctrl-C (or when `stop()` returns True).
"""

from __future__ import annotations

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
from rlstream.pipeline.local import input_storage
from rlstream.pipeline.runner import run_key
from rlstream.runtime.actors import Tailer, Worker
from rlstream.runtime.cluster import RayConfig, cluster_cpus, connect, forwarded_env

log = logging.getLogger("rlstream")


@dataclass(frozen=True)
class RuntimeConfig:
    """Sizes of the actor pools and how discovery repeats."""

    workers: int | None = None
    """Worker actors; default: the cluster's CPUs."""
    tailers: int | None = None
    """Tailer actors; default: one per 50 runs, at least 1, at most the workers."""
    discover_every_seconds: float = 10.0
    ray: RayConfig = field(default_factory=RayConfig)


class Progress:
    """One refreshed line on a terminal; a log line every 10 s otherwise."""

    def __init__(self, out: TextIO, enabled: bool = True) -> None:
        self.out = out
        self.tty = out.isatty()
        self.enabled = enabled
        self.start = time.monotonic()
        self.last_log = 0.0
        self.totals = {"bytes": 0, "tokens": 0, "rows": 0}

    def update(self, runs: int, stats: list[dict[str, int]]) -> None:
        for s in stats:
            for k in self.totals:
                self.totals[k] += s.get(k, 0)
        if not self.enabled:
            return
        el = max(time.monotonic() - self.start, 1e-9)
        t = self.totals
        line = (
            f"runs {runs}  rows {t['rows']}  {t['bytes'] / 1e6:.1f} MB  "
            f"{t['tokens']:,} tokens  {t['tokens'] / el:,.0f} tokens/s"
        )
        if self.tty:
            self.out.write("\r" + line.ljust(100))
            self.out.flush()
        elif time.monotonic() - self.last_log >= 10:
            self.last_log = time.monotonic()
            log.info(line)

    def close(self) -> None:
        if self.enabled and self.tty:
            self.out.write("\n")


class Fleet:
    """The actor pools and which tailer owns which run."""

    def __init__(
        self,
        roots: Sequence[str],
        out: str,
        cfg: PipelineConfig,
        rt: RuntimeConfig,
        hooks_factory: Any = None,
    ) -> None:
        self.roots = [normalize_root(r) for r in roots]
        self.storage = input_storage(self.roots, cfg.storage_options)
        out_url = normalize_root(out)
        out_storage = Storage.for_url(out_url, cfg.storage_options)
        n_workers = rt.workers or cluster_cpus()
        # AWS_* of this process go to every actor, wherever it runs.
        env = {"runtime_env": {"env_vars": forwarded_env()}} if forwarded_env() else {}
        self.workers = [Worker.options(**env).remote(self.storage) for _ in range(n_workers)]
        self.n_tailers = rt.tailers or 1
        self.tailers = [
            Tailer.options(**env).remote(self.storage, out_url, out_storage, cfg, hooks_factory)
            for _ in range(self.n_tailers)
        ]
        ray.get([t.set_workers.remote(self.workers) for t in self.tailers])
        self.owned: set[str] = set()
        self.assigned: list[list[str]] = [[] for _ in self.tailers]

    def _call(self, method: str, *args: Any) -> list[Any]:
        """Call every tailer; a tailer that died is restarted by Ray, so give the new
        instance its workers and runs again (it resumes them from their checkpoints)
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
                t = self.tailers[i]
                ray.get(t.set_workers.remote(self.workers))
                ray.get(t.add_runs.remote(self.assigned[i]))
                out.append(ray.get(getattr(t, method).remote(*args)))
        return out

    def discover(self) -> int:
        """Find runs under every root and hand new ones to their tailers."""
        found: list[str] = []
        for root in self.roots:
            found.extend(u for u in find_runs(self.storage, root) if u not in self.owned)
        if not found:
            return 0
        shards: dict[int, list[str]] = {}
        for url in found:
            shards.setdefault(int(run_key(url), 16) % self.n_tailers, []).append(url)
        refs = {i: self.tailers[i].add_runs.remote(urls) for i, urls in shards.items()}
        added = []
        for i, ref in refs.items():
            got = ray.get(ref)
            self.assigned[i].extend(got)
            added.extend(got)
        # Runs that could not be added (bad run.json) are retried on the next discovery.
        self.owned.update(added)
        return len(added)

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

    def close(self) -> None:
        for a in [*self.tailers, *self.workers]:
            ray.kill(a)


def _sigterm_as_interrupt() -> None:
    """SIGTERM (Kubernetes, `timeout`, systemd) stops like Ctrl-C: after a final commit."""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        return

    def handler(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, handler)


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
) -> list[dict[str, Any]]:
    """Run analyze (watch=False) or watch on Ray; returns per-run summaries."""
    if hooks_factory is None:
        from rlstream.pipeline.verdicts import health_hooks

        hooks_factory = health_hooks
    started = connect(rt.ray)
    _sigterm_as_interrupt()
    fleet = None
    progress = Progress(progress_out or sys.stderr, enabled=progress_out is not None or watch)
    try:
        fleet = Fleet(roots, out, cfg, rt, hooks_factory)
        fleet.discover()
        if not watch:
            progress.update(len(fleet.owned), fleet.poll(final=True))
            fleet.commit()
            return fleet.summaries()
        last_commit = last_discover = time.monotonic()
        try:
            while not (stop and stop()):
                t0 = time.monotonic()
                progress.update(len(fleet.owned), fleet.poll())
                if t0 - last_discover >= rt.discover_every_seconds:
                    fleet.discover()
                    last_discover = t0
                if t0 - last_commit >= cfg.commit_seconds:
                    fleet.commit()
                    last_commit = t0
                    if exit_when_finished and fleet.all_finished():
                        break
                time.sleep(max(0.0, cfg.poll_seconds - (time.monotonic() - t0)))
        except KeyboardInterrupt:
            log.info("interrupted: committing before exit")
        fleet.poll()
        fleet.commit()
        return fleet.summaries()
    finally:
        progress.close()
        if fleet is not None:
            fleet.close()
        if started:
            ray.shutdown()
