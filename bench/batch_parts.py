"""Parts 4 and 5 of the batch benchmark (bench/batch.py): worker-stage scaling on one
local Ray, and peak memory against archive size."""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from pathlib import Path

from bench.batch import BatchSize, simulate_root
from bench.common import median, ray_env, rlstream_cmd, run_measured


def worker_scaling(root: Path, work: Path, tokens: float, reps: int) -> dict:
    """Worker-stage time with 1 and 2 workers on one local Ray, interleaved, after
    one untimed warm-up run: the first `driver.run` in a fresh Ray also pays one-time
    costs (actor classes exported, modules imported and files read for the first
    time), which fell on whichever worker count came first (11.7 s against 6.0-6.5 s
    for the 1-worker stage on 2026-11-30)."""
    os.environ.update(ray_env())
    import ray

    from rlstream.config import PipelineConfig
    from rlstream.runtime import driver

    tmp = tempfile.mkdtemp(prefix="rlb", dir="/tmp")
    ray.init(
        address="local", num_cpus=2, include_dashboard=False, _temp_dir=tmp, log_to_driver=False
    )
    stage = "drain"
    orig = getattr(driver.ActorPools, stage)
    spans: list[float] = []

    def timed(self, *a, **k):
        t0 = time.perf_counter()
        try:
            return orig(self, *a, **k)
        finally:
            spans.append(time.perf_counter() - t0)

    setattr(driver.ActorPools, stage, timed)
    res: dict[int, list[float]] = {1: [], 2: []}
    totals: dict[int, list[float]] = {1: [], 2: []}
    try:
        warm = work / "scale-warm-up"
        driver.run([str(root)], str(warm), PipelineConfig(), driver.RuntimeConfig(workers=2))
        shutil.rmtree(warm, ignore_errors=True)
        spans.clear()
        for rep in range(reps):
            for w in (1, 2) if rep % 2 == 0 else (2, 1):
                out = work / f"scale-{w}-{rep}"
                spans.clear()
                t0 = time.perf_counter()
                driver.run([str(root)], str(out), PipelineConfig(), driver.RuntimeConfig(workers=w))
                totals[w].append(time.perf_counter() - t0)
                res[w].append(sum(spans))
                shutil.rmtree(out, ignore_errors=True)
                print(
                    f"  rep {rep + 1} workers={w}: worker stage {res[w][-1]:6.2f} s "
                    f"(run() total {totals[w][-1]:6.2f} s)",
                    flush=True,
                )
    finally:
        setattr(driver.ActorPools, stage, orig)
        ray.shutdown()
        shutil.rmtree(tmp, ignore_errors=True)
    m1, m2 = median(res[1]), median(res[2])
    print(
        f"  worker stage ({stage}): 1 worker {m1:.2f} s ({tokens / m1 / 1e6:.2f} Mtok/s), "
        f"2 workers {m2:.2f} s ({tokens / m2 / 1e6:.2f} Mtok/s): speed-up {m1 / m2:.2f}x "
        "(target >= 1.7x)"
    )
    return {"stage": stage, "one": m1, "two": m2, "speedup": m1 / m2}


def memory_growth(work: Path, size: BatchSize) -> dict:
    """Peak RSS of `rlstream analyze` on an archive and on one 10 times larger, both
    on a private Ray started at once."""
    env = ray_env()
    out = {}
    for factor in (1, 10):
        root = work / f"mem-x{factor}"
        big = BatchSize(size.runs * factor, size.steps, size.groups, size.group_size, size.tokens)
        st = simulate_root(root, big, seed=11)
        # Ray at once for both sizes: the small one would otherwise start none, and the
        # growth would compare a driver alone with a driver and its Ray.
        cmd = [*rlstream_cmd(), "analyze", str(root), "--out", str(work / f"mo{factor}")]
        t = run_measured([*cmd, "--start-ray-after", "0"], env)
        out[factor] = {
            "bytes": st["all_bytes"],
            "tokens": st["tokens"],
            "peak_rss": t.peak_rss,
            "wall": t.wall,
        }
        print(
            f"  archive x{factor:<2d} {st['all_bytes'] / 1e6:8.1f} MB {st['tokens']:>11,} tokens: "
            f"peak RSS {t.peak_rss / 2**20:6.0f} MiB, {t.wall:6.1f} s",
            flush=True,
        )
        shutil.rmtree(root, ignore_errors=True)
        shutil.rmtree(work / f"mo{factor}", ignore_errors=True)
    growth = out[10]["peak_rss"] / out[1]["peak_rss"] - 1
    print(f"  peak memory growth for a 10x archive: {growth * 100:+.1f}% (target < 20%)")
    return {"x1": out[1], "x10": out[10], "growth": growth}
