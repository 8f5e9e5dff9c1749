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

Exactness: the input carries no generation boundaries, so the atomic unit is a row.
A row's bounds depend only on that row: its sums run column by column, left to right,
so the NaN padding a batch adds to reach its widest row only appends exact ``+ 0``
terms (a row-wise ``np.sum`` would regroup with the width). The per-row bounds are
then summed exactly (``rlstream.metrics.exact``), so ``merge`` is exactly associative
and commutative and ``finalize`` (exact sum / count, rounded once) is the same, bit
for bit, whatever the split of the rows into batches and the merge order or tree.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Self

import numpy as np

from rlstream.metrics.exact import Exact, add, fixed_sum, ratio


@dataclass(slots=True)
class TopKEntropyAgg:
    """Exact sums (``rlstream.metrics.exact`` integers) of per-token top-k entropy bounds."""

    n: int = 0
    sum_lb: Exact = 0
    n_ub: int = 0
    sum_ub: Exact = 0

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
        # Column-major copies: the column loop below then reads contiguous memory.
        lp_KT = np.asfortranarray(lp[rows]).T
        finite_KT = np.asfortranarray(finite[rows]).T
        k_T = k_T[rows]
        n = int(k_T.size)
        sum_p = np.zeros(n)
        sum_plp = np.zeros(n)
        for lp_j, ok_j in zip(lp_KT, finite_KT, strict=True):  # loop over k, not tokens
            lp0 = np.where(ok_j, lp_j, 0.0)
            p = np.where(ok_j, np.exp(lp0), 0.0)
            sum_p += p
            # -p ln p written as -p * lp: lp is the exact log, exp/log would lose digits.
            sum_plp += p * lp0
        tau = np.maximum(0.0, 1.0 - sum_p)
        tail = np.where(tau > 0.0, tau * np.log(np.where(tau > 0.0, tau, 1.0)), 0.0)
        lb = -sum_plp - tail
        agg = cls(n=n, sum_lb=fixed_sum(lb))
        if vocab_size is not None:
            room = np.maximum(int(vocab_size) - k_T, 1).astype(np.float64)
            agg.n_ub = n
            agg.sum_ub = fixed_sum(lb + tau * np.log(room))
        return agg

    def merge(self, other: Self) -> Self:
        return type(self)(
            n=self.n + other.n,
            sum_lb=add(self.sum_lb, other.sum_lb),
            n_ub=self.n_ub + other.n_ub,
            sum_ub=add(self.sum_ub, other.sum_ub),
        )

    @staticmethod
    def columns() -> tuple[tuple[str, type], ...]:
        """finalize() keys in order, with the Python type of a non-None value."""
        return (("entropy_topk_lb", float), ("entropy_topk_ub", float))

    def finalize(self) -> dict[str, Any]:
        lb = ratio(self.sum_lb, self.n) if self.n else None
        ub = ratio(self.sum_ub, self.n) if self.n and self.n_ub == self.n else None
        return {"entropy_topk_lb": lb, "entropy_topk_ub": ub}
