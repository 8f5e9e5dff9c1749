"""Where `analyze` runs its work: in this process, or in worker processes beside it.

More cores save part of the work's time, and each way of reaching them costs CPU of
its own before it does any work. On one machine a private Ray costs seconds (its
daemons' start and stop, worker processes that each import Ray); plain worker
processes (`runtime.processes`: an interpreter each, importing only the unit readers
and kernels) give the same cores for a small fraction of that. So `analyze` estimates the work from its plan (the
transcripts it lists) and starts worker processes only when the cores they add
save more than they cost (`choose`; docs/runtime.md, "Where analyze runs"). A
private Ray, which only ever spans this machine, never saves more than those
processes: it is started only when asked for (`--ray`, `--start-ray-after`). A
joined cluster (`--ray-address`, RAY_ADDRESS) is always used: its cost is paid
already. Kept apart from Ray (this module never imports it).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

CPU_S_PER_TRANSCRIPT = 2.8e-4
"""Estimated CPU seconds of the work per listed transcript (read, decode, scan,
aggregate) of about 900 tokens and 25 KB: the 1 GB archive's units' CPU seconds
(`bench/kernel.py`) over the names its plan lists (bench/README.md)."""

PRIVATE_RAY_CPU_S = 5.5
"""CPU seconds a private Ray costs on its own on one machine: its daemons' start and
stop and its worker processes importing Ray (bench/README.md)."""

PROCESS_CPU_S = 0.3
"""CPU seconds a worker process costs on its own: its interpreter's start and imports,
and the pickling of its results (bench/README.md)."""

PAYS_MARGIN = 2.0
"""How much more the cores must save than they cost, for an estimate that can be
off, and a start that also costs wall time before any worker helps."""


@dataclass(frozen=True)
class Placement:
    """The choice: `processes` worker processes beside this one (0: every unit here)
    and why, in words for the closing summary line."""

    processes: int
    why: str

    def summary(self) -> str:
        if not self.processes:
            return f"ran in this process ({self.why})"
        return f"ran in this process and {self.processes} worker processes ({self.why})"


def usable_cores() -> int:
    """The cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def estimate_cpu_s(listed: int, chunks: int) -> float:
    """The work's estimated CPU seconds from the first chunk's listed transcripts,
    the other chunks taken to be alike."""
    return listed * max(1, chunks) * CPU_S_PER_TRANSCRIPT


def pays_from(cores: int) -> float:
    """The work (CPU s) above which spreading it over `cores` worker processes saves
    `PAYS_MARGIN` times their cost (`PROCESS_CPU_S` each), the saving taken as
    work / (cores - 1), as for one extra core."""
    return PAYS_MARGIN * PROCESS_CPU_S * cores / (cores - 1)


def choose(listed: int, chunks: int, cores: int | None = None) -> Placement:
    """Worker processes, one per usable core (the driver folds their results), when
    the planned work is above `pays_from(cores)`; else every unit here. On one core
    never."""
    cores = usable_cores() if cores is None else cores
    work = estimate_cpu_s(listed, chunks)
    plan = f"{listed * max(1, chunks):,} transcripts planned, about {work:.1f} CPU s of work"
    if cores < 2:
        return Placement(0, f"{plan}, and on 1 core more processes cannot pay")
    above = pays_from(cores)
    if work > above:
        return Placement(
            cores, f"{plan}: on {cores} cores worker processes pay above {above:.1f} s"
        )
    return Placement(0, f"{plan}: on {cores} cores worker processes pay only above {above:.1f} s")
