"""Batch benchmark: `rlstream analyze` against DuckDB and a plain script, same files.

1. Simulate transcripts (sizes printed in tokens and bytes).
2. Time `reps` rounds (files read once before, so the page cache is warm for all);
   each round runs every contender once, in a rotated order, each
   as its own process on the same files: `rlstream analyze` end to end (CLI, private
   Ray started and stopped, Parquet written); the same joining a standing one-node
   Ray (`--ray-address`; the Ray is started before the clock and stopped after it,
   its processes' CPU and memory counted, bench/standing.py); DuckDB (read_json +
   unnest + GROUP BY, all threads); the plain script (json + numpy, one process).
   Medians are reported: wall seconds, tokens/s, MB/s, peak RSS of the process tree,
   CPU seconds.
3. The first round's results of every contender are checked to agree with
   rlstream's on the per-(run, step) token aggregates (bench.contenders.COLUMNS,
   relative 1e-9).
4. Worker-stage scaling: in this process, one local Ray (2 CPUs); one untimed
   warm-up run, then `driver.run` with 1 and with 2 workers, interleaved; the time
   of the worker stage (`Fleet.analyze`, or the batch `Fleet.poll`) is taken by
   wrapping that method from here.
5. Memory against archive size: peak RSS of `rlstream analyze` on the data set and on
   one 10 times larger (runs x10).
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from dataclasses import dataclass, replace
from pathlib import Path

from bench.common import Timed, dir_bytes, median, ray_env, rlstream_cmd, run_measured
from bench.contenders import compare
from bench.kernel import figures as kernel_figures
from bench.standing import StandingRay


@dataclass(frozen=True)
class BatchSize:
    runs: int
    steps: int
    groups: int
    group_size: int
    tokens: float


FULL = BatchSize(runs=8, steps=40, groups=8, group_size=8, tokens=512)
QUICK = BatchSize(runs=2, steps=8, groups=4, group_size=4, tokens=256)
ARCHIVE = BatchSize(runs=16, steps=50, groups=5, group_size=8, tokens=512)
"""Issue 16's archive, about 1 GB: 16 runs x 50 steps, 50 transcripts a step (40 attempts
and the simulator's extra ones) of about 900 tokens."""
PARTS = ("compare", "scaling", "memory")
"""What `main` measures: the contenders, worker scaling, memory against archive size."""
MEM_FULL = BatchSize(runs=2, steps=10, groups=4, group_size=8, tokens=256)
MEM_QUICK = BatchSize(runs=1, steps=6, groups=2, group_size=4, tokens=128)


def simulate_root(root: Path, size: BatchSize, seed: int = 7) -> dict[str, float]:
    from rlstream.simulate import SimConfig, simulate

    simulate(
        root,
        SimConfig(
            runs=size.runs,
            steps=size.steps,
            groups=size.groups,
            group_size=size.group_size,
            tokens=size.tokens,
            seed=seed,
        ),
    )
    tokens = 0
    files = 0
    for p in root.glob("*/transcripts/*.json"):
        obj = json.loads(p.read_bytes())
        files += 1
        tokens += sum(
            g["completion_len"] for g in obj["generations"] if obj.get("trace") != "samples"
        )
    return {
        "tokens": tokens,
        "transcript_files": files,
        "transcript_bytes": dir_bytes(root, "*/transcripts/*.json"),
        "all_bytes": dir_bytes(root, "**/*"),
    }


def _contender_cmd(name: str, root: Path, work: Path, i: int) -> tuple[list[str], Path]:
    out_json = work / f"{name}-{i}.json"
    py = [sys.executable, "-m", "bench.contenders"]
    if name in RLSTREAM:
        out = work / f"rls-out-{name}-{i}"
        return [*rlstream_cmd(), "analyze", str(root), "--out", str(out)], out
    if name == "duckdb":
        return [*py, "duckdb", str(root), str(out_json)], out_json
    return [*py, "plain", str(root), str(out_json)], out_json


def _run_contender(
    name: str, root: Path, work: Path, i: int, env: dict, baseline: str | None = None
) -> tuple[Timed, Path]:
    """One timed run. `joined` gets a standing Ray, started before the clock and
    stopped after it, that has already served one small `analyze` (a fresh cluster's
    first job ran 0.7-1.1 s slower in 3 of 4 pairs on 2026-11-30) and is idle again;
    its processes' CPU and memory are counted with the command's."""
    cmd, out = _contender_cmd(name, root, work, i)
    if name == "before":
        return run_measured(cmd, {**env, "PYTHONPATH": f"{baseline}:{env['PYTHONPATH']}"}), out
    if name != "joined":
        return run_measured(cmd, env), out
    tiny = work / "joined-warm-up"
    if not tiny.exists():
        simulate_root(tiny, BatchSize(runs=1, steps=2, groups=2, group_size=4, tokens=32))
    with StandingRay() as head:
        address = ["--ray-address", head.address]
        warm = work / f"joined-warm-up-out-{i}"
        run_measured([*rlstream_cmd(), "analyze", str(tiny), "--out", str(warm), *address], env)
        shutil.rmtree(warm)
        head.settle()
        return run_measured([*cmd, *address], env, also=head.roots()), out


