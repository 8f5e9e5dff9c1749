"""Reading output tables back for comparisons (Delta via delta-rs, then DuckDB)."""

from __future__ import annotations

import math
from typing import Any

import duckdb

KEY = "run_id, step"


def read_steps(out: str, storage_options: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """Every steps row, ordered by (run_id, step), as dicts; maps as sorted dicts.
    Without `commit_seq`: which commit wrote a row differs between a watch and a batch
    run of the same data."""
    from rlstream.fleet.read import read_table

    con = duckdb.connect()
    con.register("steps", read_table(str(out), "steps", storage_options))
    rel = con.sql(f"select * exclude (commit_seq) from steps order by {KEY}")
    cols = rel.columns
    return [dict(zip(cols, r, strict=True)) for r in rel.fetchall()]


def assert_same_rows(a: list[dict[str, Any]], b: list[dict[str, Any]]) -> None:
    assert [(r["run_id"], r["step"]) for r in a] == [(r["run_id"], r["step"]) for r in b]
    for ra, rb in zip(a, b, strict=True):
        for k, va in ra.items():
            vb = rb[k]
            if isinstance(va, float) and isinstance(vb, float) and math.isnan(va):
                assert math.isnan(vb), (ra["run_id"], ra["step"], k)
            else:
                assert va == vb, (ra["run_id"], ra["step"], k, va, vb)
