"""Live benchmark: `rlstream watch` over live, idle and S3-hosted simulated runs.

Measured from outside the pipeline (no hook in the driver):

- **Live fleets** (10, 50, 100 runs; quick: 10). `simulate_live` writes every run in
  real time, a step about every `interval` s, each steps.jsonl line carrying the wall
  time it was written (`time`). `rlstream watch --poll P --commit-every C` runs as a
  subprocess. A monitor thread reads the newest run_health row per run
  (`rlstream.fleet.read.read_latest`, as `status` does) every 0.1 s and notes when each run's `last_step` first reaches each step. Freshness of
  step s = that moment - the `time` of step s's line. Steps written before every run
  had its first latest row (start-up: Ray, discovery) are left out. "Keeps up":
  every step written was seen, and the last one within the freshness bound
  (2 P + C) after the writer stopped. CPU: process-tree CPU seconds of the watch
  command over the measured window, as % of one core.
- **Idle cost**: 100 runs (and 1,000, not in `--quick`) written once and left
  unfinished (no `finished_at`, max_steps far away), watched; once every run has its
  latest row and the runs have been quiet for longer than `idle_backoff_seconds`
  (steady state), CPU of the watch process tree over a window, as % of one core.
- **Per part**: each case's CPU split into the watch's parts (`bench.common.watch_part`):
  the driver (the command's process), the Tailer actors, the Worker actors and Ray's
  own processes (GCS, raylet, agents, idle workers).
- **S3 requests per idle run per poll**: `bench/live_s3.py`.
- **Contenders** (`--contenders`): `watch` (the default command), `watch-ray` (`watch
  --ray`: forced onto a private Ray) and `before` (the `--baseline` revision's watch),
  each case run for each in turn, the order alternating, so their ratio is from one run.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
import time
from pathlib import Path

from bench.common import (
    WATCH_PARTS,
    TreeSampler,
    freshness,
    held_clock,
    median,
    ray_env,
    rlstream_cmd,
    watch_part,
)
from rlstream.config import PipelineConfig

POLL = 1.0
COMMIT = 2.0


def _latest_steps(out: Path) -> dict[str, int]:
    """run_id -> last_step of the newest run_health row per run ({} before any)."""
    from rlstream.fleet.read import read_latest

    try:
        rows = read_latest(str(out))
    except Exception:  # a table being created: next round
        return {}
    return {r["run_id"]: -1 if r["last_step"] is None else r["last_step"] for r in rows}


class LatestMonitor:
    """Notes when each run's last_step first reaches each value."""

    def __init__(self, out: Path, interval: float = 0.1) -> None:
        self.out = out
        self.interval = interval
        self.seen: dict[tuple[str, int], float] = {}
        self.last: dict[str, int] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def _loop(self) -> None:
        while not self._stop.is_set():
            now = time.time()
            for rid, step in _latest_steps(self.out).items():
                prev = self.last.get(rid, -1)
                for s in range(prev + 1, step + 1):
                    self.seen.setdefault((rid, s), now)
                self.last[rid] = max(prev, step)
            self._stop.wait(self.interval)

    def start(self) -> LatestMonitor:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()


def _watch(
    root: str, out: Path, env: dict[str, str] | None = None, args: tuple[str, ...] = ()
) -> subprocess.Popen:
    """`rlstream watch` as a subprocess; its log goes to OUT.log beside OUT (a pipe
    nobody reads would fill and block the watch's next log line)."""
    cmd = [
        *rlstream_cmd(),
        "watch",
        root,
        "--out",
        str(out),
        "--poll",
        str(POLL),
        "--commit-every",
        str(COMMIT),
        *args,
    ]
    log = out.parent / f"{out.name}.log"
    with open(log, "w") as f:
        proc = subprocess.Popen(
            cmd,
            stdout=subprocess.DEVNULL,
            stderr=f,
            env={**os.environ, **ray_env(), **(env or {})},
            text=True,
        )
    proc.log_path = log  # type: ignore[attr-defined]
    return proc


def log_tail(proc: subprocess.Popen, n: int = 2000) -> str:
    """The last `n` characters of a `_watch` process's log."""
    return Path(proc.log_path).read_text(errors="replace")[-n:]  # type: ignore[attr-defined]


def _stop(proc: subprocess.Popen) -> None:
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=120)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def _wait(cond, timeout: float, proc: subprocess.Popen | None = None) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if cond():
            return True
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"watch exited {proc.returncode}: {log_tail(proc)}")
        time.sleep(0.2)
    return False


def _run_ids(root: Path) -> dict[str, Path]:
    return {
        json.loads((d / "run.json").read_bytes())["run_id"]: d
        for d in root.iterdir()
        if (d / "run.json").exists()
    }


