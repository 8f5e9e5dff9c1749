"""The executors: where a `RunGroup`'s work units run (`pipeline.runner.Executor`:
units in, results out as they complete, each once).

- **In this process**: `pipeline.local.local_executor`, or a `WorkerPool` whose
  `workers()` never returns any (an `analyze` that does not start Ray).
- **A private Ray**: a `WorkerPool` over `RayStart.workers` while `RayStart` starts
  Ray and the worker actors in a thread. Until they have answered, it runs units in
  this process (the early start); then it sends every unit not yet taken to them.
- **Worker processes on this machine** (`runtime.processes.LocalStart`): a
  `WorkerPool` over them, the same way: units here until they answered.
- **A joined cluster** (and a tailer actor on either Ray): a `WorkerPool` over the
  worker handles it was given.

How the pool sends a batch to a worker and collects its answer is a `Calls`:
`RAY_CALLS` for Ray actors, `runtime.processes.PROCESS_CALLS` for worker processes.

`WorkerPool` is the one least-loaded dispatch: at most `max_inflight` units in
flight, each call to the worker with the fewest; when many units wait, several go in
one call (`WorkerPool._batch`). Every unit is taken from one queue by the
calling thread exactly once and its result is yielded once: running units here
before the workers are ready never counts anything twice. A unit that failed (here
or on Ray) is retried by `RunGroup.poll` like any other.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Callable, Iterator
from typing import Any, Protocol

from rlstream.errors import RlstreamError
from rlstream.io.storage import Storage
from rlstream.pipeline.work import Unit, UnitFailure, UnitResult, execute
from rlstream.runtime.cluster import RayConfig, starts_private
from rlstream.runtime.start import BackgroundStart

log = logging.getLogger("rlstream")


OBJECT_STORE_UNITS_PER_WORKER = 4
"""Calls a Worker runs at once (threads) when it reads an object store: a unit waits
on round trips (a range GET, a window of transcript GETs) that the others' parsing
overlaps. Local disk: one at a time. Worker memory is this many calls' peak."""

START_NOW_TRANSCRIPTS = 2000
"""A plan with more transcripts than this in its first chunk (or more than one
chunk) starts Ray at once: the driver alone would take longer than the delay
(`RuntimeConfig.start_ray_after`)."""

WORK_HERE_TOO = False
"""Whether the driver keeps running units once the workers are ready; if so, the
default pool is one worker fewer than the cluster's CPUs (bench/README.md)."""


def wanted(early_start: bool | None, ray_cfg: RayConfig) -> bool:
    """Whether `analyze` runs here (`RuntimeConfig.early_start`; None: when this
    command starts a private Ray, whose start is the cost to hide)."""
    return starts_private(ray_cfg) if early_start is None else early_start


