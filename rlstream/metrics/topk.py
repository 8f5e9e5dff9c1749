"""Entropy bounds from top-k logprobs: a mergeable aggregate.

Contract
--------
``TopKEntropyAgg.from_arrays(topk_lp_TK, vocab_size)`` takes one row of top-k
logprobs per token (NaN entries are padding; an all-NaN row means the token has no
top-k and is skipped). For a row with k finite entries, ``p = exp(lp)`` and the
unobserved mass ``τ = max(0, 1 - Σp)``:

- lower bound ``lb = -Σ p ln p - τ ln τ`` (0 ln 0 = 0): the tail mass counted as one
  outcome;
- upper bound ``ub = lb + τ ln(V - k)``: the tail spread evenly over the remaining
  ``V - k`` vocabulary entries. Needs the vocabulary size V; when ``V - k < 1`` the
  term is 0 (no room left for a tail).

The state keeps ``n`` rows, ``sum_lb``, and ``sum_ub`` with ``n_ub`` (rows whose
upper bound was known). Keeping a count instead of a boolean flag leaves the empty
aggregate neutral under ``merge``: the merged upper bound is reported only when every
row had one. ``finalize`` gives ``entropy_topk_lb`` / ``entropy_topk_ub`` means, None
when undefined.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Self

import numpy as np


@dataclass(slots=True)
class TopKEntropyAgg:
    """Sums of per-token top-k entropy bounds."""

    n: int = 0
    sum_lb: float = 0.0
    n_ub: int = 0
    sum_ub: float = 0.0

    @classmethod
    def empty(cls) -> Self:
        return cls()

    @classmethod
    def from_arrays(cls, topk_lp_TK: np.ndarray, vocab_size: int | None) -> Self:
        lp = np.asarray(topk_lp_TK, dtype=np.float64)
        if lp.ndim != 2:
            raise ValueError(f"topk_lp_TK must be 2-D (tokens, k); got shape {lp.shape}")
        finite = np.isfinite(lp)
        k_T = finite.sum(axis=1)
        rows = k_T > 0
        lp, finite, k_T = lp[rows], finite[rows], k_T[rows]
        lp0 = np.where(finite, lp, 0.0)
        p = np.where(finite, np.exp(lp0), 0.0)
        tau = np.maximum(0.0, 1.0 - p.sum(axis=1))
        # -p ln p written as -p * lp: lp is the exact log, exp/log would lose digits.
        tail = np.where(tau > 0.0, tau * np.log(np.where(tau > 0.0, tau, 1.0)), 0.0)
        lb = -(p * lp0).sum(axis=1) - tail
        n = int(lb.size)
        agg = cls(n=n, sum_lb=float(lb.sum()))
        if vocab_size is not None:
            room = np.maximum(int(vocab_size) - k_T, 1).astype(np.float64)
            agg.n_ub = n
            agg.sum_ub = float((lb + tau * np.log(room)).sum())
        return agg

    def merge(self, other: Self) -> Self:
        return type(self)(
            n=self.n + other.n,
            sum_lb=self.sum_lb + other.sum_lb,
            n_ub=self.n_ub + other.n_ub,
            sum_ub=self.sum_ub + other.sum_ub,
        )

    @staticmethod
    def columns() -> tuple[tuple[str, type], ...]:
        """finalize() keys in order, with the Python type of a non-None value."""
        return (("entropy_topk_lb", float), ("entropy_topk_ub", float))

    def finalize(self) -> dict[str, Any]:
        lb = self.sum_lb / self.n if self.n else None
        ub = self.sum_ub / self.n if self.n and self.n_ub == self.n else None
        return {"entropy_topk_lb": lb, "entropy_topk_ub": ub}
