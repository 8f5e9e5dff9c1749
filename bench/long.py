"""Long-watch benchmark: does a days-long `watch` stay bounded? Time-compressed.

    python -m bench long [--quick] [--runs 20] [--steps 2000] [--interval 0.15]

`simulate_live` writes `runs` runs of `steps` steps each in real time (a step every
`interval` s; 1 group of 2 attempts a step, short completions, so the history is
long in steps and commits rather than heavy in tokens). `rlstream watch --poll 0.5
--commit-every 1 --maintain-every 10 --retention 20` runs as a subprocess: the
maintenance period and retention are the defaults (120 s, 300 s) divided by 12 and
15, as the history is compressed. When every run's `last_step` (read as `status`
reads it) reaches 10 % of the steps, and again at the end, it records:

- resume state bytes per run (mean and max over `OUT/_resume/*.state`);
- files under OUT (data, logs and resume state together);
- commit time at equal work: the watch logs, every 10 commits, their mean time and
  the run commits and step rows they carried. The 30 commits after the 10 % point
  and the last 30 logged before the first writer wrote its last step are taken:
  both while every writer is active, so both carry about the same steps per commit
  (printed), and the figures are the mean commit time and the commit time per
  committed step row (late window over 10 %);
- RSS of the watch's process tree (driver, tailers, workers, Ray) and of the driver;
- `status` and `report` time: `read_latest` and `render_report` in this process,
  median of 3.

At the end the watch is stopped (SIGTERM) and `rlstream compact OUT` runs once; the
files under OUT are counted again. Figures are for this machine and its load; read
them as ratios of the 100 % point to the 10 % point (bench/README.md).
"""

from __future__ import annotations

import json
import os
import re
import statistics
import subprocess
import threading
import time
from pathlib import Path

from bench.common import ray_env, rlstream_cmd
from bench.live import _latest_steps, _stop, _wait
from rlstream.runtime.procs import children_map, tree

WATCH_FLAGS = ["--poll", "0.5", "--commit-every", "1", "--maintain-every", "10"]
RETENTION = "20"


def _rss_kb(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def _files(out: Path) -> int:
    return sum(1 for p in out.rglob("*") if p.is_file())


def _timed(fn, reps: int = 3) -> float:
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


COMMIT_LINE = re.compile(
    r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d),(\d{3}) .*?commits: mean ([0-9.]+) s, max [0-9.]+ s over the last (\d+) "
    r"\((\d+) run commits, (\d+) step rows\)",
    re.M,
)
WINDOW_LINES = 3
"""Log lines (of 10 commits each) per commit-time window."""


Line = tuple[float, int, int, int, float]


def _commit_lines(log: Path) -> list[Line]:
    """(mean s, commits, run commits, step rows, wall time logged) of each of the
    watch's commit lines (the log's times are local time, as `time.mktime` reads)."""
    text = log.read_text("utf-8", "replace")
    return [
        (
            float(m),
            int(n),
            int(r),
            int(s),
            time.mktime(time.strptime(t, "%Y-%m-%d %H:%M:%S")) + int(ms) / 1000,
        )
        for t, ms, m, n, r, s in COMMIT_LINE.findall(text)
    ]


def last_before(lines: list[Line], first: int, until: float) -> list[Line]:
    """The last WINDOW_LINES lines from index `first` on logged at or before `until`."""
    return [x for x in lines[first:] if x[4] <= until][-WINDOW_LINES:]


def _first_writer_done(root: Path) -> float:
    """The earliest time at which a run wrote its last steps.jsonl line."""
    done = []
    for f in root.glob("*/steps.jsonl"):
        last = f.read_bytes().rstrip().rsplit(b"\n", 1)[-1]
        done.append(json.loads(last)["time"])
    return min(done)


def commit_window(lines: list[Line]) -> dict:
    """Mean commit time, step rows per commit and commit time per step row."""
    commits = sum(x[1] for x in lines)
    seconds = sum(x[0] * x[1] for x in lines)
    rows = sum(x[3] for x in lines)
    return {
        "commits": commits,
        "commit_s_mean": round(seconds / commits, 4) if commits else None,
        "step_rows_per_commit": round(rows / commits, 1) if commits else None,
        "commit_ms_per_step_row": round(1000 * seconds / rows, 2) if rows else None,
    }


