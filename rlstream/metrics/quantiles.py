"""Exact mergeable histogram of integer values (lags, completion lengths).

Contract
--------
``CountHistogram`` stores the sorted distinct values and their counts. Lags and
lengths take few distinct values per step, so an exact histogram is as small as a
sketch and needs no error bound. ``merge`` is exact, associative and commutative and
returns a new object. ``quantile(q)`` returns bit-for-bit what
``np.percentile(expanded_values, 100 * q)`` (linear interpolation) returns; ``mean``
is an exact integer sum divided once (``int / int`` is correctly rounded). Both read
only the canonical (sorted values, counts) pair, so they are the same, bit for bit,
whatever the split of the values and the merge order or tree. Empty histograms
answer None.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Self

import numpy as np


def _empty_i64() -> np.ndarray:
    return np.zeros(0, dtype=np.int64)


@dataclass(slots=True)
class CountHistogram:
    """Sorted distinct ``values`` with positive ``counts`` (both int64)."""

    values: np.ndarray = field(default_factory=_empty_i64)
    counts: np.ndarray = field(default_factory=_empty_i64)

    @classmethod
    def empty(cls) -> Self:
        return cls()

    @classmethod
    def from_values(cls, values: np.ndarray) -> Self:
        arr = np.asarray(values)
        if arr.size and arr.dtype.kind not in "iub":
            raise ValueError(f"CountHistogram takes integer values; got dtype {arr.dtype}")
        uniq, counts = np.unique(arr.astype(np.int64).ravel(), return_counts=True)
        return cls(values=uniq, counts=counts.astype(np.int64))

    def merge(self, other: Self) -> Self:
        if not other.values.size:
            return type(self)(values=self.values.copy(), counts=self.counts.copy())
        if not self.values.size:
            return type(self)(values=other.values.copy(), counts=other.counts.copy())
        both = np.concatenate([self.values, other.values])
        uniq, inverse = np.unique(both, return_inverse=True)
        counts = np.zeros(uniq.size, dtype=np.int64)
        np.add.at(counts, inverse, np.concatenate([self.counts, other.counts]))
        return type(self)(values=uniq, counts=counts)

    @property
    def count(self) -> int:
        return int(self.counts.sum())

    def mean(self) -> float | None:
        n = self.count
        if not n:
            return None
        return int(np.dot(self.values, self.counts)) / n

    def max(self) -> int | None:
        return int(self.values[-1]) if self.values.size else None

    def min(self) -> int | None:
        return int(self.values[0]) if self.values.size else None

    def _order_stat(self, cum: np.ndarray, i: int) -> int:
        return int(self.values[int(np.searchsorted(cum, i, side="right"))])

    def quantile(self, q: float) -> float | None:
        """np.percentile(expanded, 100 * q) with the default linear method, exactly."""
        if not 0.0 <= q <= 1.0:
            raise ValueError(f"quantile q must be in [0, 1]; got {q}")
        n = self.count
        if not n:
            return None
        # Mirror numpy's arithmetic step by step so the result is bit-identical:
        # percentile divides by 100, the virtual index is (n - 1) * q, and _lerp
        # interpolates from the upper neighbour when the fraction is >= 0.5.
        qq = (100.0 * q) / 100.0
        virtual = (n - 1) * qq
        cum = np.cumsum(self.counts)
        if virtual >= n - 1:
            return float(self.values[-1])
        lo = math.floor(virtual)
        a = self._order_stat(cum, lo)
        b = self._order_stat(cum, lo + 1)
        gamma = virtual - lo
        diff = float(b - a)
        if gamma >= 0.5:
            return float(b) - diff * (1.0 - gamma)
        return float(a) + diff * gamma