class _NoSigtermWarning(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return "SIGTERM handler is not set" not in record.getMessage()


class RayStart(BackgroundStart):
    """Connects to Ray (a private one unless `ray_cfg` names a cluster) and starts
    `n_workers` worker actors (default: the cluster's CPUs, one fewer with
    `WORK_HERE_TOO`) in a thread (`runtime.start.BackgroundStart`: Ray's processes
    die with the thread that started them, so the same thread stops them).

    `workers()`: the ready workers, or None (still starting, or stopping); raises
    `RlstreamError` if the start failed. `then`, if given, is called in the thread
    with the worker handles as soon as they are asked for (not yet ready), and may
    start more actors and wait for them; its result is `made`, and `workers()` stays
    None until it returned. `stop()` stops the workers and the Ray this object
    started in the background (after the start, if it is still under way);
    `join()` waits for that. With `delay`, Ray is started only once that many
    seconds passed without a `stop()` (or at `now()`): work the driver finishes
    sooner starts no Ray. With `delay` None, Ray starts only at `now()`; `stop()`
    before that starts none."""

    def __init__(
        self,
        ray_cfg: RayConfig,
        storage: Storage,
        n_workers: int | None,
        then: Callable[[list[Any]], Any] | None = None,
        delay: float | None = 0.0,
    ) -> None:
        self.ray_cfg = ray_cfg
        self.storage = storage
        self.n_workers = n_workers
        self.then = then
        self.made: Any = None
        self.started = False
        self._ready: list[Any] | None = None
        self._actors: list[Any] = []
        super().__init__(delay, "rlstream-ray")

    def _start(self) -> None:
        from rlstream.runtime.cluster import cluster_cpus, connect, forwarded_env

        # Ray warns that it sets no SIGTERM handler off the main thread: the
        # driver's own (Ctrl-C and SIGTERM stop like an interrupt) is the one wanted.
        logging.getLogger("ray._private.worker").addFilter(_NoSigtermWarning())
        self.started = connect(self.ray_cfg)
        self.phases["ray"] = time.monotonic() - self._t0
        if self._stopping.is_set():
            return
        import ray

        from rlstream.runtime.actors import Worker

        env = {"runtime_env": {"env_vars": forwarded_env()}} if forwarded_env() else {}
        at_once = 1 if self.storage.is_local else OBJECT_STORE_UNITS_PER_WORKER
        n = self.n_workers or max(1, cluster_cpus() - WORK_HERE_TOO)
        self._actors = [
            Worker.options(**env, max_concurrency=at_once).remote(self.storage) for _ in range(n)
        ]
        if self._stopping.is_set():
            return  # no one will use them: not worth waiting for
        if self.then is not None:
            self.made = self.then(self._actors)
        ray.get([w.info.remote() for w in self._actors])
        self.phases["workers"] = time.monotonic() - self._t0
        self._ready = self._actors

    def workers(self) -> list[Any] | None:
        if self.error is not None:
            raise RlstreamError(f"Ray or its workers did not start: {self.error!r}") from self.error
        return None if self._stopping.is_set() else self._ready

    def _stop(self) -> None:
        try:
            import ray

            if self.made is not None and hasattr(self.made, "close"):
                self.made.close()  # what `then` started (a watch's tailers) and the workers
            else:
                for a in self._actors:
                    ray.kill(a)
            if self.started:
                from rlstream.runtime.cluster import disconnect

                disconnect()
        except Exception:
            log.exception("stopping Ray")


def run_unit(unit: Unit, storage: Storage | None, where: str) -> UnitResult | UnitFailure:
    """`execute`, with an error of the unit (storage, most often) its `UnitFailure`:
    `RunGroup.poll` retries it, and the units run with it still count."""
    try:
        return execute(unit, storage)
    except Exception as e:
        log.error("unit for run %s failed in %s: %r", unit.run_id, where, e)
        return UnitFailure(unit, repr(e))


class Calls(Protocol):
    """How `WorkerPool` talks to its workers: `send` a batch of units to one (a
    ticket back), `wait` for tickets whose answer is there (at least one when
    `block`), `get` a ticket's results; `get` raises one of `errors` when the call
    failed for good (its worker is lost)."""

    errors: tuple[type[BaseException], ...]

    def send(self, worker: Any, batch: list[Unit]) -> Any: ...

    def wait(self, tickets: list[Any], block: bool) -> list[Any]: ...

    def get(self, ticket: Any) -> list[UnitResult | UnitFailure]: ...


class RayCalls:
    """`Calls` for Ray worker actors: a ticket is the call's ObjectRef."""

    @property
    def errors(self) -> tuple[type[BaseException], ...]:
        import ray

        return (ray.exceptions.RayError,)

    @staticmethod
    def send(worker: Any, batch: list[Unit]) -> Any:
        return worker.execute_many.remote(batch)

    @staticmethod
    def wait(tickets: list[Any], block: bool) -> list[Any]:
        import ray

        ready, _ = ray.wait(tickets, num_returns=1, timeout=None if block else 0)
        return ready

    @staticmethod
    def get(ticket: Any) -> list[UnitResult | UnitFailure]:
        import ray

        return ray.get(ticket)


RAY_CALLS = RayCalls()


MAX_BATCH = 8
"""At most this many units are sent to a worker in one call (`WorkerPool._batch`)."""


class WorkerPool:
    """An executor (`pipeline.runner.Executor`) that runs units in this process
    while `workers()` returns none, else on the workers (at most `max_inflight`
    at once, least-loaded first), and with `here_too` in this process as well,
    between folds. `last` set before a call: when that call's units are all
    folded, `on_drained` is called (the driver stops Ray there). `on_first` sees the
    first call's units (the plan `analyze` chooses its placement from); it may
    `use` other workers from then on. `calls` says how to reach the workers
    (`RAY_CALLS` by default)."""

    def __init__(
        self,
        storage: Storage | None,
        workers: Callable[[], list[Any] | None],
        max_inflight: int,
        on_result: Callable[[], None] | None = None,
        on_drained: Callable[[], None] | None = None,
        here_too: bool = False,
        on_first: Callable[[list[Unit]], None] | None = None,
        calls: Calls = RAY_CALLS,
    ) -> None:
        self.storage = storage
        self.here_too = here_too
        self.on_first = on_first
        self.workers = workers
        self.max_inflight = max(1, max_inflight)
        self.on_result = on_result
        self.on_drained = on_drained
        self.calls = calls
        self.last = False
        self.counts = {"here": 0, "workers": 0}

    def use(
        self, workers: Callable[[], list[Any] | None], calls: Calls, on_drained: Callable[[], None]
    ) -> None:
        """Dispatch to these workers from now on (`on_first` chose them)."""
        self.workers, self.calls, self.on_drained = workers, calls, on_drained

    def __call__(self, units: list[Unit]) -> Iterator[UnitResult | UnitFailure]:
        first, self.on_first = self.on_first, None
        if first is not None:
            first(units)
        todo = deque(units)
        inflight: dict[Any, tuple[list[Unit], int]] = {}
        load: dict[int, int] = {}  # units in flight per worker (by identity: the pool can shrink)
        while todo or inflight:
            pool = self.workers()
            while pool and todo and sum(load.values()) < self.max_inflight:
                n = self._batch(len(todo), len(pool))
                n = min(n, self.max_inflight - sum(load.values()))
                batch = [todo.popleft() for _ in range(n)]
                worker = min(pool, key=lambda w: load.get(id(w), 0))
                load[id(worker)] = load.get(id(worker), 0) + n
                inflight[self.calls.send(worker, batch)] = (batch, id(worker))
            here = bool(todo) and (not pool or self.here_too)
            if inflight:
                yield from self._collect(inflight, load, block=not here)
            if here and todo:
                yield self._here(todo.popleft())
        if self.last and self.on_drained is not None:
            self.on_drained()

    def _collect(
        self, inflight: dict[Any, tuple[list[Unit], int]], load: dict[int, int], block: bool
    ) -> Iterator[UnitResult | UnitFailure]:
        calls = self.calls
        for ticket in calls.wait(list(inflight), block):
            batch, w = inflight.pop(ticket)
            load[w] -= len(batch)
            try:
                got: list[UnitResult | UnitFailure] = calls.get(ticket)
            except calls.errors as e:
                runs = sorted({u.run_id for u in batch})
                log.error("%d units of runs %s failed after retries: %s", len(batch), runs, e)
                got = [UnitFailure(u, repr(e)) for u in batch]
            for res in got:
                self.counts["workers"] += 1
                self._tick()
                yield res

    def _batch(self, waiting: int, workers: int) -> int:
        """Units per call: one while the queue is short; when many wait (a live poll
        of many runs, each a small unit) up to `MAX_BATCH`, still leaving each of a
        worker's threads two calls in flight so none waits for the next."""
        local = self.storage is None or self.storage.is_local
        calls = 2 * workers * (1 if local else OBJECT_STORE_UNITS_PER_WORKER)
        return max(1, min(MAX_BATCH, self.max_inflight // calls, waiting // calls))

    def _here(self, unit: Unit) -> UnitResult | UnitFailure:
        res = run_unit(unit, self.storage, "the driver")
        self.counts["here"] += 1
        self._tick()
        return res

    def _tick(self) -> None:
        if self.on_result is not None:
            self.on_result()


def phases_text(ph: dict[str, float]) -> str:
    """`RayStart.phases` in words, saying which phases the work ended before."""
    if "ray" not in ph:
        said = ["no Ray up while the work ran"]
    elif "workers" not in ph:
        said = [f"Ray up after {ph['ray']:.1f} s", "the work ended before the workers were ready"]
    else:
        said = [f"Ray up after {ph['ray']:.1f} s", f"workers after {ph['workers']:.1f} s"]
    if "stop" in ph:
        said.append(f"stopped in {ph['stop']:.1f} s")
    return ", ".join(said)
