"""The lines under a run's heading in the report and on the run page: what its
judgement lacks, the rules its files cannot evaluate, the steps logged again, and its
reward marked when it is the trainer's reported figure. Every run string escaped."""

from __future__ import annotations

from html import escape
from typing import Any

from rlstream.fleet.status import reward_cell, unjudged
from rlstream.pipeline.outcome import plural


def _e(v: Any) -> str:
    return escape("" if v is None else str(v), quote=True)


def replaced_note(row: dict[str, Any]) -> str:
    """Steps the trainer logged again (a restart from a checkpoint): the newest kept."""
    n = row.get("replaced_steps") or 0
    return f" · {plural(n, 'step')} logged again, the newest record kept" if n else ""


def reward_text(r: dict[str, Any]) -> str:
    """The reward cell (`status.headline_reward`), marked when it is the trainer's
    reported figure."""
    return reward_cell(r, " (reported)")


def judged_line(row: dict[str, Any]) -> str:
    """The run's line saying what its judgement lacks, if anything."""
    if not row.get("missing"):
        return ""
    word = "not judged" if unjudged(row) else "partly judged"
    return f'<div class="sub judged">{word}: {_e(row["missing"])}</div>'


def not_evaluable_line(row: dict[str, Any]) -> str:
    """The run's line naming the rules its files cannot evaluate (docs/formats.md)."""
    codes = row.get("not_evaluable") or []
    if not codes:
        return '<div class="sub ne">every health rule can be evaluated on this run</div>'
    return (
        f'<div class="sub ne">not evaluable on this run ({_e(row.get("format") or "loops")} '
        f"files lack their figures): {_e(', '.join(codes))}</div>"
    )
