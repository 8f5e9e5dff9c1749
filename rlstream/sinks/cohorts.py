"""The `cohorts` table: peer bands per (cohort, step, figure).

A band row holds n (runs of the cohort with the figure at that step), p10, p50, p90,
median and MAD (scaled by 1.4826) of the figure across them (`rlstream.health.peers`).
Rows are built by the cohort fold (`rlstream.pipeline.cohorts`) and ride in the commit
of the run whose new step they were computed for, under that run's application
transaction (`run_id`, `commit_seq`): written exactly once like the run's other rows.
A band is written again when more runs of the cohort reach the step; a reader keeps,
per (cohort, step, figure), the row with the largest n, then the newest `as_of`
(`newest_bands`).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa

COHORTS_SCHEMA = pa.schema(
    [
        pa.field("cohort", pa.string(), nullable=False),
        pa.field("step", pa.int64(), nullable=False),
        pa.field("figure", pa.string(), nullable=False),
        pa.field("n", pa.int64(), nullable=False),
        pa.field("p10", pa.float64()),
        pa.field("p50", pa.float64()),
        pa.field("p90", pa.float64()),
        pa.field("median", pa.float64()),
        pa.field("mad", pa.float64()),
        pa.field("run_id", pa.string(), nullable=False),
        pa.field("as_of", pa.timestamp("ms", tz="UTC"), nullable=False),
        pa.field("commit_seq", pa.int64(), nullable=False),
    ],
    metadata={"rlstream.schema_version": "1", "rlstream.table": "cohorts"},
)


def cohorts_table(rows: list[dict[str, Any]]) -> pa.Table:
    """Band rows (`as_of` in seconds) as an Arrow table of COHORTS_SCHEMA."""
    fixed = [{**r, "as_of": round(r["as_of"] * 1000)} for r in rows]
    return pa.Table.from_pylist(fixed, schema=COHORTS_SCHEMA)


def newest_bands(table: pa.Table) -> pa.Table:
    """Per (cohort, step, figure): the row with the largest n, then the newest as_of."""
    if table.num_rows == 0:
        return table
    t = table.sort_by(
        [
            ("cohort", "ascending"),
            ("figure", "ascending"),
            ("step", "ascending"),
            ("n", "ascending"),
            ("as_of", "ascending"),
            ("commit_seq", "ascending"),
        ]
    )
    keys = [t.column(c).to_numpy(zero_copy_only=False) for c in ("cohort", "figure", "step")]
    change = np.zeros(t.num_rows, dtype=bool)
    for k in keys:
        change[:-1] |= k[1:] != k[:-1]
    change[-1] = True
    return t.take(pa.array(np.flatnonzero(change)))
