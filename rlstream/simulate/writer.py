"""Writing simulated runs to disk: all at once (`simulate`) or in real time (`simulate_live`).

Both write the same content; only time fields differ. `simulate` uses synthetic clocks
(each run starts at `RunPlan.created_at`, steps last their simulated duration), so a
seed gives the same bytes every time. `simulate_live` interleaves all runs in one
process the way trainers write: transcripts appear whole (temp file + os.replace),
rollouts and steps lines are appended and flushed, sometimes half a line first and the
rest a moment later; a step lasts about `interval` seconds; times are time.time().

Layout: ROOT/<run>/{run.json, steps.jsonl, rollouts.jsonl, transcripts/}, and
ROOT/labels.json with the ground truth (never inside a run directory).
"""

from __future__ import annotations

import heapq
import itertools
import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np
import orjson

from rlstream.simulate.config import (
    FORMAT_VERSION,
    STREAM_WRITES,
    RunLabel,
    RunPlan,
    SimConfig,
    plan_runs,
)
from rlstream.simulate.engine import RunEngine
from rlstream.simulate.records import Event, Lines, Transcript, step_events
from rlstream.simulate.stats import step_metrics

SETUP_SECONDS = 45.0


def write_atomic(path: Path, data: bytes) -> None:
    """Write a whole file so readers never see it partly written."""
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as f:
        f.write(data)
    os.replace(tmp, path)


def run_json(plan: RunPlan, created_at: float, finished_at: float | None = None) -> bytes:
    doc: dict[str, Any] = {
        "format_version": FORMAT_VERSION,
        "run_id": plan.run_id,
        "created_at": round(created_at, 3),
        "config": plan.run_config(),
    }
    if finished_at is not None:
        doc["finished_at"] = round(finished_at, 3)
    return orjson.dumps(doc, option=orjson.OPT_INDENT_2) + b"\n"


