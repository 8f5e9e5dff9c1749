"""Process trees read from /proc (Linux): who descends from whom, and stopping them.

Used to stop the private local Ray at once (`cluster.disconnect`) and by the
benchmarks to sample a command's whole tree (the raylet, GCS and worker actors of a
private Ray are grandchildren of the command).
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterable


def children_map() -> dict[int, list[int]]:
    """ppid -> pids of every process alive now (one pass over /proc)."""
    kids: dict[int, list[int]] = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue
        ppid = int(stat[stat.rindex(b")") + 2 :].split()[1])
        kids.setdefault(ppid, []).append(int(d))
    return kids


def _generations(roots: Iterable[int], kids: dict[int, list[int]] | None = None) -> list[list[int]]:
    """`roots`, then their children alive now, then grandchildren... (each pid once)."""
    kids = children_map() if kids is None else kids
    generations: list[list[int]] = []
    seen: set[int] = set()
    level = list(roots)
    while level:
        level = [p for p in dict.fromkeys(level) if p not in seen]
        seen.update(level)
        if level:
            generations.append(level)
        level = [c for p in level for c in kids.get(p, [])]
    return generations


def tree(*pids: int, kids: dict[int, list[int]] | None = None) -> list[int]:
    """The `pids` and all their descendants alive now (each once, parents first);
    `kids` (from `children_map()`) lets several trees share one pass over /proc."""
    return [p for generation in _generations(pids, kids) for p in generation]


def _gone(pid: int) -> bool:
    """True once `pid` has exited; a child of this process is reaped here."""
    try:
        done, _ = os.waitpid(pid, os.WNOHANG)
        return done == pid
    except ChildProcessError:  # not our child: look at /proc
        pass
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[0] == b"Z"
    except OSError:
        return True


def kill_tree(roots: Iterable[int], timeout: float = 5.0) -> list[int]:
    """SIGKILL `roots` and all their descendants, the deepest first, waiting for each
    generation to exit before the next, so a parent is still there to reap its
    children (a child already a zombie when its parent dies passes to init, which
    reaps it). Returns the pids still alive at `timeout`."""
    generations = _generations(roots)
    deadline = time.monotonic() + timeout
    left: list[int] = []
    for generation in reversed(generations):
        alive = []
        for pid in generation:
            try:
                os.kill(pid, signal.SIGKILL)
                alive.append(pid)
            except ProcessLookupError:
                pass
        while alive and time.monotonic() < deadline:
            alive = [p for p in alive if not _gone(p)]
            if alive:
                time.sleep(0.01)
        left += alive
    return left


def process_age(pid: int | None = None) -> float:
    """Seconds since process `pid` (default: this one) began, its interpreter's start
    and imports included; 0.0 where /proc cannot tell."""
    try:
        with open(f"/proc/{pid or 'self'}/stat", "rb") as f:
            start_ticks = int(f.read().rsplit(b")", 1)[1].split()[19])
        with open("/proc/uptime", "rb") as f:
            uptime = float(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 0.0
    return max(0.0, uptime - start_ticks / os.sysconf("SC_CLK_TCK"))
