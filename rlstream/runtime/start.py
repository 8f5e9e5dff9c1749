"""`BackgroundStart`: workers started in a thread of their own, while the driver works.

Both starting executors (`executors.RayStart`, `processes.LocalStart`) start their
workers the same way: in one thread, once `now()` is called or `delay` seconds have
passed (None: only on `now()`; 0: at once); stopped before that, they start nothing
(`phases["skipped"]`). The thread runs the subclass's `_start`, records its error
(`error`) and sets `settled`, then waits for `stop()` and runs `_stop` in the same
thread (Ray's processes die with the thread that started them). `join()` stops and
waits. `phases` holds the seconds since construction at which each phase ended.
"""

from __future__ import annotations

import threading
import time


class BackgroundStart:
    """The thread and events of a start; subclasses give `_start` and `_stop` and call
    `__init__` last in theirs (the thread may run `_start` at once)."""

    def __init__(self, delay: float | None, name: str) -> None:
        self.delay = delay
        self.error: BaseException | None = None
        self.phases: dict[str, float] = {}
        self._t0 = time.monotonic()
        self._stopping = threading.Event()
        self._go = threading.Event()
        self.settled = threading.Event()
        """Set once the start has ended, ready or failed (or was skipped)."""
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        if self.delay is None or self.delay > 0:
            self._go.wait(self.delay)
        if self._stopping.is_set():
            self.phases["skipped"] = time.monotonic() - self._t0
            self.settled.set()  # stopped before it was due: nothing started at all
            return
        try:
            self._start()
        except BaseException as e:  # reported to the driver by the subclass's `workers()`
            self.error = e
        finally:
            self.settled.set()
        self._stopping.wait()
        t = time.monotonic()
        self._stop()
        self.phases["stop"] = time.monotonic() - t

    def _start(self) -> None:
        raise NotImplementedError

    def _stop(self) -> None:
        raise NotImplementedError

    def now(self) -> None:
        """Start now, without waiting out the delay."""
        self._go.set()

    def stop(self) -> None:
        self._stopping.set()
        self._go.set()

    def join(self) -> None:
        self.stop()
        self._thread.join()
