"""`ThreadedHere`: the executor of a watch that works in the driver on an object store.

On an object store a unit mostly waits: a range GET of a JSONL tail, a window of
transcript GETs. A Worker actor there runs several units at once on threads
(`executors.OBJECT_STORE_UNITS_PER_WORKER`), so one unit's round trips overlap
another's parsing. A watch that works in the driver (`runtime.held.HeldRuns`, "Where
watch runs" in docs/runtime.md) does the same in this process: as many units at once
as the private Ray it stands in for would run on this machine (a Worker per core,
each that many threads), so its memory bound is that Ray's too. On local disk units
are CPU work under one interpreter lock: the driver runs them one at a time
(`executors.WorkerPool`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait

from rlstream.io.storage import Storage
from rlstream.pipeline.work import Unit, UnitFailure, UnitResult
from rlstream.runtime.executors import OBJECT_STORE_UNITS_PER_WORKER, run_unit
from rlstream.runtime.placement import usable_cores


def here_threads(cores: int | None = None) -> int:
    """Units the driver runs at once on an object store: what a private Ray's workers
    would (one per core, `OBJECT_STORE_UNITS_PER_WORKER` calls each)."""
    return (usable_cores() if cores is None else cores) * OBJECT_STORE_UNITS_PER_WORKER


class ThreadedHere:
    """An executor (`pipeline.runner.Executor`): runs units on `threads` threads of
    this process, at most `max_inflight` taken at once (results not yet folded
    included), and yields each result once, in the calling thread, as it completes.
    A unit that raises is its own `UnitFailure` (`executors.run_unit`). `on_result`
    is called for each result yielded."""

    def __init__(
        self,
        storage: Storage,
        threads: int,
        max_inflight: int,
        on_result: Callable[[], None] | None = None,
    ) -> None:
        self.storage = storage
        self.threads = max(1, threads)
        self.max_inflight = max(self.threads, max_inflight)
        self.on_result = on_result
        self.done = 0
        self._pool: ThreadPoolExecutor | None = None

    def __call__(self, units: list[Unit]) -> Iterator[UnitResult | UnitFailure]:
        if self._pool is None:
            _ = self.storage.fs  # opened once, before the threads share it
            self._pool = ThreadPoolExecutor(self.threads, thread_name_prefix="rlstream-unit")
        todo = list(reversed(units))
        running: set[Future] = set()
        while todo or running:
            while todo and len(running) < self.max_inflight:
                running.add(self._pool.submit(run_unit, todo.pop(), self.storage, "the driver"))
            finished, running = wait(running, return_when=FIRST_COMPLETED)
            for f in finished:
                self.done += 1
                if self.on_result is not None:
                    self.on_result()
                yield f.result()

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True)
