"""Exact, order-independent sums of floats: the mergeable core of every aggregate.

Contract
--------
Every finite float64 is an integer multiple of ``2**-1074``, so any sum of finite
floats is exactly an integer in those units. An ``Exact`` is that integer (a Python
``int``): adding two of them is exact, hence associative and commutative, so a sum
built from shards merged in any order, along any merge tree, is the same integer.
``ratio`` turns it into a float with a single, correct rounding (CPython's ``int /
int`` is correctly rounded), so a mean depends only on the multiset of values summed.

Non-finite values (which validated inputs never carry) make the ``Exact`` a float:
``±inf`` or ``nan``, the IEEE sum of the non-finite values. On {±inf, nan} float
addition is itself associative and commutative, so the result stays split-independent.

- ``fixed(x)``: one Python float as an ``Exact``;
- ``fixed_sum(x_N)``: the exact sum of a float64 array, vectorised (two ``bincount``
  passes over the values, keyed by binary exponent, on integer limbs small enough
  that every float64 partial sum is an exact integer);
- ``add(a, b)``, ``ratio(a, n)`` = ``a * 2**-1074 / n``, ``scaled(a)`` = the raw int.
"""

from __future__ import annotations

import math

import numpy as np

FRAC_BITS = 1074  # an Exact int counts units of 2**-FRAC_BITS
_LIMB = 26  # mantissa (< 2**53) = hi * 2**26 + lo with hi < 2**27, lo < 2**26
_CHUNK = 1 << 26  # at most 2**26 limbs < 2**27 per bin: partial sums stay < 2**53
_MANT = np.uint64((1 << 52) - 1)
_HIDDEN = np.uint64(1 << 52)
_LO = np.uint64((1 << _LIMB) - 1)

Exact = int | float


def fixed(x: float) -> Exact:
    """``x`` exactly, in units of 2**-1074 (a float only when x is not finite)."""
    x = float(x)
    if not math.isfinite(x):
        return x
    num, den = x.as_integer_ratio()  # den = 2**k with k <= 1074
    return num << (FRAC_BITS + 1 - den.bit_length())


def fixed_sum(values: np.ndarray) -> Exact:
    """Exact sum of a float64 array in units of 2**-1074, independent of order."""
    x = np.ascontiguousarray(values, dtype=np.float64).ravel()
    finite = np.isfinite(x)
    if not finite.all():
        return float(np.sum(x[~finite]))  # inf, -inf or nan: order-free on its own
    total = 0
    for start in range(0, x.size, _CHUNK):
        total += _fixed_sum_chunk(x[start : start + _CHUNK])
    return total


def _fixed_sum_chunk(x: np.ndarray) -> int:
    if not x.size:
        return 0
    bits = x.view(np.uint64)
    biased = (bits >> np.uint64(52)).astype(np.int64) & 0x7FF
    mant = bits & _MANT
    normal = biased > 0
    mant[normal] |= _HIDDEN
    # |x| = mant * 2**(e - 1075) with e = max(biased, 1): mant << (e - 1) units.
    exp = np.maximum(biased, 1)
    sign = np.where(bits >> np.uint64(63), -1.0, 1.0)
    hi = (mant >> np.uint64(_LIMB)).astype(np.float64) * sign
    lo = (mant & _LO).astype(np.float64) * sign
    # Each bin adds < 2**26 integers of magnitude < 2**27: every float64 partial sum
    # is an integer below 2**53, so the bin sums are exact whatever the order.
    sum_hi = np.bincount(exp, weights=hi)
    sum_lo = np.bincount(exp, weights=lo)
    total = 0
    for e in np.flatnonzero((sum_hi != 0.0) | (sum_lo != 0.0)).tolist():
        total += ((int(sum_hi[e]) << _LIMB) + int(sum_lo[e])) << (e - 1)
    return total


def add(a: Exact, b: Exact) -> Exact:
    """Exact sum of two ``Exact`` values."""
    if isinstance(a, int) and isinstance(b, int):
        return a + b
    return (0.0 if isinstance(a, int) else a) + (0.0 if isinstance(b, int) else b)


def ratio(a: Exact, n: int) -> float:
    """``a * 2**-1074 / n``, correctly rounded (n > 0)."""
    if isinstance(a, float):
        return a / n
    return a / (int(n) << FRAC_BITS)
