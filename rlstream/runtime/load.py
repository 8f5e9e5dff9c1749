"""Where `watch` runs: in this process while its work fits in part of a core, on a
private Ray once it does not (docs/runtime.md, "Where watch runs").

A private Ray on one machine costs CPU of its own for as long as the watch runs (its
daemons, the tailer and worker processes' Ray threads, a round trip per call), and
a watch of a fleet that writes little has little work to spread. So a watch on one
machine with no cluster starts in the driver (`runtime.held.HeldRuns`: its units
run here and Ray is not even imported) and measures that work: `DriverLoad` keeps the
CPU seconds this process spends inside the loop's polls and commits, the work the
tailers and workers would take over. Once that is above `WatchPlacement.ray_above`
of one core over the last `window_seconds` (a full window, backlogs included), the
watch starts a private Ray and hands its runs over to the tailers, and stays there.
A joined cluster (`--ray-address`, RAY_ADDRESS) is always used; `watch --ray`
starts a private Ray at once, `watch --in-process` never does. Kept apart from Ray
(this module never imports it).
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass


@dataclass(frozen=True)
class WatchPlacement:
    """When a watch that started in the driver moves to a private Ray."""

    ray_above: float = 0.8
    """Share of one core (CPU seconds per second) the driver's polls and commits may
    take over a window before a private Ray is started. Below it the loop, which
    runs on one thread, keeps at least a fifth of each poll interval to spare, and
    a private Ray would cost more CPU than it saves; above it the loop is close to
    falling behind and Ray's cores pay (docs/runtime.md, "Where watch runs")."""
    window_seconds: float = 30.0
    """The window the share is measured over: long enough that a commit larger than
    the others, or one maintenance pass, does not decide it alone."""

    def __post_init__(self) -> None:
        if self.ray_above < 0 or self.window_seconds <= 0:
            raise ValueError(
                f"WatchPlacement needs ray_above >= 0 and window_seconds > 0, got {self}"
            )


class DriverLoad:
    """CPU seconds spent inside `measure()` blocks, over the last `window` seconds
    of wall time. `share()` is None until a whole window has passed since the
    first block began (a start-up is not judged on its first seconds)."""

    def __init__(
        self,
        window: float,
        clock: Callable[[], float] = time.monotonic,
        cpu: Callable[[], float] = time.process_time,
    ) -> None:
        self.window = window
        self.clock = clock
        self.cpu = cpu
        self._spans: deque[tuple[float, float]] = deque()  # (ended at, CPU seconds)
        self._first: float | None = None

    @contextmanager
    def measure(self) -> Iterator[None]:
        """The process's CPU seconds while the block runs count toward the share
        (every thread's: the commit's writer threads too)."""
        c0, t0 = self.cpu(), self.clock()
        if self._first is None:
            self._first = t0
        try:
            yield
        finally:
            self.add(self.cpu() - c0, self.clock())

    def add(self, cpu_s: float, at: float) -> None:
        self._spans.append((at, cpu_s))
        while self._spans and self._spans[0][0] <= at - self.window:
            self._spans.popleft()

    def share(self, now: float | None = None) -> float | None:
        """CPU seconds per second over the last window, or None before a full one."""
        now = self.clock() if now is None else now
        if self._first is None or now - self._first < self.window:
            return None
        return sum(c for at, c in self._spans if at > now - self.window) / self.window


def placement_line(share: float, cfg: WatchPlacement) -> str:
    """Why a watch moves to a private Ray, in words for its log and closing line."""
    return (
        f"its polls and commits took {100 * share:.0f} % of a core over the last "
        f"{cfg.window_seconds:g} s, above {100 * cfg.ray_above:.0f} %"
    )
