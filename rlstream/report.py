"""Plain-text per-run tables for the terminal."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, TextIO

COLUMNS = (
    ("run_id", "run_id"),
    ("status", "status"),
    ("last_step", "last_step"),
    ("steps", "steps_final"),
    ("reward", "reward_mean"),
    ("kl", "mismatch_kl"),
    ("ess", "mismatch_ess"),
    ("entropy", "entropy_estimate"),
    ("trunc", "truncated_frac"),
    ("quar", "quarantined"),
    ("findings", "firing"),
)


def _fmt(v: object) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:.4g}"
    if isinstance(v, list):
        return ",".join(map(str, v)) or "-"
    return str(v)


def print_summaries(summaries: Iterable[dict[str, Any]], out: TextIO) -> None:
    """One aligned line per run summary (see runtime.actors.state_summary)."""
    rows = [[_fmt(s.get(key)) for _, key in COLUMNS] for s in summaries]
    heads = [h for h, _ in COLUMNS]
    widths = [max([len(h), *(len(r[i]) for r in rows)]) for i, h in enumerate(heads)]
    out.write("  ".join(h.ljust(w) for h, w in zip(heads, widths, strict=True)).rstrip() + "\n")
    for r in rows:
        out.write("  ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)).rstrip() + "\n")
