"""Worker processes on this machine: `analyze`'s other cores without a private Ray.

A private Ray costs seconds of CPU before it does any work (its daemons, worker
processes that each import Ray: bench/README.md). A plain worker process costs a
fraction of a second: `LocalStart(storage, n)` starts `n` of them in a thread, as
`executors.RayStart` starts Ray, and `workers()` is None until every one has
answered. Each is a fresh interpreter running this module (`python -m
rlstream.runtime.processes FD`), given this process's environment and import path and
one end of a socket pair: nothing of the driver is copied into it (not its threads or
locks, a Delta client's or an object store's), and the driver's own main script is
never run again there (multiprocessing's spawn and forkserver would import it).

A worker runs the batches sent on its socket in order (`executors.run_unit` for each
unit, so a unit's error is that unit's `UnitFailure`) and answers each with its
results. `PROCESS_CALLS` is how `executors.WorkerPool` sends batches to them and
collects the answers (`executors.Calls`). A worker that dies fails its batches in
flight (`WorkerLost`: `UnitFailure`s that `RunGroup.poll` retries) and is left out
from then on; with none left, the pool runs units in this process. Workers run in a
session of their own (a Ctrl-C at the terminal is the driver's to handle) and exit
when their socket closes: the driver stopped them, or died.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterable
from multiprocessing.connection import Connection, wait
from typing import Any

from rlstream.io.storage import Storage
from rlstream.runtime.start import BackgroundStart

log = logging.getLogger("rlstream")

STOP_TIMEOUT_S = 5.0
"""How long a stopped worker may take to finish its batch before it is killed."""


class WorkerLost(Exception):
    """A worker process died (or its socket broke) with batches in flight."""


def serve(fd: int) -> None:
    """A worker process's loop: its storage first, then batches in and their results
    out, until the socket closes or a `None` asks it to stop."""
    from rlstream.runtime.executors import run_unit
    from rlstream.runtime.malloc import keep_heap

    keep_heap()
    conn = Connection(fd)
    where = f"worker process {os.getpid()}"
    try:
        storage = conn.recv()
        conn.send(os.getpid())
        while (batch := conn.recv()) is not None:
            conn.send([run_unit(u, storage, where) for u in batch])
    except (EOFError, OSError):
        return


def _spawn(storage: Storage | None) -> ProcessWorker:
    """One worker process, started and sent its storage (it answers once ready)."""
    mine, theirs = socket.socketpair()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    cmd = [sys.executable, "-m", "rlstream.runtime.processes", str(theirs.fileno())]
    with theirs:
        proc = subprocess.Popen(
            cmd, pass_fds=(theirs.fileno(),), env=env, stdin=subprocess.DEVNULL,
            start_new_session=True,
        )  # fmt: skip
    worker = ProcessWorker(proc, Connection(mine.detach()))
    worker.conn.send(storage)
    return worker


class ProcessWorker:
    """One worker process (a `subprocess.Popen`) and the socket to it; calls are
    answered in the order sent."""

    def __init__(self, process: subprocess.Popen, conn: Connection) -> None:
        self.process = process
        self.conn = conn
        self.pid: int | None = process.pid
        self.sent = 0
        self.answered = 0
        self.lost = False

    def send(self, batch: list[Any]) -> tuple[ProcessWorker, int]:
        """Send a call; to a worker found dead, its ticket fails when collected."""
        if not self.lost:
            try:
                self.conn.send(batch)
            except OSError:
                self.lost = True
        self.sent += 1
        return self, self.sent

    def receive(self, seq: int) -> list[Any]:
        if self.lost:
            raise WorkerLost(f"worker process {self.pid} died")
        assert seq == self.answered + 1, "answers come in the order the calls were sent"
        try:
            got = self.conn.recv()
        except (EOFError, OSError) as e:
            self.lost = True
            raise WorkerLost(f"worker process {self.pid} died ({e!r})") from None
        self.answered += 1
        return got


class ProcessCalls:
    """`executors.Calls` for worker processes: a ticket is (worker, call number)."""

    errors = (WorkerLost,)

    @staticmethod
    def send(worker: ProcessWorker, batch: list[Any]) -> tuple[ProcessWorker, int]:
        return worker.send(batch)

    @staticmethod
    def wait(tickets: Iterable[tuple[ProcessWorker, int]], block: bool) -> list[Any]:
        """The oldest call in flight of each worker whose answer (or death) is there."""
        oldest: dict[int, tuple[ProcessWorker, int]] = {}
        for w, seq in tickets:
            if id(w) not in oldest or seq < oldest[id(w)][1]:
                oldest[id(w)] = (w, seq)
        dead = [t for t in oldest.values() if t[0].lost]
        if dead:
            return dead
        conns = {t[0].conn: t for t in oldest.values()}
        ready = wait(list(conns), timeout=None if block else 0)
        return [conns[c] for c in ready]  # type: ignore[index]

    @staticmethod
    def get(ticket: tuple[ProcessWorker, int]) -> list[Any]:
        worker, seq = ticket
        return worker.receive(seq)


PROCESS_CALLS = ProcessCalls()


class LocalStart(BackgroundStart):
    """Starts `n` worker processes in a thread (`runtime.start.BackgroundStart`) once
    `now()` is called (or at once with `delay=0`); `workers()` is None until all
    answered, then the live ones. `stop()` ends them in the background (after the
    start, if it is still under way); `join()` waits for that. Stopped before `now()`,
    it starts none."""

    calls = PROCESS_CALLS

    def __init__(self, storage: Storage | None, n: int, delay: float | None = None) -> None:
        self.storage = storage
        self.n = max(1, n)
        self._ready: list[ProcessWorker] | None = None
        self._workers: list[ProcessWorker] = []
        super().__init__(delay, "rlstream-procs")

    def _start(self) -> None:
        for _ in range(self.n):
            self._workers.append(_spawn(self.storage))
        for w in self._workers:
            w.conn.recv()  # its pid, once it imported what it runs
        self.phases["workers"] = time.monotonic() - self._t0
        if not self._stopping.is_set():
            self._ready = self._workers

    def workers(self) -> list[ProcessWorker] | None:
        """The live workers once all answered (empty once every one died); None while
        they start, after `stop()`, or if they could not be started."""
        if self._stopping.is_set() or self._ready is None:
            return None
        return [w for w in self._ready if not w.lost]

    def _stop(self) -> None:
        for w in self._workers:
            with contextlib.suppress(OSError):  # already gone
                w.conn.send(None)
        for w in self._workers:
            try:
                w.process.wait(STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                log.warning("worker process %s did not stop: killed", w.pid)
                w.process.kill()
                w.process.wait()
            w.conn.close()

    def alive(self) -> bool:
        """Whether any of its worker processes still runs."""
        return any(w.process.poll() is None for w in self._workers)

    def text(self) -> str:
        """The start's phases in words (the closing report)."""
        ph = self.phases
        if "workers" not in ph:
            return "the work ended before the worker processes were ready"
        said = f"{self.n} worker processes ready after {ph['workers']:.1f} s"
        return said + (f", stopped in {ph['stop']:.1f} s" if "stop" in ph else "")


if __name__ == "__main__":
    serve(int(sys.argv[1]))
