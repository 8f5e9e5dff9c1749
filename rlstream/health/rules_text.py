"""The rule on what the transcripts say: transcript_hack_flags.

It reads the steps columns the transcript scanners fill (`flagged_high_frac`,
`flag_share_high`, `flagged_attempts`; docs/schema.md) and never the reward curve: a
policy that satisfies the grader by a shortcut can climb no faster than an honest one,
so only the text tells them apart. Its message names the scanners that matched and
attempts to read (`rlstream samples OUT RUN --flagged`). Pure: no I/O.
"""

from __future__ import annotations

from rlstream.health import thresholds_policy as T
from rlstream.health.figures import as_dict
from rlstream.health.state import View
from rlstream.health.verdict import Ctx, Verdict, ge


def transcript_hack_flags(
    v: View, c: T.TranscriptHackFlags, ctx: Ctx, active: bool, row: dict
) -> Verdict | None:
    shares = v.values("flagged_high", c.steps)
    if not shares:
        return None
    flagged = sum(v.values("flagged_n", c.steps))
    shares = sorted(shares)
    med = (
        shares[len(shares) // 2] if len(shares) % 2 else sum(shares[len(shares) // 2 - 1 :][:2]) / 2
    )
    holds = flagged >= c.min_flagged and ge(med, c.share_min, active, ctx)
    by = as_dict(row.get("flag_share_high"))
    top = sorted(((s, n) for n, s in by.items() if s), reverse=True)[:3]
    names = ", ".join(f"{n} {s:.0%}" for s, n in top) or "none this step"
    ids = list(row.get("flagged_attempts") or [])[:4]
    read = f"; read {', '.join(ids)}" if ids else ""
    return Verdict(
        holds,
        f"scanners flag {med:.0%} of the high-reward attempts (median of the last "
        f"{len(shares)} steps; at step {v.step}: {names}){read}: the grader is satisfied "
        "by a shortcut the transcripts show; fix the grader or the sandbox "
        "(`rlstream samples OUT RUN --flagged`)",
    )
