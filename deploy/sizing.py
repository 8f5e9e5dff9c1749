"""Measure what docs/deploy.md's sizing table needs, on this machine.

    .venv/bin/python deploy/sizing.py [--runs 16] [--steps 40] [--tokens 600]

Simulates a fleet, then runs `analyze` on a private local Ray with 1 and with 2
worker actors and prints, per pool size: tokens/s and MB/s over the whole analyze,
and the peak resident memory (RSS) of each worker actor and of the tailer. It also
prints the checkpoint size per run: the pickled state a tailer holds per watched run.
Numbers depend on the machine; the docs quote a run of this script.
"""

from __future__ import annotations

import argparse
import json
import resource
import shutil
import tempfile
import time
from pathlib import Path


def _peak_rss_mb(actor) -> float:
    import ray

    kb = ray.get(actor.__ray_call__.remote(lambda self: resource.getrusage(0).ru_maxrss))
    return kb / 1024


def measure(root: Path, out: Path, workers: int) -> dict:
    from rlstream.config import PipelineConfig
    from rlstream.runtime.driver import Fleet, RuntimeConfig

    fleet = Fleet([str(root)], str(out), PipelineConfig(), RuntimeConfig(workers=workers))
    try:
        t0 = time.monotonic()
        fleet.analyze()
        el = time.monotonic() - t0
        totals = fleet.totals()
        return {
            "workers": workers,
            "seconds": round(el, 2),
            "tokens": totals["tokens"],
            "tokens_per_s": round(totals["tokens"] / el),
            "mb_per_s": round(totals["bytes"] / el / 1e6, 1),
            "worker_peak_rss_mb": [round(_peak_rss_mb(w)) for w in fleet.workers],
            "tailer_peak_rss_mb": [round(_peak_rss_mb(t)) for t in fleet.tailers],
        }
    finally:
        fleet.close()


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--runs", type=int, default=16)
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--tokens", type=float, default=600)
    args = p.parse_args()

    import ray

    from rlstream.runtime.cluster import RayConfig, connect
    from rlstream.simulate import SimConfig, simulate

    base = Path(tempfile.mkdtemp(prefix="rlsize"))
    simulate(base / "runs", SimConfig(runs=args.runs, steps=args.steps, tokens=args.tokens))
    size = sum(f.stat().st_size for f in (base / "runs").rglob("*") if f.is_file())
    print(f"fleet: {args.runs} runs x {args.steps} steps, {size / 1e6:.0f} MB", flush=True)
    connect(RayConfig(num_cpus=2))
    try:
        for workers in (1, 2):
            got = measure(base / "runs", base / f"out{workers}", workers)
            print(json.dumps(got), flush=True)
        ckpts = list((base / "out2").rglob("*.state"))
        per_run = sum(f.stat().st_size for f in ckpts) / max(1, len(ckpts))
        print(json.dumps({"checkpoint_bytes_per_run": round(per_run)}))
    finally:
        ray.shutdown()
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
