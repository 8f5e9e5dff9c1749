"""Cost of kept samples and transcript scanners (issue 28), never a timed test.

    python -m bench.samples [--work DIR] [--reps N] [--json FILE] [--steps N] [--live N]

1. Kept-sample bytes per step against the step's size: one run of 64 attempts a step
   (16 groups x 4) and one of 1,024 (64 x 16), full traces with text, analyzed in
   process; the samples rows' text bytes (`sent` + `returned`) and Parquet bytes of
   OUT/samples per step, and their ratio (flat: about 1).
2. What scanning and keeping add to `analyze`: the same archive with text (8 runs,
   half of them hacking) analyzed in process with `[samples] enabled` true and false,
   `--reps` rounds alternating the two, wall and CPU seconds of each; the ratio of the
   medians (target at most 1.15); and where the added time goes (`added_by_function`:
   one profiled run of each, the functions whose own time grew most).
3. What they add to a live watch's CPU (`--live N`, default 20 runs; 0 skips it):
   `bench.live`'s live fleet (runs written in real time, half of them hacking) watched
   twice, with a rules file saying `[samples] enabled = false` and without; CPU of the
   watch's process tree as % of one core over the same window, and their ratio
   (target at most 1.15).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any


def _size(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*.parquet"))


def bytes_per_step(work: Path, steps: int) -> dict[str, Any]:
    from rlstream.fleet.read import read_table
    from rlstream.pipeline.local import analyze_local
    from rlstream.simulate import SimConfig, simulate

    out: dict[str, Any] = {}
    for groups, size in ((16, 4), (64, 16)):
        n = groups * size
        root, dst = work / f"runs-{n}", work / f"out-{n}"
        shutil.rmtree(root, ignore_errors=True)
        shutil.rmtree(dst, ignore_errors=True)
        cfg = SimConfig(
            runs=1, steps=steps, scenarios=("transcript_hack_flags",), seed=5,
            groups=groups, group_size=size, tokens=64, onset_frac=0.3,
        )  # fmt: skip
        simulate(root, cfg)
        analyze_local([str(root)], str(dst))
        per: dict[int, list[int]] = {}
        for r in read_table(str(dst), "samples").to_pylist():
            got = per.setdefault(r["step"], [0, 0])
            got[0] += 1
            got[1] += len((r["sent"] or "").encode()) + len((r["returned"] or "").encode())
        rows = [(s, n, b) for s, (n, b) in sorted(per.items())]
        out[str(n)] = {
            "attempts_per_step": n,
            "rows_per_step": statistics.mean(r[1] for r in rows),
            "text_bytes_per_step": statistics.mean(r[2] for r in rows),
            "parquet_bytes_per_step": _size(dst / "samples") / len(rows),
            "transcript_bytes_per_step": _size_files(root) / steps,
        }
    a, b = out["64"], out["1024"]
    out["ratio_text_bytes_1024_vs_64"] = b["text_bytes_per_step"] / a["text_bytes_per_step"]
    out["ratio_rows_1024_vs_64"] = b["rows_per_step"] / a["rows_per_step"]
    return out


def _size_files(root: Path) -> int:
    return sum(p.stat().st_size for p in root.rglob("transcripts/*.json"))


def overhead(work: Path, reps: int, steps: int) -> dict[str, Any]:
    from rlstream.config import PipelineConfig
    from rlstream.metrics.scanners import SamplesConfig
    from rlstream.pipeline.local import analyze_local
    from rlstream.simulate import SimConfig, simulate

    root = work / "archive"
    shutil.rmtree(root, ignore_errors=True)
    scen = ("transcript_hack_flags", "healthy")
    simulate(root, SimConfig(runs=8, steps=steps, scenarios=scen, seed=11, groups=8,
                             group_size=8, tokens=256))  # fmt: skip
    mb = sum(p.stat().st_size for p in root.rglob("*") if p.is_file()) / 1e6
    times: dict[str, list[tuple[float, float]]] = {"on": [], "off": []}
    for i in range(reps):
        for mode in ("off", "on") if i % 2 == 0 else ("on", "off"):
            dst = work / f"out-{mode}"
            shutil.rmtree(dst, ignore_errors=True)
            cfg = PipelineConfig(samples=SamplesConfig(enabled=mode == "on"))
            t0, c0 = time.perf_counter(), time.process_time()
            analyze_local([str(root)], str(dst), cfg)
            times[mode].append((time.perf_counter() - t0, time.process_time() - c0))
    med = {m: (statistics.median(w for w, _ in v), statistics.median(c for _, c in v))
           for m, v in times.items()}  # fmt: skip
    return {
        "archive_mb": round(mb, 1),
        "reps": reps,
        "added_by_function_s": added_by_function(root, work),
        "wall_s": {m: round(v[0], 2) for m, v in med.items()},
        "cpu_s": {m: round(v[1], 2) for m, v in med.items()},
        "ratio_wall_on_vs_off": med["on"][0] / med["off"][0],
        "ratio_cpu_on_vs_off": med["on"][1] / med["off"][1],
    }


def added_by_function(root: Path, work: Path, top: int = 8) -> dict[str, float]:
    """Where the samples' cost goes: one `analyze` of `root` with samples on and one
    off, each under cProfile; the functions whose own time grew most (seconds, on
    minus off), with the whole difference as "total"."""
    import cProfile
    import pstats

    from rlstream.config import PipelineConfig
    from rlstream.metrics.scanners import SamplesConfig
    from rlstream.pipeline.local import analyze_local

    own: dict[str, dict[str, float]] = {}
    for mode in ("off", "on"):
        dst = work / f"out-prof-{mode}"
        shutil.rmtree(dst, ignore_errors=True)
        cfg = PipelineConfig(samples=SamplesConfig(enabled=mode == "on"))
        prof = cProfile.Profile()
        prof.runcall(analyze_local, [str(root)], str(dst), cfg)
        stats = pstats.Stats(prof).stats  # type: ignore[attr-defined]
        own[mode] = {f"{Path(k[0]).name}:{k[2]}": v[2] for k, v in stats.items()}
    grew = {k: own["on"].get(k, 0.0) - own["off"].get(k, 0.0) for k in own["on"]}
    best = sorted(grew.items(), key=lambda kv: -kv[1])[:top]
    total = sum(own["on"].values()) - sum(own["off"].values())
    return {"total": round(total, 3), **{k: round(v, 3) for k, v in best}}


def live_overhead(work: Path, runs: int, steps: int) -> dict[str, Any]:
    from bench.live import live_fleet

    rules = work / "samples-off.toml"
    rules.write_text("[samples]\nenabled = false\n")
    scen = ("transcript_hack_flags", "healthy")
    got = {}
    for mode, args in (("off", ("--rules", str(rules))), ("on", ())):
        res = live_fleet(runs, steps, work, 1.0, args=args, tag=f"-{mode}", scenarios=scen)
        got[mode] = {k: res[k] for k in ("cpu_core_pct", "window_s", "p99", "keeps_up")}
    return {
        "runs": runs,
        "steps": steps,
        **got,
        "ratio_cpu_on_vs_off": got["on"]["cpu_core_pct"] / got["off"]["cpu_core_pct"],
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m bench.samples", description=__doc__.split("\n\n")[0]
    )
    p.add_argument("--work", type=Path, default=None)
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--steps", type=int, default=12)
    p.add_argument("--json", type=Path, default=None)
    p.add_argument("--live", type=int, default=20, help="runs of the live case (0: skip)")
    args = p.parse_args(argv)
    work = args.work or Path(tempfile.mkdtemp(prefix="rlstream-bench-samples-"))
    work.mkdir(parents=True, exist_ok=True)
    res = {
        "cpus": os.cpu_count(),
        "bytes": bytes_per_step(work, args.steps),
        "overhead": overhead(work, args.reps, args.steps),
    }
    if args.live:
        res["live"] = live_overhead(work, args.live, 40)
    text = json.dumps(res, indent=2)
    print(text)
    if args.json:
        args.json.write_text(text + "\n")
    if args.work is None:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
