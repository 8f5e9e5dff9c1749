"""Reading output tables back for comparisons (with DuckDB, as users do)."""

from __future__ import annotations

import math
from typing import Any

import duckdb

KEY = "run_id, step"


def read_steps(out: str, fs: Any = None) -> list[dict[str, Any]]:
    """Every steps row, ordered by (run_id, step), as dicts; maps as sorted dicts."""
    con = duckdb.connect()
    if fs is not None:
        con.register_filesystem(fs)
    rel = con.sql(
        f"select * from read_parquet('{out}/steps/*/*.parquet', hive_partitioning=false) "
        f"order by {KEY}"
    )
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