def live_fleet(n: int, steps: int, work: Path, interval: float = 1.0, args: tuple[str, ...] = (),
               tag: str = "", scenarios: tuple[str, ...] = ("healthy",),
               env: dict[str, str] | None = None) -> dict:  # fmt: skip
    """`n` runs written live and watched (`args`: more `watch` arguments, `env` its
    environment; `tag` names the folders, so one work dir holds several cases)."""
    from rlstream.simulate import SimConfig, simulate_live

    root, out = work / f"live{n}{tag}", work / f"live{n}{tag}-out"
    cfg = SimConfig(
        runs=n, steps=steps, groups=2, group_size=4, tokens=64, seed=n, scenarios=scenarios
    )
    up = threading.Event()
    # The writers begin, then wait for the watch: the measured steps are written once
    # every run has its first latest row, however long Ray took to start.
    clock = held_clock(up.is_set, 3 * interval)
    writer = threading.Thread(
        target=simulate_live, args=(root, cfg, interval), kwargs={"clock": clock}, daemon=True
    )
    writer.start()
    _wait(lambda: root.exists() and len(list(root.glob("*/run.json"))) >= n, 60)
    proc = _watch(str(root), out, env=env, args=args)
    sampler = TreeSampler(proc.pid, interval=0.5).start()
    mon = LatestMonitor(out).start()
    part = watch_part(proc.pid)
    try:
        ready = _wait(lambda: len(mon.last) >= n, 300, proc)
        t_ready = time.time()
        up.set()
        sampler.sample()
        cpu0, parts0 = sampler.cpu_seconds(), sampler.cpu_by(part)
        writer.join()
        t_written = time.time()
        ids = _run_ids(root)
        last_of = {}
        for rid, d in ids.items():
            lines = [json.loads(x) for x in (d / "steps.jsonl").read_bytes().splitlines() if x]
            last_of[rid] = {r["step"]: r["time"] for r in lines if "step" in r}
        bound = 2 * POLL + COMMIT
        _wait(
            lambda: all(mon.last.get(r, -1) >= max(s) for r, s in last_of.items() if s),
            bound + 30,
            proc,
        )
        t_end = time.time()
        sampler.sample()
        cpu, parts = sampler.cpu_seconds() - cpu0, _minus(sampler.cpu_by(part), parts0)
    finally:
        mon.stop()
        sampler.stop()
        _stop(proc)
    fresh, missing = [], 0
    for rid, times in last_of.items():
        for s, t in times.items():
            if t < t_ready:
                continue
            seen = mon.seen.get((rid, s))
            if seen is None:
                missing += 1
            else:
                fresh.append(seen - t)
    caught_up = (
        max((mon.seen.get((r, max(s)), float("inf")) for r, s in last_of.items() if s), default=0)
        - t_written
    )
    res = {
        "runs": n,
        "ready": ready,
        **freshness(fresh, missing, bound),
        "caught_up_after_writer_s": caught_up,
        "cpu_core_pct": 100 * cpu / max(t_end - t_ready, 1e-9),
        "window_s": t_end - t_ready,
        "parts_core_pct": _pct(parts, t_end - t_ready),
    }
    res["keeps_up"] = bool(ready and not missing and caught_up <= bound + interval)
    print(
        f"  {n:3d} live runs: freshness p50 {res['p50']:.2f} s, p99 {res['p99']:.2f} s, "
        f"max {res['max']:.2f} s over {len(fresh)} step lines (bound {bound:.0f} s); "
        f"missing {missing}; last line seen {caught_up:.2f} s after the writer stopped; "
        f"CPU {res['cpu_core_pct']:.0f}% of one core ({_said(res['parts_core_pct'])}); "
        f"keeps up: {res['keeps_up']}",
        flush=True,
    )
    return res


def idle_runs(root: Path, n: int, steps: int = 3) -> None:
    """n runs written once and left unfinished: they stay watched and never change."""
    from rlstream.simulate import SimConfig, simulate

    simulate(root, SimConfig(runs=n, steps=steps, groups=2, group_size=2, tokens=16, seed=3))
    for rj in root.glob("*/run.json"):
        meta = json.loads(rj.read_bytes())
        meta.pop("finished_at", None)
        meta.setdefault("config", {}).setdefault("training", {})["max_steps"] = 10**6
        rj.write_text(json.dumps(meta))