def _results(name: str, out: Path, root: Path, work: Path) -> dict:
    if name in RLSTREAM:
        tmp = work / "rls.json"
        run_measured(
            [
                sys.executable,
                "-m",
                "bench.contenders",
                "rlstream-out",
                str(out),
                str(tmp),
                "--runs-root",
                str(root),
            ]
        )
        out = tmp
    return json.loads(out.read_text())


CONTENDERS = ("rlstream", "joined", "duckdb", "plain")
RLSTREAM = ("rlstream", "joined", "before")
PAIRS = (
    ("rlstream", "duckdb"),
    ("joined", "duckdb"),
    ("rlstream", "plain"),
    ("before", "duckdb"),
    ("rlstream", "before"),
)
"""Tokens/s ratios reported when both contenders ran."""
LABELS = {
    "rlstream": "rlstream analyze (where it chooses: this process, or worker processes beside it)",
    "before": "rlstream analyze of --baseline (the code before a change), same command",
    "joined": "rlstream analyze --ray-address (a standing Ray)",
    "duckdb": "DuckDB",
    "plain": "plain script",
}


def batch_compare(
    root: Path,
    work: Path,
    stats: dict[str, float],
    reps: int,
    baseline: str | None = None,
    only: tuple[str, ...] = (),
    target: float = 1.5,
) -> dict:
    """The contenders in interleaved rounds; with `baseline` (a folder holding another
    revision's `rlstream` package, e.g. `git archive main | tar -x -C DIR`) also that
    revision's `rlstream analyze`, same command, same rounds ("before"). `target`: the
    rlstream / DuckDB ratio the issue asks of this archive (1.5, or 2 at 10x)."""
    env = {**ray_env(), "PYTHONPATH": _pythonpath()}
    names = only or ((*CONTENDERS, "before") if baseline else CONTENDERS)
    for p in root.glob("**/*"):  # warm the page cache for every contender alike
        if p.is_file():
            p.read_bytes()
    timings: dict[str, list] = {n: [] for n in names}
    results = {}
    for rep in range(reps):
        k = rep % len(names)
        for name in names[k:] + names[:k]:
            t, out = _run_contender(name, root, work, rep + 1, env, baseline)
            timings[name].append(t)
            if rep == 0:
                results[name] = _results(name, out, root, work)
            if name in RLSTREAM:
                shutil.rmtree(out, ignore_errors=True)
            print(
                f"  rep {rep + 1} {name:9s} {t.wall:7.2f} s wall  {t.cpu:7.2f} s CPU  "
                f"peak RSS {t.peak_rss / 2**20:7.0f} MiB",
                flush=True,
            )
    # Every contender's numbers from the first round, checked against rlstream's.
    ref = names[0]
    agree = {other: compare(results[ref], results[other]) for other in names[1:]}
    for other, problems in agree.items():
        status = "agree" if not problems else f"DISAGREE ({len(problems)}): {problems[:3]}"
        print(f"  {ref} vs {other}: {len(results[ref])} (run, step) rows {status}")
    table = {}
    for name in names:
        wall = median([t.wall for t in timings[name]])
        table[name] = {
            "wall_s": wall,
            "cpu_s": median([t.cpu for t in timings[name]]),
            "tokens_per_s": stats["tokens"] / wall,
            "mb_per_s": stats["transcript_bytes"] / 1e6 / wall,
            "peak_rss_mib": median([t.peak_rss for t in timings[name]]) / 2**20,
            "cpu_also_s": median([t.cpu_also for t in timings[name]]),
            "walls": [round(t.wall, 2) for t in timings[name]],
        }
    print()
    print(
        f"  {'contender':10s} {'wall s':>8s} {'CPU s':>8s} {'Mtok/s':>8s} {'MB/s':>8s} "
        f"{'peak RSS MiB':>13s}  walls"
    )
    for name, r in table.items():
        print(
            f"  {name:10s} {r['wall_s']:8.2f} {r['cpu_s']:8.2f} {r['tokens_per_s'] / 1e6:8.2f} "
            f"{r['mb_per_s']:8.1f} {r['peak_rss_mib']:13.0f}  {r['walls']}"
        )
    for name in names:
        print(f"  {name:10s} = {LABELS[name]}")
    rate = {name: r["tokens_per_s"] for name, r in table.items()}
    ratios = {f"{a}_vs_{b}": rate[a] / rate[b] for a, b in PAIRS if a in rate and b in rate}
    shown = []
    for key, v in ratios.items():
        a, b = key.split("_vs_")
        label = f"{a} / {'DuckDB' if b == 'duckdb' else b}"
        if key == "rlstream_vs_duckdb":
            label += " tokens/s"
        aim = f" (target >= {target:g}x)" if key == "rlstream_vs_duckdb" else ""
        shown.append(f"{label}: {v:.2f}x{aim}")
    print("  " + "; ".join(shown))
    return {
        "agree": agree,
        "table": table,
        "ratio_vs_duckdb": ratios.get("rlstream_vs_duckdb"),
        "joined_vs_duckdb": ratios.get("joined_vs_duckdb"),
        "ratio_vs_plain": ratios.get("rlstream_vs_plain"),
        "ratios": ratios,
    }


