"""Maintenance of OUT on a schedule inside `watch`: a thread of the driver process.

`Maintainer(sink, cfg).start()` runs `rlstream.sinks.maintain.maintain` every
`cfg.every_seconds` (the first pass one period after start) until `stop()`. It runs
beside the tailers' commits: compaction and vacuum never conflict with their appends
(docs/runtime.md, "Maintenance"). A pass that fails is logged; the next one retries.
`last` holds the report of the last pass, `passes` how many ran.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

from rlstream.sinks.delta import DeltaSink
from rlstream.sinks.maintain import MaintenanceConfig, maintain

log = logging.getLogger("rlstream")


class Maintainer:
    def __init__(self, sink: DeltaSink, cfg: MaintenanceConfig) -> None:
        self.sink = sink
        self.cfg = cfg
        self.passes = 0
        self.last: dict[str, Any] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="rlstream-maintain", daemon=True)

    def start(self) -> Maintainer:
        if self.cfg.every_seconds > 0:
            self._thread.start()
        return self

    def run_once(self) -> dict[str, Any]:
        t0 = time.monotonic()
        self.last = maintain(self.sink, self.cfg)
        self.passes += 1
        log.info("maintenance pass %d in %.2f s: %s", self.passes, time.monotonic() - t0, self.last)
        return self.last

    def _loop(self) -> None:
        while not self._stop.wait(self.cfg.every_seconds):
            try:
                self.run_once()
            except Exception:  # never take the watch down
                log.exception("maintenance pass failed; retried next period")

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()
