"""The `steps` table: its Arrow schema and how one final step becomes one row.

Reported metrics from steps.jsonl keep the trainer's numbers under
`reported_<name>`; recomputed ones take the names of DESIGN section 3 (the kernels'
`StepAgg.columns()`). Unknown numeric metrics land in the `reported_other` map under
their original keys, `eval/<name>` in `reported_eval`, and non-numeric values in
`reported_text`, so nothing a trainer logs is dropped.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from rlstream.formats import get_format
from rlstream.formats.records import StepRecord
from rlstream.metrics import StepAgg
from rlstream.pipeline.partial import StepPartial

SCHEMA_VERSION = 1

# steps.jsonl key -> column suffix (reported_<suffix>)
REPORTED: dict[str, str] = {
    "reward/mean": "reward_mean",
    "reward/std": "reward_std",
    "reward/group_std_mean": "reward_group_std_mean",
    "reward/mean_with_unusable": "reward_mean_with_unusable",
    "discard/groups/no_variance": "groups_no_variance",
    "discard/groups/group_too_small": "groups_group_too_small",
    "train/mismatch_kl": "mismatch_kl",
    "train/mismatch_ess": "mismatch_ess",
    "freshness/lag_mean": "lag_mean",
    "freshness/lag_p90": "lag_p90",
    "sampling/entropy_estimate": "entropy_estimate",
    "reward/no_variance_frac": "no_variance_frac",
    "completion/len_mean": "completion_len_mean",
    "completion/truncated_frac": "truncated_frac",
}
"""Canonical keys. Readers of other formats rename their trainers' keys onto these
(docs/formats.md); every other key keeps its own name in `reported_other`."""

_MAP_F = pa.map_(pa.string(), pa.float64())
_MAP_I = pa.map_(pa.string(), pa.int64())
_MAP_S = pa.map_(pa.string(), pa.string())
_PY = {int: pa.int64(), float: pa.float64(), list: pa.list_(pa.string())}
_DICT_TYPES = {
    "discards": _MAP_I,
    "rollout_metadata": _MAP_F,
    "flag_share": _MAP_F,
    "flag_share_high": _MAP_F,
}


def _recomputed_fields() -> list[pa.Field]:
    return [
        pa.field(name, _DICT_TYPES[name] if typ is dict else _PY[typ])
        for name, typ in StepAgg.columns()
    ]


STEPS_SCHEMA = pa.schema(
    [
        pa.field("run_id", pa.string(), nullable=False),
        pa.field("step", pa.int64(), nullable=False),
        pa.field("time", pa.float64()),
        pa.field("trace", pa.string()),
        pa.field("transcripts", pa.int64()),
        *[pa.field(f"reported_{v}", pa.float64()) for v in REPORTED.values()],
        pa.field("reported_eval", _MAP_F),
        pa.field("reported_other", _MAP_F),
        pa.field("reported_text", _MAP_S),
        *_recomputed_fields(),
        pa.field("commit_seq", pa.int64()),
    ],
    metadata={"rlstream.schema_version": str(SCHEMA_VERSION), "rlstream.table": "steps"},
)


def step_row(
    run_id: str, step: int, rec: StepRecord | None, part: StepPartial | None, fmt: str
) -> dict[str, Any]:
    """One `steps` row from the step's reported record and recomputed partial; the
    recomputed columns the run's format cannot give are null."""
    row: dict[str, Any] = {
        "run_id": run_id,
        "step": step,
        "time": rec.time if rec else None,
        "trace": part.trace if part else None,
        "transcripts": part.transcripts if part else 0,
    }
    evals: dict[str, float] = {}
    other: dict[str, float] = {}
    for suffix in REPORTED.values():
        row[f"reported_{suffix}"] = None
    if rec is not None:
        for k, v in rec.metrics.items():
            if k in REPORTED:
                row[f"reported_{REPORTED[k]}"] = v
            elif k.startswith("eval/"):
                evals[k[5:]] = v
            else:
                other[k] = v
    row["reported_eval"] = evals
    row["reported_other"] = other
    row["reported_text"] = dict(rec.text) if rec else {}
    row.update((part.agg if part else StepAgg()).finalize())
    for col in get_format(fmt).unavailable:
        row[col] = None
    return row


def steps_table(rows: list[dict[str, Any]]) -> pa.Table:
    return pa.Table.from_pylist(rows, schema=STEPS_SCHEMA)