def _pythonpath() -> str:
    here = str(Path(__file__).resolve().parent.parent)
    old = os.environ.get("PYTHONPATH")
    return here if not old else f"{here}:{old}"


def _simulated(root: Path, size: BatchSize) -> dict[str, float]:
    """The archive under `root`, simulated unless a kept `--work` folder already holds
    this size's (its stats are kept next to it)."""
    marker = root.parent / f"{root.name}.json"
    if marker.exists() and root.exists():
        kept = json.loads(marker.read_text())
        if kept["size"] == size.__dict__:
            print(f"batch: reusing the archive in {root} ({size})", flush=True)
            return kept["stats"]
    shutil.rmtree(root, ignore_errors=True)
    print(f"batch: simulating {size} ...", flush=True)
    st = simulate_root(root, size)
    marker.write_text(json.dumps({"size": size.__dict__, "stats": st}))
    return st


def main(
    quick: bool,
    reps: int | None,
    work: Path,
    scale: int = 1,
    archive: bool = False,
    baseline: str | None = None,
    contenders: tuple[str, ...] = (),
    parts: tuple[str, ...] | None = None,
) -> dict:
    """The `parts` (default `PARTS`); with `scale` > 1, only the contenders, on an archive
    of `scale` times as many runs (fixed costs weigh less as the archive grows); with
    `archive`, on `ARCHIVE` (issue 16's shape) instead of `FULL`; with `baseline`,
    also the rlstream of that folder (`batch_compare`); with `contenders`, only
    those (the first is the reference of the agreement check), and unless `parts`
    says otherwise only this part."""
    if parts is None:  # by default --scale and --contenders measure the contenders alone
        parts = ("compare",) if scale > 1 or contenders else PARTS
    unknown = set(parts) - set(PARTS)
    if unknown:
        raise SystemExit(f"bench batch --part: unknown {sorted(unknown)}; choose from {PARTS}")
    size = QUICK if quick else ARCHIVE if archive else FULL
    if scale > 1:
        size = replace(size, runs=size.runs * scale)
    reps = reps or (1 if quick else 3)
    root = work / "batch"
    from bench.batch_parts import memory_growth, worker_scaling  # they import this module

    result: dict = {"size": size.__dict__}
    if "compare" in parts or "scaling" in parts:
        st = _simulated(root, size)
        result["data"] = st
        print(
            f"  {st['transcript_files']:,} transcripts, {st['tokens']:,} tokens, "
            f"{st['transcript_bytes'] / 1e6:.1f} MB of transcripts "
            f"({st['all_bytes'] / 1e6:.1f} MB with steps/rollouts)",
            flush=True,
        )
    if "compare" in parts:
        print("batch: contenders (timed rounds, order rotated; then agreement)", flush=True)
        target = 2.0 if scale >= 10 else 1.5
        result["compare"] = batch_compare(root, work, st, reps, baseline, contenders, target)
        env = {**ray_env(), "PYTHONPATH": _pythonpath()}
        result["kernel"] = kernel_figures(root, st["tokens"], env, baseline)
    if "scaling" in parts:
        print("batch: worker-stage scaling, 1 vs 2 workers", flush=True)
        result["scaling"] = worker_scaling(root, work, st["tokens"], max(1, reps))
    if "memory" in parts:
        print("batch: peak memory against archive size", flush=True)
        result["memory"] = memory_growth(work, MEM_QUICK if quick else MEM_FULL)
    return result
