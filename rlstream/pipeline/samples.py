"""Kept samples: a transcript's text into the samples kernel, a final step into rows.

`attempt_of(t, scan)` scans one transcript's whole text (every scanner sees every
transcript read, so the step's shares cover the whole step) and makes the attempt
`rlstream.metrics.samples.SampleAgg` ranks, with the full sizes of what its calls were
sent and returned; `bounded(agg)` then cuts the few attempts a batch keeps to their
excerpts (head and tail, `EXCERPT_BYTES` each), so only those pay for it.

`sample_rows(state, step, agg)` turns a final step's kept attempts into `samples`
rows (`rlstream.sinks.samples`), and fixes the run's probe panel from the first final
step holding tasks: the `probes` tasks of smallest task hash, followed from then on
(work units carry the panel, so every step read after it keeps those tasks whenever
they appear).
"""

from __future__ import annotations

from typing import Any

from rlstream.formats.records import Transcript
from rlstream.metrics.samples import SampleAgg, excerpt
from rlstream.metrics.scanners import SampleText, ScanPlan


def _render(parts: tuple[str, ...], what: str) -> str:
    if len(parts) == 1:
        return parts[0]
    return "\n".join(f"[call {i} {what}]\n{p}" for i, p in enumerate(parts))


HOLD_WHOLE_BYTES = 64 << 10
"""Text up to this size is held whole until the batch's cut (`bounded`); longer text
is cut to its excerpt at once, so a batch's text in memory stays bounded."""


def _size(text: str) -> int:
    """UTF-8 bytes of `text` (ASCII text is its length: no encoding made)."""
    return len(text) if text.isascii() else len(text.encode())


def attempt_of(t: Transcript, scan: ScanPlan) -> dict[str, Any]:
    """The scanned attempt of a transcript that carries text, its text whole (cut to
    excerpts by `bounded` once the batch's kept attempts are known)."""
    tx = t.text
    assert tx is not None
    flags = scan(SampleText(tx.sent, tx.returned))
    sent = _render(tx.sent, "sent") if any(tx.sent) else ""
    returned = _render(tx.returned, "returned")
    sizes = _size(sent), _size(returned)
    if sizes[0] > HOLD_WHOLE_BYTES:
        sent = excerpt(sent)
    if sizes[1] > HOLD_WHOLE_BYTES:
        returned = excerpt(returned)
    return {
        "attempt": t.attempt_id,
        "task": t.task_id,
        "group": tx.group_id,
        "reward": tx.reward,
        "trained": t.trains,
        "length": sum(t.lens) if t.lens else None,
        "stop_reason": tx.stop_reason,
        "policy_version": tx.policy_version,
        "calls": len(tx.returned),
        "flags": list(flags),
        "sent": sent or None,
        "returned": returned,
        "sent_bytes": sizes[0],
        "returned_bytes": sizes[1],
        "file": tx.file,
    }


def cut(c: dict[str, Any]) -> dict[str, Any]:
    """Attempt `c` with its text cut to its excerpts, in place."""
    for key in ("sent", "returned"):
        if c[key] is not None:
            c[key] = excerpt(c[key])
    return c


def bounded(agg: SampleAgg) -> SampleAgg:
    """`agg` with the text of each attempt it holds (every candidate list, probes of
    tasks outside the panel too) cut to its excerpt, in place: the attempts are the
    batch's own."""
    seen: set[int] = set()
    for c in [*agg.top, *agg.bottom, *agg.flagged, *agg.probes.values()]:
        if id(c) in seen:
            continue
        seen.add(id(c))
        cut(c)
    return agg


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
