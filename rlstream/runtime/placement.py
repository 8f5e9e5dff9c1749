"""Where `analyze` runs its work: in this process, or on a private Ray it starts.

A private Ray on one machine costs CPU of its own (its daemons, and worker processes
that each import Ray) before it does any work, and the second and further cores can
only save part of the work's time. So `analyze` estimates the work from its plan
(the transcripts it lists) and starts a private Ray only when the cores it adds
save more than that cost (`choose`; docs/runtime.md, "Where analyze runs"). A joined
cluster (`--ray-address`, RAY_ADDRESS) is always used: its cost is paid already.
Kept apart from Ray (this module never imports it).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

CPU_S_PER_TRANSCRIPT = 1.4e-4
"""Estimated CPU seconds of the work per listed transcript (read, decode, aggregate,
fold) of about 900 tokens and 25 KB: the 1 GB archive's CPU seconds in one process
on an idle host over its transcripts (bench/README.md)."""

PRIVATE_RAY_CPU_S = 5.5
"""CPU seconds a private Ray costs on its own on one machine: its daemons' start and
stop and its worker processes importing Ray (bench/README.md)."""

PAYS_MARGIN = 2.0
"""How much more the cores must save than the Ray costs, for an estimate that can be
off, and a start that also costs wall time before any worker helps."""


@dataclass(frozen=True)
class Placement:
    """The choice: `ray` (a private Ray is started) and why, in words for the
    closing summary line."""

    ray: bool
    why: str

    def summary(self) -> str:
        return f"ran {'on a private Ray' if self.ray else 'in this process'} ({self.why})"


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


def choose(listed: int, chunks: int, cores: int | None = None) -> Placement:
    """A private Ray pays when spreading the work and the Ray's own cost over `cores`
    saves more than `PAYS_MARGIN` times that cost: `work > margin * ray / (cores - 1)`.
    On one core it never does."""
    cores = usable_cores() if cores is None else cores
    work = estimate_cpu_s(listed, chunks)
    plan = f"{listed * max(1, chunks):,} transcripts planned, about {work:.1f} CPU s of work"
    if cores < 2:
        return Placement(False, f"{plan}, and on 1 core a private Ray cannot pay")
    pays_from = PAYS_MARGIN * PRIVATE_RAY_CPU_S / (cores - 1)
    if work > pays_from:
        return Placement(
            True, f"{plan}: on {cores} cores a private Ray pays above {pays_from:.0f} s"
        )
    return Placement(
        False, f"{plan}: on {cores} cores a private Ray pays only above {pays_from:.0f} s"
    )
