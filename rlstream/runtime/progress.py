"""The progress line of `analyze` and `watch`: what was read so far and how fast.

`Progress.show(totals, runs)` takes a `RunGroup.totals`-style counter (units, rows,
bytes, tokens). On a terminal it refreshes one line in place; otherwise it logs the
line at most every 10 s, and always the totals `show(..., final=True)` is given at the
end of the work, so the last line logged is never an earlier, smaller count.
Disabled, it does nothing.

`StartupLog` is the phase log of a command's start: seconds since the process began.
"""

from __future__ import annotations

import logging
import time
from typing import TextIO

from rlstream.runtime import procs

log = logging.getLogger("rlstream")


class Progress:
    """One refreshed line on a terminal; a log line every 10 s otherwise."""

    def __init__(self, out: TextIO, enabled: bool = True) -> None:
        self.out = out
        self.tty = out.isatty()
        self.enabled = enabled
        self.start = time.monotonic()
        self.last_log = 0.0

    def show(self, totals: dict[str, int], runs: int, final: bool = False) -> None:
        if not self.enabled:
            return
        el = max(time.monotonic() - self.start, 1e-9)
        t = totals
        line = (
            f"runs {runs}  files {t.get('units', 0)} units  rows {t.get('rows', 0)}  "
            f"{t.get('bytes', 0) / 1e6:.1f} MB  {t.get('tokens', 0):,} tokens  "
            f"{t.get('tokens', 0) / el:,.0f} tokens/s"
        )
        if self.tty:
            self.out.write("\r" + line.ljust(110))
            self.out.flush()
        elif final or time.monotonic() - self.last_log >= 10:
            self.last_log = time.monotonic()
            log.info(line)

    def close(self) -> None:
        if self.enabled and self.tty:
            self.out.write("\n")


class StartupLog:
    """When each phase of a start ended, in seconds since the process began (its
    imports included); `line()` is the log line."""

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
