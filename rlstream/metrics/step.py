"""All recomputed metrics of one (run, step): the partial aggregates together.

Contract
--------
``StepAgg`` holds an optional ``TokenAgg``, ``TopKEntropyAgg``, ``CompletionAgg``,
``RolloutAgg`` and ``SampleAgg``; a part stays None until data for it arrives. ``merge`` is None-aware,
associative and commutative and returns a new object (a part present on one side only
is shared, which is safe because no ``merge`` mutates its inputs). ``finalize``
returns one flat dict whose keys are always ``StepAgg.columns()`` in that order; the
keys of a missing part are None.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Self

from rlstream.metrics.completions import CompletionAgg
from rlstream.metrics.rollouts import RolloutAgg
from rlstream.metrics.samples import SampleAgg
from rlstream.metrics.tokens import TokenAgg
from rlstream.metrics.topk import TopKEntropyAgg

HEADLINE_KEYS = (
    "reward_mean",
    "reward_mean_with_unusable",
    "reward_group_std_mean",
    "mismatch_kl",
    "mismatch_ess",
    "entropy_estimate",
    "truncated_frac",
    "completion_len_mean",
    "lag_mean",
)
"""The steps columns a run's headline shows (status, report, run_health): the latest
non-null value of each."""

_PARTS: tuple[tuple[str, Any], ...] = (
    ("tokens", TokenAgg),
    ("topk", TopKEntropyAgg),
    ("completions", CompletionAgg),
    ("rollouts", RolloutAgg),
    ("samples", SampleAgg),
)


def _merge_opt(a: Any, b: Any) -> Any:
    if a is None:
        return b
    if b is None:
        return a
    return a.merge(b)


@dataclass(slots=True)
class StepAgg:
    """Optional per-part aggregates of one step."""

    tokens: TokenAgg | None = None
    topk: TopKEntropyAgg | None = None
    completions: CompletionAgg | None = None
    rollouts: RolloutAgg | None = None
    samples: SampleAgg | None = None

    @classmethod
    def empty(cls) -> Self:
        return cls()

    def merge(self, other: Self) -> Self:
        return type(self)(
            tokens=_merge_opt(self.tokens, other.tokens),
            topk=_merge_opt(self.topk, other.topk),
            completions=_merge_opt(self.completions, other.completions),
            rollouts=_merge_opt(self.rollouts, other.rollouts),
            samples=_merge_opt(self.samples, other.samples),
        )

    @staticmethod
    def columns() -> tuple[tuple[str, type], ...]:
        """Every finalize() key in a stable order, with the Python type of its value."""
        return tuple(col for _, part in _PARTS for col in part.columns())

    def finalize(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for name, part in _PARTS:
            agg = getattr(self, name)
            if agg is None:
                out.update(dict.fromkeys(k for k, _ in part.columns()))
            else:
                out.update(agg.finalize())
        return out
