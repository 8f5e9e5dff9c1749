"""Reading OUT's Delta tables back in tests, with DuckDB over Arrow as users do.

`out_sql(out, query)` runs `query` with one view per table (`steps`, `quarantine`,
`alerts`, `run_health`, `cohorts`, `samples`) plus `latest` (the newest run_health row per run, as
`rlstream status` reads it). A table not written yet is an empty view.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa

from rlstream.fleet.read import read_latest, read_table

TABLES = ("steps", "quarantine", "alerts", "run_health", "cohorts", "samples")


def out_tables(
    out: str | Path, storage_options: dict[str, Any] | None = None
) -> dict[str, pa.Table]:
    got = {t: read_table(str(out), t, storage_options) for t in TABLES}
    latest = read_latest(str(out), storage_options)
    got["latest"] = pa.Table.from_pylist(latest) if latest else got["run_health"].slice(0, 0)
    return got


def out_con(out: str | Path, storage_options: dict[str, Any] | None = None):
    """A DuckDB connection with one view per table of OUT."""
    con = duckdb.connect()
    for name, t in out_tables(out, storage_options).items():
        if t.num_columns:
            con.register(name, t)
        else:
            con.execute(f"create view {name} as select 1 as none where false")
    return con


def out_sql(
    out: str | Path, query: str, storage_options: dict[str, Any] | None = None
) -> list[tuple]:
    return out_con(out, storage_options).sql(query).fetchall()
