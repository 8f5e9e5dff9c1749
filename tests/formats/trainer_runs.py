"""Small runs of each trainer format for the reader tests, and a way to read tables.

`sim_runs(tmp)` simulates a few short Loops runs once; `trainer_run(tmp, fmt)` writes
them the way trainer `fmt` does (rlstream.simulate.trainer_files, field for field
from each trainer's writer; sources in docs/formats.md). `table(out, name)` reads an
OUT Delta table back as a list of dicts.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import duckdb

from rlstream.fleet.read import read_table
from rlstream.simulate.config import SimConfig
from rlstream.simulate.trainers import apply, load_run, writes
from rlstream.simulate.writer import simulate

FORMATS = ("tinker", "verl", "prime-rl", "trl")


def sim_runs(root: Path, steps: int = 5, scenarios: tuple[str, ...] = ("healthy",)) -> Path:
    """Simulated Loops runs (2 groups of 4 attempts per step, short completions)."""
    cfg = SimConfig(
        runs=len(scenarios), steps=steps, scenarios=scenarios, groups=3, group_size=4, tokens=12
    )
    simulate(root, cfg)
    return root


def trainer_run(src: Path, dst: Path, fmt: str, upto: int | None = None) -> Path:
    """The first simulated run of `src` written under `dst` as trainer `fmt` does;
    with `upto`, only the writes of its first `upto` batches (steps, config first)."""
    folder = sorted(p for p in src.iterdir() if (p / "run.json").exists())[0]
    batches = writes(load_run(folder), fmt)
    for batch in batches[: upto if upto is not None else len(batches)]:
        apply(dst, batch)
    return dst


def batches(src: Path, fmt: str) -> list[list[Any]]:
    folder = sorted(p for p in src.iterdir() if (p / "run.json").exists())[0]
    return writes(load_run(folder), fmt)


def table(out: Path, name: str, order: str = "") -> list[dict[str, Any]]:
    """Rows of OUT's Delta table `name` (read through its log), in `order`."""
    t = read_table(str(out), name)
    if not t.num_columns:
        return []
    rel = duckdb.from_arrow(t).query("t", f"select * from t {order}")
    cols = rel.columns
    return [dict(zip(cols, row, strict=True)) for row in rel.fetchall()]


def jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_bytes().splitlines() if line.strip()]
