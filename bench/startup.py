"""Start-up: how soon `rlstream watch` commits its first run_health rows.

`python -m bench startup [--reps N] [--baseline DIR]`. 10 idle runs
(`bench.live.idle_runs`: written once, unfinished); `rlstream watch ROOT --out OUT
--poll 1 --commit-every 2` as a subprocess, a fresh OUT each round; the clock runs
from the command's start to the first run_health row of any run and of all 10,
read as `status` reads them (`read_latest`, every 0.1 s). Also: the peak RSS and
CPU seconds of the watch's process tree until then, and the start-up phase line the
watch logs. With `--baseline` (a folder holding another revision's `rlstream`
package), that revision's watch runs in the same rounds, the order alternating, so
the two can be compared as a ratio.
"""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

from bench.batch import _pythonpath
from bench.common import TreeSampler, median
from bench.live import _latest_steps, _stop, _watch, idle_runs, log_tail

RUNS = 10


def _first_rows(
    root: Path, out: Path, env: dict[str, str] | None
) -> tuple[float, float, int, float, str]:
    """(first row s, all runs s, peak tree RSS bytes, tree CPU s until all runs had a
    row, the watch's start-up phase line or "")."""
    t0 = time.monotonic()
    proc = _watch(str(root), out, env)
    sampler = TreeSampler(proc.pid).start()
    first = None
    try:
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"watch exited {proc.returncode}: {log_tail(proc)}")
            n = len(_latest_steps(out))
            if n and first is None:
                first = time.monotonic() - t0
            if n >= RUNS:
                all_ = time.monotonic() - t0
                sampler.sample()
                return first or 0.0, all_, sampler.peak_rss, sampler.cpu_seconds(), _phases(proc)
            if time.monotonic() - t0 > 600:
                raise RuntimeError("no run_health rows for every run within 600 s")
            time.sleep(0.1)
    finally:
        sampler.stop()
        _stop(proc)
        shutil.rmtree(out, ignore_errors=True)


def _phases(proc) -> str:
    """The watch's start-up phase line, once it logged it (a revision without it: "")."""
    _stop(proc)
    for line in log_tail(proc, 1 << 20).splitlines():
        if "start-up (s since the process began)" in line:
            return line.split("start-up ", 1)[1]
    return ""


def main(work: Path, reps: int, baseline: str | None = None) -> dict:
    root = work / "startup-runs"
    idle_runs(root, RUNS)
    names = ["now", "before"] if baseline else ["now"]
    env = {"now": {"PYTHONPATH": _pythonpath()}}
    if baseline:
        env["before"] = {"PYTHONPATH": f"{baseline}:{_pythonpath()}"}
    got: dict[str, list[tuple[float, float]]] = {n: [] for n in names}
    for rep in range(reps):
        for name in names if rep % 2 == 0 else names[::-1]:
            first, all_, rss, cpu, phases = _first_rows(
                root, work / f"startup-out-{name}", env[name]
            )
            got[name].append((first, all_, rss, cpu))
            print(
                f"  rep {rep + 1} {name:6s}: first run_health row {first:6.2f} s, "
                f"all {RUNS} runs {all_:6.2f} s, peak RSS {rss / 2**20:5.0f} MiB, "
                f"CPU {cpu:5.1f} s; load {os.getloadavg()[0]:.1f}",
                flush=True,
            )
            if phases:
                print(f"    {phases}", flush=True)
    res = {
        n: {
            "first_s": median([r[0] for r in v]),
            "all_s": median([r[1] for r in v]),
            "peak_rss": median([r[2] for r in v]),
            "cpu_s": median([r[3] for r in v]),
            "rounds": [[round(r[0], 2), round(r[1], 2)] for r in v],
        }
        for n, v in got.items()
    }
    for n, r in res.items():
        print(
            f"  {n:6s}: median first row {r['first_s']:.2f} s, all {RUNS} runs {r['all_s']:.2f} s, "
            f"peak RSS {r['peak_rss'] / 2**20:.0f} MiB, CPU {r['cpu_s']:.1f} s"
        )
    if baseline:
        print(
            f"  now / before (all {RUNS} runs): {res['now']['all_s'] / res['before']['all_s']:.2f}"
        )
    shutil.rmtree(root, ignore_errors=True)
    return res
