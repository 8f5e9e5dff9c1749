"""The `run_health` and `alerts` tables: schemas and row builders.

`run_health` gets a run's row at a commit when it changed (append-only history;
the newest row per run is what status reads, see rlstream.sinks.maintain). `alerts` holds every
finding state transition (pending, firing, resolved) as an event.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from rlstream.health.figures import RECENT_FIGURES
from rlstream.metrics.step import HEADLINE_KEYS

FINDING = pa.struct(
    [
        pa.field("code", pa.string()),
        pa.field("severity", pa.string()),
        pa.field("state", pa.string()),
        pa.field("since_step", pa.int64()),
        pa.field("message", pa.string()),
    ]
)

WORST = pa.struct(
    [
        pa.field("code", pa.string()),
        pa.field("severity", pa.string()),
        pa.field("since_step", pa.int64()),
        pa.field("until_step", pa.int64()),
    ]
)

HEADLINE = (*HEADLINE_KEYS, "reward_trend", *RECENT_FIGURES, "recent_steps")
"""Headline figures of a run: the latest value of these steps columns, the trend, and
the window medians the health rules judged (`health.figures.RECENT_FIGURES`)."""

RUN_HEALTH_SCHEMA = pa.schema(
    [
        pa.field("run_id", pa.string(), nullable=False),
        pa.field("run_uri", pa.string(), nullable=False),
        pa.field("as_of", pa.timestamp("ms", tz="UTC"), nullable=False),
        pa.field("commit_seq", pa.int64(), nullable=False),
        pa.field("last_step", pa.int64()),
        pa.field("final_through", pa.int64()),
        pa.field("last_activity", pa.timestamp("ms", tz="UTC")),
        pa.field("status", pa.string(), nullable=False),
        pa.field("findings", pa.list_(FINDING)),
        *[pa.field(h, pa.float64()) for h in HEADLINE],
        pa.field("steps_final", pa.int64()),
        pa.field("pending_steps", pa.int64()),
        pa.field("transcripts", pa.int64()),
        pa.field("tokens", pa.int64()),
        pa.field("bytes", pa.int64()),
        pa.field("quarantined", pa.int64()),
        pa.field("late", pa.int64()),
        pa.field("token_metrics", pa.string()),
        pa.field("format", pa.string()),
        pa.field("not_evaluable", pa.list_(pa.string())),
        pa.field("cohort", pa.string()),
        pa.field("replaced_steps", pa.int64()),
        pa.field("finished", pa.bool_()),
        pa.field("judged", pa.string()),
        pa.field("missing", pa.string()),
        pa.field("worst_finding", WORST),
        pa.field("reported_figures", pa.list_(pa.string())),
    ],
    metadata={"rlstream.schema_version": "1", "rlstream.table": "run_health"},
)

ALERTS_SCHEMA = pa.schema(
    [
        pa.field("run_id", pa.string(), nullable=False),
        pa.field("code", pa.string(), nullable=False),
        pa.field("severity", pa.string(), nullable=False),
        pa.field("from_state", pa.string()),
        pa.field("to_state", pa.string(), nullable=False),
        pa.field("step", pa.int64()),
        pa.field("time", pa.timestamp("ms", tz="UTC")),
        pa.field("message", pa.string()),
        pa.field("commit_seq", pa.int64()),
    ],
    metadata={"rlstream.schema_version": "1", "rlstream.table": "alerts"},
)


def _ms(t: float | None) -> int | None:
    return None if t is None else round(t * 1000)


def health_row(state: Any, now: float, finished: bool) -> dict[str, Any]:
    """The run_health row of a run state (rlstream.pipeline.state.RunState); `finished`
    gives the status of a run the health rules have not judged yet."""
    c = state.counters
    status = state.status or ("finished" if finished else "healthy")
    token_metrics = (
        "recomputed" if c["tokens"] else ("reported_only" if c["transcripts"] else "none")
    )
    return {
        "run_id": state.run_id,
        "run_uri": state.run_url,
        "as_of": now,
        "commit_seq": state.seq,
        "last_step": state.max_reported_step if state.max_reported_step >= 0 else None,
        "final_through": state.final_through,
        "last_activity": state.last_activity,
        "status": status,
        "findings": list(state.findings),
        **{h: state.headline.get(h) for h in HEADLINE},
        "steps_final": c["steps_final"],
        "pending_steps": len({*state.pending, *state.reported}),
        "transcripts": c["transcripts"],
        "tokens": c["tokens"],
        "bytes": c["bytes"],
        "quarantined": c["quarantined"],
        "late": c["late"],
        "token_metrics": token_metrics,
        "format": f"{state.format}/{state.trainer}" if state.trainer else state.format,
        "not_evaluable": list(state.headline.get("_not_evaluable", [])),
        "cohort": state.cohort or None,
        "replaced_steps": c["replaced_steps"],
        "finished": finished,
        "judged": state.headline.get("_judged"),
        "missing": state.headline.get("_missing"),
        "worst_finding": state.headline.get("_worst"),
        "reported_figures": sorted(state.headline.get("_reported", ())),
    }


def run_health_table(rows: list[dict[str, Any]]) -> pa.Table:
    fixed = []
    for r in rows:
        r = dict(r)
        for k in ("as_of", "last_activity"):
            r[k] = _ms(r.get(k))
        fixed.append(r)
    return pa.Table.from_pylist(fixed, schema=RUN_HEALTH_SCHEMA)


def alerts_table(events: list[dict[str, Any]]) -> pa.Table:
    return pa.Table.from_pylist(
        [{**e, "time": _ms(e.get("time"))} for e in events], schema=ALERTS_SCHEMA
    )
