"""Kept samples: a transcript's text into the samples kernel, a final step into rows.

`attempt_of(t, scanners)` scans one transcript's whole text (every scanner sees every
transcript read, so the step's shares cover the whole step) and makes the bounded
attempt `rlstream.metrics.samples.SampleAgg` keeps: excerpts of what its calls were
sent and returned (head and tail, `EXCERPT_BYTES` each, with the full sizes).

`sample_rows(state, step, agg)` turns a final step's kept attempts into `samples`
rows (`rlstream.sinks.samples`), and fixes the run's probe panel from the first final
step holding tasks: the `probes` tasks of smallest task hash, followed from then on
(work units carry the panel, so every step read after it keeps those tasks whenever
they appear).
"""

from __future__ import annotations

from typing import Any

from rlstream.formats.records import Transcript
from rlstream.metrics.samples import SampleAgg, attempt, excerpt
from rlstream.metrics.scanners import SampleText, Scanner, scan


def _render(parts: tuple[str, ...], what: str) -> str:
    if len(parts) == 1:
        return parts[0]
    return "\n".join(f"[call {i} {what}]\n{p}" for i, p in enumerate(parts))


def attempt_of(t: Transcript, scanners: tuple[Scanner, ...]) -> dict[str, Any]:
    """The scanned, bounded attempt of a transcript that carries text."""
    tx = t.text
    assert tx is not None
    flags = scan(scanners, SampleText(tx.sent, tx.returned))
    sent = _render(tx.sent, "sent") if any(tx.sent) else ""
    returned = _render(tx.returned, "returned")
    return attempt(
        attempt=t.attempt_id,
        task=t.task_id,
        group=tx.group_id,
        reward=tx.reward,
        trained=t.trains,
        length=sum(t.lens) if t.lens else None,
        stop_reason=tx.stop_reason,
        policy_version=tx.policy_version,
        calls=len(tx.returned),
        flags=list(flags),
        sent=excerpt(sent) if sent else None,
        returned=excerpt(returned),
        sent_bytes=len(sent.encode()),
        returned_bytes=len(returned.encode()),
        file=tx.file,
    )


def sample_rows(run_id: str, step: int, agg: SampleAgg, panel: list[str]) -> list[dict[str, Any]]:
    """The `samples` rows of one final step (one per kept attempt; probes of `panel`)."""
    rows = []
    for c, why in sorted(agg.kept(panel), key=lambda cw: cw[0]["attempt"]):
        rows.append(
            {
                "run_id": run_id,
                "step": step,
                "attempt_id": c["attempt"],
                "task_id": c["task"] or None,
                "group_id": c["group"] or None,
                "reward": c["reward"],
                "trained": c["trained"],
                "length": c["length"],
                "stop_reason": c["stop_reason"],
                "policy_version": c["policy_version"],
                "calls": c["calls"],
                "kept": why,
                "flags": list(c["flags"] or []),
                "sent": c["sent"],
                "sent_bytes": c["sent_bytes"],
                "returned": c["returned"],
                "returned_bytes": c["returned_bytes"],
                "transcript": c["file"] or None,
            }
        )
    return rows


def fix_panel(panel: list[str], agg: SampleAgg) -> list[str]:
    """The run's probe panel: unchanged once set, else this step's early tasks."""
    return panel if panel else agg.early_tasks()
