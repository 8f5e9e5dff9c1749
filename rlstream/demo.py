"""`rlstream demo`: simulate a small fleet of runs, analyze it on an embedded local Ray,
and show where the tables are and how to query them."""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

DEMO_SCENARIOS = (
    "healthy",
    "entropy_collapse",
    "mismatch_kl_rising",
    "degenerate_outputs",
    "rollout_failure_burst",
    "tasks_too_hard",
    "healthy",
    "length_explosion",
)


def run_demo(args: argparse.Namespace) -> int:
    from rlstream.config import PipelineConfig
    from rlstream.report import print_summaries
    from rlstream.runtime.driver import RuntimeConfig, run
    from rlstream.simulate import SimConfig, simulate

    base = Path(args.dir or tempfile.mkdtemp(prefix="rlstream-demo-"))
    runs, out = base / "runs", base / "out"
    scen = tuple(DEMO_SCENARIOS[i % len(DEMO_SCENARIOS)] for i in range(args.runs))
    t0 = time.monotonic()
    labels = simulate(runs, SimConfig(runs=args.runs, steps=args.steps, scenarios=scen, seed=1))
    print(
        f"simulated {len(labels)} runs x {args.steps} steps under {runs} ({time.monotonic() - t0:.1f}s)"
    )
    for lab in labels:
        print(f"  {lab.run_id}  {lab.scenario:<22} onset step {lab.onset_step}")
    t0 = time.monotonic()
    summaries = run([str(runs)], str(out), PipelineConfig(), RuntimeConfig(), watch=False)
    print(f"\nanalyzed on a local Ray in {time.monotonic() - t0:.1f}s; tables under {out}\n")
    print_summaries(sorted(summaries, key=_severity), sys.stdout)
    print(
        "\nQuery the tables with DuckDB (installed with the dev extra), e.g.:\n"
        f'  python -c "import duckdb; duckdb.sql(\\"select run_id, step, reward_mean, '
        f"mismatch_kl, entropy_estimate from read_parquet('{out}/steps/*/*.parquet') "
        f'order by run_id, step\\").show()"\n'
        f'  python -c "import duckdb; duckdb.sql(\\"select run_id, status, findings from '
        f"read_parquet('{out}/run_health/latest/*.parquet')\\\").show()\""
    )
    return 0


def _severity(s: dict) -> tuple[int, str]:
    order = {"critical": 0, "warning": 1, "stalled": 2, "healthy": 3, "finished": 4}
    return order.get(s.get("status") or "", 5), s["run_id"]