def idle_cost(
    n: int,
    window: float,
    work: Path,
    args: tuple[str, ...] = (),
    tag: str = "",
    env: dict[str, str] | None = None,
) -> dict:
    root, out = work / f"idle{n}", work / f"idle{n}{tag}-out"
    if not root.exists():  # the same runs for every contender
        idle_runs(root, n)
    proc = _watch(str(root), out, env=env, args=args)
    sampler = TreeSampler(proc.pid, interval=0.5).start()
    part = watch_part(proc.pid)
    try:
        ready = _wait(lambda: len(_latest_steps(out)) >= n, 300, proc)
        # Steady state: the first commits of caught-up runs are done and the runs have
        # had no new bytes for longer than idle_backoff_seconds (polled less often).
        time.sleep(PipelineConfig().idle_backoff_seconds + 2 * COMMIT)
        sampler.sample()
        c0, parts0, t0 = sampler.cpu_seconds(), sampler.cpu_by(part), time.monotonic()
        time.sleep(window)
        sampler.sample()
        cpu, dt = sampler.cpu_seconds() - c0, time.monotonic() - t0
        parts = _minus(sampler.cpu_by(part), parts0)
    finally:
        sampler.stop()
        _stop(proc)
    pct = 100 * cpu / dt
    res = {
        "runs": n,
        "cpu_core_pct": pct,
        "parts_core_pct": _pct(parts, dt),
        "window_s": dt,
        "ready": ready,
    }
    print(
        f"  {n} idle runs watched: {pct:.1f}% of one core over {dt:.0f} s "
        f"({_said(res['parts_core_pct'])}); ready: {ready}",
        flush=True,
    )
    return res


def _minus(a: dict[str, float], b: dict[str, float]) -> dict[str, float]:
    return {k: a.get(k, 0.0) - b.get(k, 0.0) for k in WATCH_PARTS}


def _pct(parts: dict[str, float], seconds: float) -> dict[str, float]:
    return {k: 100 * v / max(seconds, 1e-9) for k, v in parts.items()}


def _said(parts: dict[str, float]) -> str:
    """The per-part split in words: `driver 12.0%, tailers 0.0%, ...`."""
    return ", ".join(f"{k} {parts.get(k, 0.0):.1f}%" for k in WATCH_PARTS)


CONTENDERS = ("watch", "watch-ray", "before")
"""The watches `bench live` can measure (module docstring)."""


def _contenders(names: tuple[str, ...], baseline: str | None) -> dict[str, dict]:
    """name -> the `watch` arguments and environment of each contender asked for."""
    from bench.batch import _pythonpath

    if "before" in names and not baseline:
        raise SystemExit("bench live: the `before` contender needs --baseline DIR")
    made = {
        "watch": {"args": (), "env": None},
        "watch-ray": {"args": ("--ray",), "env": None},
        "before": {"args": (), "env": {"PYTHONPATH": f"{baseline}:{_pythonpath()}"}},
    }
    return {n: made[n] for n in names}


PARTS = ("fleets", "idle", "idle1000", "s3")
"""The cases of `bench live` (`--part`): live fleets, 100 idle runs, 1,000 idle
runs, S3 requests."""


def main(
    quick: bool,
    work: Path,
    parts: tuple[str, ...] | None = None,
    contenders: tuple[str, ...] = ("watch",),
    baseline: str | None = None,
    sizes: tuple[int, ...] | None = None,
) -> dict:
    """The cases of `parts` (default all; `idle1000` not in `--quick`) for each
    contender, in turns whose order alternates; `sizes`: the live fleets' sizes."""
    from bench.live_s3 import s3_requests

    parts = parts or tuple(p for p in PARTS if not (quick and p == "idle1000"))
    who = _contenders(contenders, baseline)
    res: dict = {"poll_s": POLL, "commit_s": COMMIT, "contenders": list(who)}
    turns = [0]

    def each(case, *a) -> dict:
        """`case` for every contender (by name when there are several), the order
        reversed every other time."""
        got = {}
        order = list(who) if turns[0] % 2 == 0 else list(who)[::-1]
        turns[0] += 1
        for name in order:
            print(f"  [{name}]", flush=True)
            got[name] = case(*a, tag="" if name == "watch" else f"-{name}", **who[name])
        return got if len(got) > 1 else got[order[0]]

    if "fleets" in parts:
        print(
            f"live: fleets of live runs (watch --poll {POLL} --commit-every {COMMIT})", flush=True
        )
        # Writers hold after their first steps until every run has its first latest
        # row: only steps written after that are measured.
        steps, interval = (40, 0.5) if quick else (60, 1.0)
        res["fleets"] = [
            each(lambda n, **kw: live_fleet(n, steps, work, interval, **kw), n)
            for n in sizes or ((10,) if quick else (10, 50, 100))
        ]
        mine = [f.get("watch", f) for f in res["fleets"]]
        res["p99_median"] = median([f["p99"] for f in mine if "p99" in f])
    if "idle" in parts:
        print("live: idle cost", flush=True)
        res["idle"] = each(
            lambda n, **kw: idle_cost(n, 5 if quick else 30, work, **kw), 20 if quick else 100
        )
    if "idle1000" in parts:
        print("live: idle cost, 1,000 runs", flush=True)
        res["idle_1000"] = each(lambda n, **kw: idle_cost(n, 30, work, **kw), 1000)
    if "s3" in parts:
        print("live: S3 requests per idle run per poll (moto server)", flush=True)
        res["s3"] = s3_requests(5 if quick else 20, 5 if quick else 20, work, steady=not quick)
    return res
