"""What every tracker reader returns: rows, a resume cursor, identity and errors.

A row is `{"step": int, "time": float | None, key: float, ...}`, one per tracker
record (TensorBoard and SwanLab write one record per scalar, so a step may span
several rows: `merge_steps` folds them, the newest value of a key winning, which is
what the trackers' own viewers show after a restart re-logs a step).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from rlstream.formats.quarantine import QuarantineRow


@dataclass(frozen=True, slots=True)
class TrackerError:
    """A record skipped as corrupt: `offset` is its byte offset in the file (or row
    id for SQLite), `reason` a stable code (`crc_mismatch`, `bad_chunk`, `orphan_chunk`,
    `bad_record`, `truncated`), `detail` a short explanation."""

    offset: int
    reason: str
    detail: str = ""

    def quarantine(self, run_id: str, file: str) -> QuarantineRow:
        return QuarantineRow(run_id, file, self.offset, self.reason, self.detail)


@dataclass(frozen=True, slots=True)
class Read:
    """One call's result. `cursor` is where the next call starts (bytes of the file
    from there on, or the last row id seen)."""

    rows: list[dict[str, Any]]
    cursor: int
    errors: list[TrackerError] = field(default_factory=list)
    info: dict[str, Any] = field(default_factory=dict)


def number(x: Any) -> float | None:
    """A finite or non-finite float from a tracker value; None for anything that is
    not a number (text, media, booleans)."""
    if isinstance(x, bool) or not isinstance(x, int | float):
        if x in ("NaN", "nan"):
            return math.nan
        if x in ("Infinity", "inf"):
            return math.inf
        if x in ("-Infinity", "-inf"):
            return -math.inf
        return None
    return float(x)


def merge_steps(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Rows folded per step in order of first appearance; later values of a key win,
    and `time` is the latest row's."""
    out: dict[int, dict[str, Any]] = {}
    for row in rows:
        cur = out.setdefault(row["step"], {"step": row["step"], "time": None})
        for k, v in row.items():
            if k != "step" and (k != "time" or v is not None):
                cur[k] = v
    return list(out.values())
