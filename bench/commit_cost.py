"""Cost of one commit of many runs (the live path's per-commit work), in one process.

    python -m bench.commit_cost [--runs 100] [--reps 3]

Simulates `--runs` small runs, reads them once, then times `RunGroup.commit` (steps,
run_health snapshot and latest, checkpoint per run) with 1 and with 8 commit threads,
interleaved, a fresh output folder each time. Prints seconds per commit and per run.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from rlstream.config import PipelineConfig
from rlstream.pipeline.local import build_group, local_executor
from rlstream.pipeline.verdicts import health_hooks
from rlstream.simulate import SimConfig, simulate


def one_commit(root: Path, out: Path, threads: int) -> float:
    group = build_group(
        [str(root)], str(out), PipelineConfig(commit_threads=threads), **health_hooks()
    )
    group.poll(local_executor(group.storage))
    t0 = time.perf_counter()
    group.commit()
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=100)
    ap.add_argument("--reps", type=int, default=3)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="rlsc-") as tmp:
        root = Path(tmp) / "runs"
        simulate(root, SimConfig(runs=args.runs, steps=5, tokens=8, groups=2, group_size=2, seed=1))
        times: dict[int, list[float]] = {1: [], 8: []}
        for rep in range(args.reps):
            for threads in (1, 8):
                times[threads].append(one_commit(root, Path(tmp) / f"out-{threads}-{rep}", threads))
    for threads, ts in times.items():
        med = statistics.median(ts)
        print(
            f"commit of {args.runs} runs, {threads} thread(s): median {med:.3f} s "
            f"({1000 * med / args.runs:.1f} ms per run; rounds {', '.join(f'{t:.3f}' for t in ts)})"
        )


if __name__ == "__main__":
    main()
