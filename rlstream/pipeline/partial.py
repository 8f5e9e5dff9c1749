"""`StepPartial`: everything known about one step that is not final yet.

It wraps the kernels' mergeable `StepAgg` with the counts the step row reports
(transcripts folded, how many had full traces). Merging is order-free.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from rlstream.metrics import StepAgg


@dataclass(slots=True)
class StepPartial:
    """Mergeable partial aggregate of one step."""

    agg: StepAgg = field(default_factory=StepAgg)
    transcripts: int = 0
    transcripts_full: int = 0

    def merge(self, other: StepPartial) -> StepPartial:
        return StepPartial(
            self.agg.merge(other.agg),
            self.transcripts + other.transcripts,
            self.transcripts_full + other.transcripts_full,
        )

    @property
    def trace(self) -> str | None:
        """ "full", "samples", "mixed", or None when no transcript arrived."""
        if self.transcripts == 0:
            return None
        if self.transcripts_full == self.transcripts:
            return "full"
        return "samples" if self.transcripts_full == 0 else "mixed"
