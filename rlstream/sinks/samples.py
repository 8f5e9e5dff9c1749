"""The `samples` table: kept attempts per (run, step), with their text excerpts.

Rows are built when a step becomes final (`rlstream.pipeline.samples`) and ride in the
run's commit like its steps rows (`rlstream.pipeline.commit`): written exactly once,
stamped with the commit's `commit_seq`, compacted by maintenance. Columns are
docs/schema.md's. A step keeps at most 2K + K + P rows (top, bottom, flagged, probe
panel; K = `[samples] top`, P = `[samples] probes`), whatever its size; each row holds
at most 16 KiB of text (`sent` and `returned`, head and tail excerpts).
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa

_STRS = pa.list_(pa.string())

SAMPLES_SCHEMA = pa.schema(
    [
        pa.field("run_id", pa.string(), nullable=False),
        pa.field("step", pa.int64(), nullable=False),
        pa.field("attempt_id", pa.string(), nullable=False),
        pa.field("task_id", pa.string()),
        pa.field("group_id", pa.string()),
        pa.field("reward", pa.float64()),
        pa.field("trained", pa.bool_()),
        pa.field("length", pa.int64()),
        pa.field("stop_reason", pa.string()),
        pa.field("policy_version", pa.int64()),
        pa.field("calls", pa.int64()),
        pa.field("kept", _STRS, nullable=False),
        pa.field("flags", _STRS, nullable=False),
        pa.field("sent", pa.string()),
        pa.field("sent_bytes", pa.int64()),
        pa.field("returned", pa.string()),
        pa.field("returned_bytes", pa.int64()),
        pa.field("transcript", pa.string()),
        pa.field("commit_seq", pa.int64()),
    ],
    metadata={"rlstream.schema_version": "1", "rlstream.table": "samples"},
)


def samples_table(rows: list[dict[str, Any]]) -> pa.Table:
    """Sample rows as an Arrow table of SAMPLES_SCHEMA."""
    return pa.Table.from_pylist(rows, schema=SAMPLES_SCHEMA)