def snapshot(out: Path, proc: subprocess.Popen) -> dict:
    from rlstream.fleet.read import read_latest
    from rlstream.fleet.report import render_report

    states = [p.stat().st_size for p in (out / "_resume").glob("*.state")]
    pids = tree(proc.pid, kids=children_map())
    return {
        "state_bytes_mean": round(statistics.mean(states)) if states else None,
        "state_bytes_max": max(states, default=None),
        "files": _files(out),
        "rss_tree_mb": round(sum(_rss_kb(p) for p in pids) / 1024),
        "rss_driver_mb": round(_rss_kb(proc.pid) / 1024),
        "status_s": round(_timed(lambda: read_latest(str(out))), 4),
        "report_s": round(_timed(lambda: render_report(str(out))), 4),
    }


def main(quick: bool, work: Path, runs: int = 20, steps: int = 2000, interval: float = 0.15):
    from rlstream.simulate import SimConfig, simulate_live

    if quick:
        runs, steps, interval = 4, 100, 0.1
    root, out, log = work / "long", work / "long-out", work / "long-watch.log"
    scen = ("healthy",)
    cfg = SimConfig(runs=runs, steps=steps, groups=1, group_size=2, tokens=8, scenarios=scen)
    print(
        f"long: {runs} runs x {steps} steps written live (a step every {interval} s), "
        f"watch {' '.join(WATCH_FLAGS)} --retention {RETENTION}",
        flush=True,
    )
    writer = threading.Thread(target=simulate_live, args=(root, cfg, interval), daemon=True)
    writer.start()
    _wait(lambda: root.exists() and len(list(root.iterdir())) >= runs, 120)
    cmd = [*rlstream_cmd(), "watch", str(root), "--out", str(out), *WATCH_FLAGS]
    cmd += ["--retention", RETENTION]
    with open(log, "w") as err:
        proc = subprocess.Popen(
            cmd,
            stdout=subprocess.DEVNULL,
            stderr=err,
            env={**os.environ, **ray_env()},
            text=True,
        )
    proc.log_path = log  # type: ignore[attr-defined]  # read by _wait on an early exit
    res: dict = {"runs": runs, "steps": steps, "interval_s": interval}
    try:

        def reached(frac: float) -> bool:
            got = _latest_steps(out) if (out / "run_health" / "_delta_log").exists() else {}
            return len(got) == runs and min(got.values()) >= frac * steps - 1

        _wait(lambda: reached(0.1), 3600, proc)
        first = len(_commit_lines(log))
        res["at_10"] = snapshot(out, proc)
        _wait(lambda: len(_commit_lines(log)) >= first + WINDOW_LINES, 600, proc)
        res["at_10"].update(commit_window(_commit_lines(log)[first : first + WINDOW_LINES]))
        print(f"long: at 10 %: {res['at_10']}", flush=True)
        writer.join()
        _wait(lambda: reached(1.0), 3600, proc)
        # The second window: the last 30 commits logged before the first writer wrote its
        # last step, so every writer still wrote and it carries the work of the first
        # window (the writers do not all stop at once: later commits carry less).
        later = first + WINDOW_LINES
        late = last_before(_commit_lines(log), later, _first_writer_done(root))
        res["at_90"] = commit_window(late) if len(late) == WINDOW_LINES else {}
        print(f"long: the last commits while every writer wrote: {res['at_90']}", flush=True)
        if not res["at_90"]:
            print(
                "long: fewer than 30 commits after the first window were logged while "
                "every writer wrote, so commit time at equal work is not measured (use "
                "more --steps)",
                flush=True,
            )
        time.sleep(35)  # one more commit-time log line and a maintenance pass
        res["at_100"] = snapshot(out, proc)
        print(f"long: at 100 %: {res['at_100']}", flush=True)
    finally:
        _stop(proc)
    subprocess.run(
        [*rlstream_cmd(), "compact", str(out), "--retention", RETENTION],
        check=True,
        capture_output=True,
        env={**os.environ, **ray_env()},
    )
    res["files_after_compact"] = _files(out)
    a, b = res["at_10"], res["at_100"]
    res["growth"] = {
        k: round(b[k] / a[k], 2)
        for k in ("state_bytes_mean", "state_bytes_max", "rss_tree_mb", "status_s", "report_s")
        if a.get(k) and b.get(k)
    }
    w = res["at_90"]
    for k in ("commit_s_mean", "commit_ms_per_step_row"):
        if a.get(k) and w.get(k):
            res["growth"][k] = round(w[k] / a[k], 2)
    print(
        f"long: files under OUT after `rlstream compact`: {res['files_after_compact']}; "
        f"100 % / 10 %: {res['growth']}",
        flush=True,
    )
    return res