def run_steps(plan: RunPlan) -> Iterator[tuple[float, list[Event], bool]]:
    """(simulated seconds, events, stalled) per step. A stalled run's last item is the
    step it hangs in: a third of its transcripts, no lines, and nothing after."""
    engine = RunEngine(plan)
    for t in range(plan.steps):
        sd = engine.step(t)
        if t >= engine.last_step:
            partial = max(1, len(sd.attempt_ids) // 3)
            yield sd.duration, step_events(plan, sd, {}, attempts=partial), True
            return
        yield sd.duration, step_events(plan, sd, step_metrics(sd)), False


def _prepare(root: str | Path, config: SimConfig) -> tuple[Path, list[RunPlan]]:
    root = Path(root)
    plans = plan_runs(config)
    for plan in plans:
        d = root / plan.name
        if d.exists() and any(d.iterdir()):
            raise FileExistsError(
                f"{d} already exists and is not empty; simulate into an empty ROOT "
                "or remove the old runs first"
            )
    root.mkdir(parents=True, exist_ok=True)
    labels = {
        "format_version": FORMAT_VERSION,
        "seed": config.seed,
        "runs": [p.label.to_json() for p in plans],
    }
    write_atomic(root / "labels.json", orjson.dumps(labels, option=orjson.OPT_INDENT_2) + b"\n")
    for plan in plans:
        (root / plan.name / "transcripts").mkdir(parents=True, exist_ok=True)
    return root, plans


def _lines_bytes(lines: Lines, now: float) -> bytes:
    out = []
    for rec in lines.records:
        rec["time"] = round(now, 3)
        out.append(orjson.dumps(rec))
    return b"\n".join(out) + b"\n"


def simulate(root: str | Path, config: SimConfig) -> list[RunLabel]:
    """Write every run at once with synthetic times; returns the labels."""
    root, plans = _prepare(root, config)
    for plan in plans:
        d = root / plan.name
        write_atomic(d / "run.json", run_json(plan, plan.created_at))
        clock = plan.created_at + SETUP_SECONDS
        stalled = False
        with open(d / "steps.jsonl", "wb") as fs, open(d / "rollouts.jsonl", "wb") as fr:
            files = {"steps.jsonl": fs, "rollouts.jsonl": fr}
            for duration, events, stall in run_steps(plan):
                stalled = stall
                for ev in events:
                    if isinstance(ev.item, Transcript):
                        write_atomic(d / "transcripts" / ev.item.name, ev.item.data)
                    else:
                        now = clock + ev.frac * duration
                        files[ev.item.file].write(_lines_bytes(ev.item, now))
                clock += duration
        if not stalled:
            write_atomic(d / "run.json", run_json(plan, plan.created_at, clock + 1.0))
    return [p.label for p in plans]


class _LiveRun:
    """One run being written in real time: its open files and half-written lines."""

    def __init__(self, root: Path, plan: RunPlan, interval: float, split_prob: float):
        self.plan = plan
        self.dir = root / plan.name
        self.steps = run_steps(plan)
        self.interval = interval
        self.split_prob = split_prob
        self.rng = np.random.default_rng([plan.seed, plan.index, STREAM_WRITES])
        # Held open for the run's lifetime like a trainer's; closed by close().
        self.files: dict[str, BinaryIO] = {
            name: open(self.dir / name, "ab")  # noqa: SIM115
            for name in ("steps.jsonl", "rollouts.jsonl")
        }
        self.pending: dict[str, bytes] = {}
        self.nominal: float | None = None
        self.created_at = 0.0

    def flush_pending(self, name: str) -> None:
        rest = self.pending.pop(name, None)
        if rest:
            self.files[name].write(rest)
            self.files[name].flush()

    def append(self, name: str, data: bytes, later: Callable[[float, Callable[[], None]], None]):
        self.flush_pending(name)
        f = self.files[name]
        if len(data) > 2 and self.rng.random() < self.split_prob:
            cut = int(self.rng.integers(1, len(data) - 1))
            f.write(data[:cut])
            f.flush()
            self.pending[name] = data[cut:]
            delay = min(0.3 * self.interval, 0.2) * float(self.rng.random())
            later(delay, lambda: self.flush_pending(name))
        else:
            f.write(data)
            f.flush()

    def close(self, finished_at: float | None) -> None:
        for name in list(self.pending):
            self.flush_pending(name)
        for f in self.files.values():
            f.close()
        if finished_at is not None:
            write_atomic(self.dir / "run.json", run_json(self.plan, self.created_at, finished_at))


def simulate_live(
    root: str | Path,
    config: SimConfig,
    interval: float = 1.0,
    *,
    split_prob: float = 0.2,
    clock: Callable[[], float] = time.time,
    sleep: Callable[[float], None] = time.sleep,
) -> list[RunLabel]:
    """Write all runs concurrently in real time, a step about every `interval` seconds.

    Same content as `simulate` apart from the time fields. Returns when every run has
    finished or stalled."""
    if interval <= 0:
        raise ValueError(f"interval must be > 0 seconds (got {interval})")
    root, plans = _prepare(root, config)
    heap: list[tuple[float, int, Callable[[], None]]] = []
    seq = itertools.count()

    def at(due: float, action: Callable[[], None]) -> None:
        heapq.heappush(heap, (due, next(seq), action))

    def later(delay: float, action: Callable[[], None]) -> None:
        at(clock() + delay, action)

    def do_event(run: _LiveRun, ev: Event) -> None:
        if isinstance(ev.item, Transcript):
            write_atomic(run.dir / "transcripts" / ev.item.name, ev.item.data)
        else:
            run.append(ev.item.file, _lines_bytes(ev.item, clock()), later)

    def start_step(run: _LiveRun) -> None:
        now = clock()
        item = next(run.steps, None)
        if item is None:
            run.close(finished_at=now)
            return
        duration, events, stalled = item
        run.nominal = run.nominal or duration
        live = interval * float(np.clip(duration / run.nominal, 0.5, 2.0))
        for ev in events:
            at(now + ev.frac * live, lambda run=run, ev=ev: do_event(run, ev))
        if stalled:
            at(now + live, lambda run=run: run.close(finished_at=None))
        else:
            at(now + live, lambda run=run: start_step(run))

    runs = []
    for i, plan in enumerate(plans):
        run = _LiveRun(root, plan, interval, split_prob)
        run.created_at = clock()
        write_atomic(run.dir / "run.json", run_json(plan, run.created_at))
        runs.append(run)
        at(
            clock() + interval * (0.2 + 0.5 * i / max(len(plans), 1)),
            lambda run=run: start_step(run),
        )
    try:
        while heap:
            due, _, action = heapq.heappop(heap)
            wait = due - clock()
            if wait > 0:
                sleep(wait)
            action()
    finally:
        for run in runs:
            for f in run.files.values():
                if not f.closed:
                    f.close()
    return [p.label for p in plans]
