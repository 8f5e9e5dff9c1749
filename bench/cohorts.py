"""Measured quality of `unlike_peers` on simulated cohorts.

    python -m bench.cohorts --seeds 801 802 803 804          (or bench.detectors --cohorts)

Per seed the simulator writes `--cohorts` cohorts of `--runs` runs each
(`SimConfig.cohort_size`): the runs of a cohort share one recipe (config and latent
parameters) and differ in their random content, as the seeds of one sweep do. In every
second cohort the last run's sampler/trainer KL is `--odd-kl` times its siblings' from
the first step (`SimConfig.odd_kl`): inside every absolute threshold and never rising,
so no per-run rule can see it. The in-process pipeline analyzes them with the health
hooks (cohorts by config fingerprint, bands, `unlike_peers`), and the alerts table says
which runs' `unlike_peers` fired.

Reported: recall (odd runs where it fired), false alarms per 10 runs (firing episodes
on the other runs, per 10 of them), how many cohorts the fingerprint found (it should
find exactly the simulated ones), and, as a check of the premise, odd runs on which
any per-run rule fired.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any


def run_seed(
    seed: int, cohorts: int, runs: int, steps: int, odd_kl: float, rules: str | None
) -> dict[str, Any]:
    from rlstream.fleet.read import read_latest, read_table
    from rlstream.health import DEFAULT_RULES, load_rules
    from rlstream.pipeline.local import analyze_local
    from rlstream.pipeline.verdicts import health_hooks
    from rlstream.simulate import SimConfig, simulate

    cfg = load_rules(rules) if rules else DEFAULT_RULES
    sim = SimConfig(
        runs=cohorts * runs,
        steps=steps,
        seed=seed,
        tokens=24.0,
        groups=4,
        group_size=4,
        cohort_size=runs,
        odd_kl=odd_kl,
    )
    with tempfile.TemporaryDirectory(prefix="rlsc-") as tmp:
        labels = simulate(os.path.join(tmp, "runs"), sim)
        out = os.path.join(tmp, "out")
        analyze_local([os.path.join(tmp, "runs")], out, **health_hooks(cfg))
        alerts = read_table(out, "alerts").to_pylist()
        latest = read_latest(out)
    odd = {lb.run_id for lb in labels if lb.run.endswith("-odd")}
    fired: dict[str, int] = {}
    other: dict[str, set[str]] = {}
    for a in alerts:
        if a["to_state"] != "firing" or a["from_state"] == "firing":
            continue
        if a["code"] == "unlike_peers":
            fired[a["run_id"]] = fired.get(a["run_id"], 0) + 1
        elif a["severity"] in ("warning", "critical"):
            other.setdefault(a["run_id"], set()).add(a["code"])
    ids = [lb.run_id for lb in labels]
    return {
        "seed": seed,
        "runs": len(ids),
        "odd": len(odd),
        "hits": sum(1 for r in odd if r in fired),
        "false_episodes": sum(n for r, n in fired.items() if r not in odd),
        "false_runs": sum(1 for r in fired if r not in odd),
        "cohorts_found": len({r["cohort"] for r in latest}),
        "odd_with_per_run_findings": sorted(c for r in odd for c in other.get(r, ())),
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m bench.cohorts", description=__doc__.split("\n\n")[0]
    )
    p.add_argument("--seeds", type=int, nargs="+", default=[801, 802, 803, 804])
    p.add_argument(
        "--n-cohorts", type=int, default=6, help="cohorts per seed (half have an odd run)"
    )
    p.add_argument("--runs", type=int, default=5, help="runs per cohort (>= 4)")
    p.add_argument("--steps", type=int, default=150)
    p.add_argument("--odd-kl", type=float, default=3.0, help="KL of the odd run / its siblings'")
    p.add_argument("--rules", default=None, help="rules TOML (default: built-in)")
    p.add_argument("--jobs", type=int, default=min(2, os.cpu_count() or 1))
    p.add_argument("--json", type=Path, default=None, help="also write the summary here")
    args = p.parse_args(argv)
    if args.runs < 4:
        p.error("--runs must be >= 4 (unlike_peers needs 3 peers)")
    t0 = time.time()
    n = len(args.seeds)
    with ProcessPoolExecutor(max_workers=args.jobs) as pool:
        per = list(
            pool.map(
                run_seed,
                args.seeds,
                [args.n_cohorts] * n,
                [args.runs] * n,
                [args.steps] * n,
                [args.odd_kl] * n,
                [args.rules] * n,
            )
        )
    runs = sum(s["runs"] for s in per)
    odd = sum(s["odd"] for s in per)
    hits = sum(s["hits"] for s in per)
    clean = runs - odd
    false_eps = sum(s["false_episodes"] for s in per)
    summary = {
        "seeds": args.seeds,
        "cohorts_per_seed": args.n_cohorts,
        "runs_per_cohort": args.runs,
        "steps": args.steps,
        "odd_kl": args.odd_kl,
        "runs": runs,
        "odd_runs": odd,
        "recall": hits / odd if odd else None,
        "false_alarms_per_10_runs": 10.0 * false_eps / clean if clean else None,
        "runs_with_false_alarm": sum(s["false_runs"] for s in per),
        "cohorts_found_per_seed": [s["cohorts_found"] for s in per],
        "odd_runs_with_per_run_findings": [c for s in per for c in s["odd_with_per_run_findings"]],
        "seconds": round(time.time() - t0, 1),
    }
    rec, fa10 = summary["recall"], summary["false_alarms_per_10_runs"]
    met = rec is not None and rec >= 0.95 and fa10 is not None and fa10 <= 1.0
    print(
        f"unlike_peers, seeds {args.seeds}: {runs} runs in {args.n_cohorts * n} cohorts of "
        f"{args.runs}, {args.steps} steps, odd run KL x{args.odd_kl}\n"
        f"  recall {hits}/{odd} = {summary['recall']:.1%}\n"
        f"  false alarms per 10 runs {summary['false_alarms_per_10_runs']:.2f} "
        f"({false_eps} episodes on {clean} runs)\n"
        f"  cohorts found per seed {summary['cohorts_found_per_seed']} "
        f"(simulated: {args.n_cohorts})\n"
        f"  per-run findings on odd runs: {summary['odd_runs_with_per_run_findings'] or 'none'}\n"
        f"  targets (recall >= 95%, <= 1 false alarm per 10 runs): "
        f"{'met' if met else 'missed'}\n"
        f"  {summary['seconds']} s"
    )
    if args.json:
        args.json.write_text(json.dumps(summary, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
