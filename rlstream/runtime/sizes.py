"""`RuntimeConfig`: the sizes of a Ray run's actor pools and how its start behaves.

Kept apart from the actors (`runtime/pools.py`) so that reading a configuration, or
an `analyze` that finishes before it needs Ray, never imports Ray.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from rlstream.runtime.cluster import RayConfig
from rlstream.runtime.load import WatchPlacement
from rlstream.sinks.maintain import MaintenanceConfig


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
    """Work in the driver before (or instead of) a private Ray (`runtime.held.HeldRuns`);
    None: when this command would start a private Ray."""
    in_process: bool = False
    """Every unit in this process, no Ray started whatever the plan (analyze) or the
    measured work (watch) (`--in-process`)."""
    processes: int | None = None
    """analyze without Ray: worker processes beside the driver (`runtime.processes`);
    None (the default): the plan chooses (`runtime.placement.choose`); 0: none."""
    start_ray_after: float | None = None
    """analyze: None (the default): the plan chooses whether a private Ray is started
    at all (`runtime.placement.choose`); 0 (`--ray`): one is started at once; else
    seconds the driver works alone before it starts one, unless its plan is larger
    (`batch.START_NOW_TRANSCRIPTS`), an archive done sooner starting none. watch:
    None (the default): the driver's measured work chooses (`watch`); 0 (`--ray`):
    a private Ray at once."""
    watch: WatchPlacement = field(default_factory=WatchPlacement)
    """watch on one machine: when the work moves from the driver to a private Ray
    (`runtime.load`)."""


def default_tailers(workers: int, watch: bool) -> int:
    """Tailers when none are asked for. A watch polls every run every poll, so its
    shards are polled in parallel. In batch work a tailer only hands out units and
    folds their results, about a tenth of a worker's CPU (bench/README.md): one feeds
    8 workers, and on 2 cores a second one only takes CPU from the workers."""
    return min(4, workers if watch else -(-workers // 8))
