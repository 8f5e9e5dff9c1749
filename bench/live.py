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
- **Idle cost**: 100 runs (and 1,000, not in `--quick`) written once and left unfinished (no `finished_at`,
  max_steps far away), watched; once every run has its latest row and the runs have
  been quiet for longer than `idle_backoff_seconds` (steady state), CPU of the watch
  process tree over a window, as % of one core, split into rlstream's processes
  (driver, Tailer and Worker actors) and Ray's own (GCS, raylet, agents, idle pool).
- **S3 requests per idle run per poll**: idle runs uploaded to moto's S3 server on
  127.0.0.1 (run in this process, every HTTP request counted by a WSGI wrapper);
  `rlstream watch s3://...` with `--poll P`; requests over a window / runs / polls,
  in two windows: the first right after every run has its latest row (each run still
  polled every time), the second once they have been quiet for longer than
  `idle_backoff_seconds` (steady state, as for the idle cost; the figure reported)
  (polls = window / P, an upper bound on the polls made, so the figure is a lower
  bound only by the few polls skipped when a commit overran).
"""

from __future__ import annotations

import collections
import json
import os
import signal
import socket
import subprocess
import threading
import time
from pathlib import Path

from bench.common import TreeSampler, freshness, held_clock, median, ray_env, rlstream_cmd
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
               tag: str = "", scenarios: tuple[str, ...] = ("healthy",)) -> dict:  # fmt: skip
    """`n` runs written live and watched (`args`: more `watch` arguments; `tag` names
    the folders, so one work dir holds several cases)."""
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
    proc = _watch(str(root), out, args=args)
    sampler = TreeSampler(proc.pid, interval=0.5).start()
    mon = LatestMonitor(out).start()
    try:
        ready = _wait(lambda: len(mon.last) >= n, 300, proc)
        t_ready = time.time()
        up.set()
        cpu0 = sampler.cpu_seconds()
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
        cpu = sampler.cpu_seconds() - cpu0
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
    }
    res["keeps_up"] = bool(ready and not missing and caught_up <= bound + interval)
    print(
        f"  {n:3d} live runs: freshness p50 {res['p50']:.2f} s, p99 {res['p99']:.2f} s, "
        f"max {res['max']:.2f} s over {len(fresh)} step lines (bound {bound:.0f} s); "
        f"missing {missing}; last line seen {caught_up:.2f} s after the writer stopped; "
        f"CPU {res['cpu_core_pct']:.0f}% of one core; keeps up: {res['keeps_up']}",
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


def idle_cost(n: int, window: float, work: Path) -> dict:
    root, out = work / f"idle{n}", work / f"idle{n}-out"
    idle_runs(root, n)
    proc = _watch(str(root), out)
    sampler = TreeSampler(proc.pid, interval=0.5).start()
    try:
        ready = _wait(lambda: len(_latest_steps(out)) >= n, 300, proc)
        # Steady state: the first commits of caught-up runs are done and the runs have
        # had no new bytes for longer than idle_backoff_seconds (polled less often).
        time.sleep(PipelineConfig().idle_backoff_seconds + 2 * COMMIT)
        sampler.sample()
        c0, t0 = sampler.cpu_seconds(), time.monotonic()
        own0 = sampler.cpu_seconds(_rlstream_own(proc.pid))
        time.sleep(window)
        sampler.sample()
        cpu, dt = sampler.cpu_seconds() - c0, time.monotonic() - t0
        own = sampler.cpu_seconds(_rlstream_own(proc.pid)) - own0
    finally:
        sampler.stop()
        _stop(proc)
    pct, own_pct = 100 * cpu / dt, 100 * own / dt
    print(
        f"  {n} idle runs watched: {pct:.1f}% of one core over {dt:.0f} s "
        f"(target < 5%): rlstream's processes (driver, tailers, workers) {own_pct:.1f}%, "
        f"Ray's own (GCS, raylet, agents, idle pool) {pct - own_pct:.1f}%; ready: {ready}",
        flush=True,
    )
    return {
        "runs": n,
        "cpu_core_pct": pct,
        "rlstream_processes_pct": own_pct,
        "ray_daemons_pct": pct - own_pct,
        "window_s": dt,
        "ready": ready,
    }


def _rlstream_own(driver: int):
    """Picks the watch's own processes: the driver and the Tailer/Worker actors."""
    return lambda pid, cmd: pid == driver or cmd.startswith(("ray::Tailer", "ray::Worker"))


