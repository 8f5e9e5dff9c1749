"""Plain-text per-run tables for the terminal."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TextIO

from rlstream.pipeline.state import RunState, summary


def _fmt(v: object) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:.4g}"
    return str(v)


def print_runs(states: Iterable[RunState], out: TextIO) -> None:
    """One line per run: id, status, last step, final steps, quarantined, headline."""
    cols = ("run_id", "status", "last_step", "steps", "reward", "kl", "ess", "entropy", "quar", "findings")
    rows = []
    for s in sorted(states, key=lambda s: s.run_id):
        sm = summary(s)
        h = s.headline or {}
        rows.append(
            (
                s.run_id,
                s.status or ("finished" if sm["finished"] else "-"),
                _fmt(sm["last_step"]),
                _fmt(s.counters["steps_final"]),
                _fmt(h.get("reward_mean")),
                _fmt(h.get("mismatch_kl")),
                _fmt(h.get("mismatch_ess")),
                _fmt(h.get("entropy_estimate")),
                _fmt(sm["quarantined"]),
                ",".join(s.firing) or "-",
            )
        )
    widths = [max(len(c), *(len(r[i]) for r in rows)) if rows else len(c) for i, c in enumerate(cols)]
    out.write("  ".join(c.ljust(w) for c, w in zip(cols, widths, strict=True)) + "\n")
    for r in rows:
        out.write("  ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)) + "\n")
