"""Shared helpers of the speed benchmarks: process-tree sampling, medians, machine facts.

Memory and CPU are read from /proc (Linux), summed over a process and all its
descendants, because `rlstream analyze` and `watch` start a private Ray whose raylet,
GCS and worker actors are grandchildren of the command: `getrusage(RUSAGE_CHILDREN)`
would miss most of them.
"""

from __future__ import annotations

import os
import platform
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from rlstream.runtime.procs import children_map, tree

CLK_TCK = os.sysconf("SC_CLK_TCK")
PAGE = os.sysconf("SC_PAGE_SIZE")


def proc_cpu_rss(pid: int) -> tuple[float, int]:
    """(user + system CPU seconds, resident bytes) of one process; (0, 0) if gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
    except OSError:
        return 0.0, 0
    # after the command: state(0) ppid(1) ... utime(11) stime(12) ... rss(21)
    return (int(fields[11]) + int(fields[12])) / CLK_TCK, int(fields[21]) * PAGE


@dataclass
class TreeSampler:
    """Samples a process tree every `interval` s: peak summed RSS, CPU seconds used.

    CPU of processes that exit between samples is lost; the benchmark's processes
    live for the whole measurement, so the error is one sampling interval at most.
    """

    pid: int
    interval: float = 0.05
    also: tuple[int, ...] = ()
    """Roots of other trees counted with it (a standing Ray the command joins); only
    the CPU they use after `start()` counts."""
    peak_rss: int = 0
    cpu: dict[int, float] = field(default_factory=dict)
    base: dict[int, float] = field(default_factory=dict)
    in_also: set[int] = field(default_factory=set)
    names: dict[int, str] = field(default_factory=dict)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def sample(self) -> None:
        rss = 0
        kids = children_map()
        also = tree(*self.also, kids=kids) if self.also else []
        self.in_also.update(also)
        for p in dict.fromkeys(tree(self.pid, kids=kids) + also):
            c, r = proc_cpu_rss(p)
            rss += r
            if c:
                self.cpu[p] = max(self.cpu.get(p, 0.0), c)
            # Read every time: a Ray worker process is `ray::IDLE` until an actor
            # takes it, then `ray::Tailer` or `ray::Worker`.
            self.names[p] = _cmdline(p) or self.names.get(p, "")
        self.peak_rss = max(self.peak_rss, rss)

    def also_cpu_seconds(self) -> float:
        """CPU seconds of the `also` trees alone (since `start()`)."""
        return self.cpu_seconds(lambda p, _: p in self.in_also)

    def cpu_seconds(self, pick: Callable[[int, str], bool] | None = None) -> float:
        """CPU seconds of the tree, or of the processes `pick(pid, cmdline)` selects."""
        return sum(
            c - self.base.get(p, 0.0)
            for p, c in self.cpu.items()
            if pick is None or pick(p, self.names.get(p, ""))
        )

    def cpu_by(self, part: Callable[[int, str], str]) -> dict[str, float]:
        """CPU seconds of the tree by part: `part(pid, cmdline)` names each process's."""
        out: dict[str, float] = {}
        for p, c in self.cpu.items():
            k = part(p, self.names.get(p, ""))
            out[k] = out.get(k, 0.0) + c - self.base.get(p, 0.0)
        return out

    def start(self) -> TreeSampler:
        self.base = {p: proc_cpu_rss(p)[0] for p in tree(*self.also)} if self.also else {}

        def loop() -> None:
            while not self._stop.is_set():
                self.sample()
                self._stop.wait(self.interval)

        self._thread = threading.Thread(target=loop, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()


WATCH_PARTS = ("driver", "tailers", "workers", "ray")
"""The parts of a watch's process tree whose CPU `bench live` reports."""


def watch_part(driver: int) -> Callable[[int, str], str]:
    """Which of `WATCH_PARTS` a process of a watch's tree is: the driver (the command's
    own process), its Tailer and Worker actors, or Ray's own processes (GCS, raylet,
    agents, idle workers)."""

    def part(pid: int, cmd: str) -> str:
        if pid == driver:
            return "driver"
        if cmd.startswith("ray::Tailer"):
            return "tailers"
        if cmd.startswith("ray::Worker"):
            return "workers"
        return "ray"

    return part


def _cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return ""


@dataclass
class Timed:
    """One measured command: wall seconds, peak tree RSS, tree CPU seconds (of which
    `cpu_also` in the `also` trees)."""

    wall: float
    peak_rss: int
    cpu: float
    stdout: str
    cpu_also: float = 0.0


def run_measured(
    cmd: list[str],
    env: dict[str, str] | None = None,
    timeout: float = 3600,
    also: tuple[int, ...] = (),
) -> Timed:
    """Run a command to completion, sampling its process tree (and the trees of
    `also`: their peak RSS in full, their CPU from the command's start)."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(
        cmd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={**os.environ, **(env or {})},
        text=True,
    )
    sampler = TreeSampler(proc.pid, also=also).start()
    try:
        out, err = proc.communicate(timeout=timeout)
    finally:
        sampler.stop()
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} exited {proc.returncode}:\n{err[-3000:]}")
    return Timed(wall, sampler.peak_rss, sampler.cpu_seconds(), out, sampler.also_cpu_seconds())


def median(xs: list[float]) -> float:
    return statistics.median(xs) if xs else float("nan")


def percentile(xs: list[float], q: float) -> float:
    if not xs:
        return float("nan")
    s = sorted(xs)
    k = (len(s) - 1) * q
    lo = int(k)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (k - lo)


def freshness(fresh: list[float], missing: int, bound: float) -> dict[str, float | int]:
    """The freshness figures of a live run: step lines measured and missing, p50, p99,
    max (seconds) and the bound they are held to."""
    return {
        "steps_measured": len(fresh),
        "missing": missing,
        "p50": percentile(fresh, 0.5),
        "p99": percentile(fresh, 0.99),
        "max": max(fresh) if fresh else float("nan"),
        "bound": bound,
    }


def machine() -> str:
    model = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem = os.sysconf("SC_PHYS_PAGES") * PAGE / 2**30
    load = os.getloadavg()
    return (
        f"{os.cpu_count()} CPUs ({model}), {mem:.0f} GiB RAM, Python {platform.python_version()}, "
        f"{platform.system()} {platform.release()}; load average at start "
        f"{load[0]:.1f} {load[1]:.1f} {load[2]:.1f}"
    )


def rlstream_cmd() -> list[str]:
    """The `rlstream` console script of this interpreter's environment."""
    script = Path(sys.executable).with_name("rlstream")
    return [str(script)] if script.exists() else [sys.executable, "-m", "rlstream.cli"]


def dir_bytes(root: Path, pattern: str) -> int:
    return sum(p.stat().st_size for p in root.glob(pattern))


def ray_env() -> dict[str, str]:
    return {"RAY_USAGE_STATS_ENABLED": "0", "RAY_AUTH_MODE": "disabled"}


def held_clock(go: Callable[[], bool], hold_after_s: float) -> Callable[[], float]:
    """A clock for `simulate_live` that stops ``hold_after_s`` seconds after its first
    reading (every run has begun) until ``go()`` is true (the watch is up), so the steps
    a live bench measures do not depend on how long the watch took to start."""
    hold_after: list[float] = []

    def clock() -> float:
        now = time.time()
        if not hold_after:
            hold_after.append(now + hold_after_s)
        while now > hold_after[0] and not go():
            time.sleep(0.05)
            now = time.time()
        if now > hold_after[0]:
            hold_after[0] = float("inf")  # released for good
        return now

    return clock