class CountingMoto:
    """moto's S3 server on 127.0.0.1, counting every request it serves."""

    def __init__(self) -> None:
        from moto.server import DomainDispatcherApplication, create_backend_app
        from werkzeug.serving import make_server

        self.counts: collections.Counter[str] = collections.Counter()
        self.lock = threading.Lock()
        app = DomainDispatcherApplication(create_backend_app)

        def counted(environ, start_response):
            q = environ.get("QUERY_STRING", "")
            kind = (
                "list"
                if "list-type" in q
                or (environ["REQUEST_METHOD"] == "GET" and environ["PATH_INFO"].count("/") <= 1)
                else environ["REQUEST_METHOD"]
            )
            with self.lock:
                self.counts[kind] += 1
            return app(environ, start_response)

        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.server = make_server("127.0.0.1", self.port, counted, threaded=True)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()
        self.endpoint = f"http://127.0.0.1:{self.port}"

    def snapshot(self) -> collections.Counter[str]:
        with self.lock:
            return collections.Counter(self.counts)

    def stop(self) -> None:
        self.server.shutdown()


def s3_requests(n: int, window: float, work: Path, steady: bool = True) -> dict:
    import logging

    logging.getLogger("werkzeug").setLevel(logging.WARNING)
    moto = CountingMoto()
    env = {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_ENDPOINT_URL": moto.endpoint,
    }
    os.environ.update(env)
    try:
        import s3fs

        fs = s3fs.S3FileSystem(
            skip_instance_cache=True, use_listings_cache=False, endpoint_url=moto.endpoint
        )
        fs.mkdir("rlbench")
        local = work / f"s3idle{n}"
        idle_runs(local, n)
        fs.put(str(local), "rlbench/runs", recursive=True)
        out = work / f"s3idle{n}-out"
        proc = _watch("s3://rlbench/runs", out, env)
        try:
            ready = _wait(lambda: len(_latest_steps(out)) >= n, 300, proc)
            t_ready = time.monotonic()
            time.sleep(2 * COMMIT)
            windows = [_count(moto, window)]  # just read: every run polled each time
            if steady:  # no new bytes for longer than idle_backoff_seconds
                quiet = PipelineConfig().idle_backoff_seconds + 2 * COMMIT
                time.sleep(max(0.0, t_ready + quiet - time.monotonic()))
                windows.append(_count(moto, window))
        finally:
            _stop(proc)
    finally:
        moto.stop()
    res: dict = {"runs": n, "ready": ready}
    for name, (diff, dt) in zip(("first", "steady"), windows, strict=False):
        per = sum(diff.values()) / n / (dt / POLL)
        print(
            f"  S3 ({name} window): {n} idle runs, {sum(diff.values())} requests in {dt:.0f} s "
            f"(~{dt / POLL:.0f} polls): {per:.2f} requests per run per poll {dict(diff)}; "
            f"ready: {ready}",
            flush=True,
        )
        res[name] = {"requests": dict(diff), "window_s": dt, "per_run_per_poll": per}
    res["per_run_per_poll"] = res["steady" if steady else "first"]["per_run_per_poll"]
    return res


def _count(moto: CountingMoto, window: float) -> tuple[collections.Counter[str], float]:
    """Requests moto answered over `window` seconds, and the seconds it took."""
    c0, t0 = moto.snapshot(), time.monotonic()
    time.sleep(window)
    return moto.snapshot() - c0, time.monotonic() - t0


def main(quick: bool, work: Path) -> dict:
    res: dict = {"poll_s": POLL, "commit_s": COMMIT}
    print(f"live: fleets of live runs (watch --poll {POLL} --commit-every {COMMIT})", flush=True)
    sizes = (10,) if quick else (10, 50, 100)
    # Writers hold after their first steps until every run has its first latest row:
    # only steps written after that are measured.
    res["fleets"] = [
        live_fleet(n, 40 if quick else 60, work, interval=0.5 if quick else 1.0) for n in sizes
    ]
    print("live: idle cost", flush=True)
    res["idle"] = idle_cost(20 if quick else 100, 5 if quick else 30, work)
    if not quick:
        res["idle_1000"] = idle_cost(1000, 30, work)
    print("live: S3 requests per idle run per poll (moto server)", flush=True)
    res["s3"] = s3_requests(5 if quick else 20, 5 if quick else 20, work, steady=not quick)
    res["p99_median"] = median([f["p99"] for f in res["fleets"]])
    return res
