"""Speed benchmarks of rlstream, one entry point.

    python -m bench batch [--quick] [--reps N] [--work DIR] [--json FILE] [--part P,...]
    python -m bench live  [--quick] [--work DIR] [--json FILE] [--part P,...] [--runs N]
                          [--contenders C,...] [--baseline DIR]
    python -m bench long  [--quick] [--runs N] [--steps N] [--interval S]
    python -m bench report [--quick] [--runs N] [--reps N] [--steps N] [--work DIR]
    python -m bench s3    [--quick] [--reps N] [--live-only] [--steps N] [--interval S]
    python -m bench all   [--quick]
    python -m bench startup [--reps N] [--baseline DIR]

`batch`: rlstream analyze vs DuckDB vs a plain script on the same simulated
transcripts, worker scaling, memory against archive size (bench/batch.py).
`live`: 10/50/100 live simulated runs under `rlstream watch`: keeping up, freshness,
CPU; the idle cost of 100 unchanging runs; S3 requests per idle run per poll against
a moto server (bench/live.py). `long`: a time-compressed long history under `watch`:
resume state size, files under OUT, commit time, RSS, status/report time at 10 % and
100 % of it (bench/long.py). `report`: `render_report` on OUTs of the same runs with
200 and 2,000 steps each, in one process (bench/report_scale.py).
`startup`: time from `rlstream watch`'s start to the first run_health rows of 10
runs (bench/startup.py; not part of `all`).
`s3`: the same `rlstream analyze` from local disk, from moto's S3 server at loopback
and behind a proxy adding 10 and 50 ms per request; `watch` of 20 live runs on S3 at
50 ms (bench/s3.py; not part of `all`). `--quick` shrinks everything to about a minute for CI
(which checks that it runs, never a speed). Results and commands: bench/README.md.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

from bench.common import machine


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench", description=__doc__.split("\n\n")[0])
    p.add_argument("what", choices=("batch", "live", "long", "report", "s3", "startup", "all"))
    p.add_argument("--quick", action="store_true", help="CI-sized: about a minute")
    p.add_argument("--reps", type=int, help="timed rounds (default 3, report 5; quick 1)")
    p.add_argument("--work", help="scratch folder (default: a temp dir, removed after)")
    p.add_argument("--json", help="also write the results as JSON here")
    p.add_argument(
        "--scale",
        type=int,
        default=1,
        help="batch: K times as many runs, contenders only (how fixed costs amortise)",
    )
    p.add_argument(
        "--archive",
        action="store_true",
        help="batch: 16 runs x 50 steps x 48 attempts, about 1 GB (issue 16's archive)",
    )
    p.add_argument(
        "--baseline",
        help="batch, startup, live: a folder holding another revision's rlstream package "
        "(git archive REV | tar -x -C DIR), measured in the same rounds (live: the "
        "`before` contender)",
    )
    p.add_argument(
        "--contenders",
        help="batch: only these contenders, comma-separated (rlstream, joined, duckdb, "
        "plain, before), and only the comparison part; live: these watches (watch, "
        "watch-ray, before; default watch)",
    )
    p.add_argument(
        "--part",
        help="batch: only these parts, comma-separated (compare, scaling, memory; "
        "default all three); live: (fleets, idle, idle1000, s3; default all)",
    )
    p.add_argument(
        "--runs",
        type=int,
        help="long: runs (default 20); report: (default 6); live: only a fleet of this many "
        "live runs (default 10, 50 and 100)",
    )
    p.add_argument(
        "--steps",
        type=int,
        help="long: steps per run (default 2000); s3 live: (default 60); report: also "
        "time an OUT whose steps table is extended to this many steps per run",
    )
    p.add_argument(
        "--interval",
        type=float,
        help="long: seconds per step (default 0.15); s3 live: (default 1.0)",
    )
    p.add_argument("--live-only", action="store_true", help="s3: only the live part")
    a = p.parse_args(argv)
    work = Path(a.work) if a.work else Path(tempfile.mkdtemp(prefix="rlbench", dir="/tmp"))
    work.mkdir(parents=True, exist_ok=True)
    print(f"machine: {machine()}")
    print(f"command: python -m bench {' '.join(argv if argv is not None else sys.argv[1:])}")
    t0 = time.perf_counter()
    results: dict = {"machine": machine()}
    try:
        if a.what in ("batch", "all"):
            from bench import batch

            only = tuple(a.contenders.split(",")) if a.contenders else ()
            parts = tuple(a.part.split(",")) if a.part else None
            results["batch"] = batch.main(
                a.quick, a.reps, work, a.scale, a.archive, a.baseline, only, parts
            )
        if a.what in ("live", "all"):
            from bench import live

            results["live"] = live.main(
                a.quick,
                work,
                tuple(a.part.split(",")) if a.part else None,
                tuple(a.contenders.split(",")) if a.contenders else ("watch",),
                a.baseline,
                (a.runs,) if a.runs else None,
            )
        if a.what == "long":
            from bench import long

            results["long"] = long.main(
                a.quick, work, a.runs or 20, a.steps or 2000, a.interval or 0.15
            )
        if a.what == "report":
            from bench import report_scale

            results["report"] = report_scale.main(a.quick, work, a.runs or 6, a.reps or 5, a.steps)
        if a.what == "startup":
            from bench import startup

            results["startup"] = startup.main(work, a.reps or 3, a.baseline)
        if a.what == "s3":
            from bench import s3

            results["s3"] = s3.main(a.quick, a.reps, work, a.steps, a.interval or 1.0, a.live_only)
    finally:
        if not a.work:
            shutil.rmtree(work, ignore_errors=True)
    print(f"done in {time.perf_counter() - t0:.0f} s")
    if a.json:
        Path(a.json).write_text(json.dumps(results, indent=2, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
