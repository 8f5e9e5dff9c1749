"""`StepPartial`: everything known about one step that is not final yet.

It wraps the kernels' mergeable `StepAgg` with the counts the step row reports
(transcripts folded, how many had full traces). Merging is order-free.

Rewards joined by attempt id. A Loops transcript may carry no `reward` (it is
optional there) while the attempt's rollouts.jsonl line has it. Such a scanned
attempt waits in `unrated` (its text already cut to its excerpt) and each rollouts
line's reward and trained flag in `rewards`; `merge` joins the two by attempt id, and
an attempt joined goes into the step's `SampleAgg` with its reward, counted once. At
the step's end (`settled`) the attempts still waiting go in without a reward. What
waits is bounded by the step's attempts: in a watch, the attempts whose rollouts line
is not written yet (docs/run-format.md: it follows the transcript).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from rlstream.metrics import StepAgg
from rlstream.metrics.samples import SampleAgg


@dataclass(slots=True)
class StepPartial:
    """Mergeable partial aggregate of one step."""

    agg: StepAgg = field(default_factory=StepAgg)
    transcripts: int = 0
    transcripts_full: int = 0
    unrated: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Attempt id -> a scanned attempt without a reward, waiting for its rollouts line
    (`agg.samples` is then set: it says how attempts are kept)."""
    rewards: dict[str, list[Any]] = field(default_factory=dict)
    """Attempt id -> [reward, trained] of a rollouts line no waiting attempt took yet."""

    def merge(self, other: StepPartial) -> StepPartial:
        out = StepPartial(
            self.agg.merge(other.agg),
            self.transcripts + other.transcripts,
            self.transcripts_full + other.transcripts_full,
            {**self.unrated, **other.unrated},
            {**self.rewards, **other.rewards},
        )
        both = sorted(out.unrated.keys() & out.rewards.keys())
        if both:
            joined = [rated(out.unrated.pop(a), out.rewards.pop(a)) for a in both]
            _fold(out, joined)
        return out

    def settled(self) -> StepPartial:
        """The step at its end: attempts still waiting folded without a reward."""
        if self.unrated:
            _fold(self, [self.unrated[a] for a in sorted(self.unrated)])
            self.unrated = {}
        self.rewards = {}
        return self

    @property
    def trace(self) -> str | None:
        """ "full", "samples", "mixed", or None when no transcript arrived."""
        if self.transcripts == 0:
            return None
        if self.transcripts_full == self.transcripts:
            return "full"
        return "samples" if self.transcripts_full == 0 else "mixed"


def rated(attempt: dict[str, Any], joined: list[Any]) -> dict[str, Any]:
    """`attempt` with the reward (and the trained flag, if it has none) of its
    rollouts line `joined` ([reward, trained])."""
    reward, trained = joined
    out = dict(attempt, reward=reward)
    if out["trained"] is None:
        out["trained"] = trained
    return out


def _fold(part: StepPartial, attempts: list[dict[str, Any]]) -> None:
    s = part.agg.samples
    assert s is not None, "waiting attempts come with their step's SampleAgg"
    add = SampleAgg.from_attempts(attempts, s.k, s.panel, s.probes_n, s.high)
    part.agg.samples = s.merge(add)
