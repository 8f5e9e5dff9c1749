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

- ``fixed(x)``: one Python float as an ``Exact``; ``fixed_square(x)`` adds its exact
  square, in units of 2**-2148;
- ``fixed_sum(x_N)``: the exact sum of a float64 array, vectorised (``frexp``, then
  two ``bincount`` passes keyed by binary exponent over integer limbs small enough
  that every float64 partial sum is an exact integer); 10-20x ``np.sum``, so the
  aggregates apply it to per-generation partial sums, not to every token, where
  they can;
- ``add(a, b)`` and ``ratio(a, n)`` = ``a * 2**-1074 / n``, correctly rounded.
"""

from __future__ import annotations

import math

import numpy as np

FRAC_BITS = 1074  # an Exact int counts units of 2**-FRAC_BITS
_LIMB = 26  # mantissa (< 2**53) = hi * 2**26 + lo with hi < 2**27, lo < 2**26
_CHUNK = 1 << 26  # at most 2**26 limbs < 2**27 per bin: partial sums stay < 2**53
_TWO_27 = float(1 << (53 - _LIMB))
_TWO_26 = float(1 << _LIMB)

Exact = int | float


def fixed(x: float) -> Exact:
    """``x`` exactly, in units of 2**-1074 (a float only when x is not finite)."""
    x = float(x)
    if not math.isfinite(x):
        return x
    num, den = x.as_integer_ratio()  # den = 2**k with k <= 1074
    return num << (FRAC_BITS + 1 - den.bit_length())


def fixed_square(x: float) -> tuple[Exact, Exact]:
    """(``fixed(x)``, its exact square in units of 2**-2148), squaring the short
    numerator rather than the long fixed integer."""
    x = float(x)
    if not math.isfinite(x):
        return x, x * x
    num, den = x.as_integer_ratio()
    shift = FRAC_BITS + 1 - den.bit_length()
    return num << shift, (num * num) << (2 * shift)


def fixed_sum(values: np.ndarray) -> Exact:
    """Exact sum of a float64 array in units of 2**-1074, independent of order."""
    x = np.ascontiguousarray(values, dtype=np.float64).ravel()
    finite = np.isfinite(x)
    if not finite.all():
        with np.errstate(invalid="ignore"):  # inf + -inf is nan, as intended
            return float(np.sum(x[~finite]))  # inf, -inf or nan: order-free on its own
    total = 0
    for start in range(0, x.size, _CHUNK):
        total += _fixed_sum_chunk(x[start : start + _CHUNK])
    return total


def _fixed_sum_chunk(x: np.ndarray) -> int:
    if not x.size:
        return 0
    # x = f * 2**e with 0.5 <= |f| < 1: the integer m = f * 2**53 splits exactly into
    # limbs hi = trunc(f * 2**27) and lo = m - hi * 2**26, |hi| < 2**27, |lo| < 2**26.
    lo, exp = np.frexp(x)
    lo *= _TWO_27
    hi = np.trunc(lo)
    lo -= hi
    lo *= _TWO_26
    e_min = int(exp.min())
    idx = (exp - e_min).astype(np.intp)
    # Each bin adds < 2**26 integers of magnitude < 2**27: every float64 partial sum
    # is an integer below 2**53, so the bin sums are exact whatever the order.
    sum_hi = np.bincount(idx, weights=hi)
    sum_lo = np.bincount(idx, weights=lo)
    total = 0
    for i in np.flatnonzero((sum_hi != 0.0) | (sum_lo != 0.0)).tolist():
        m = (int(sum_hi[i]) << _LIMB) + int(sum_lo[i])
        # x = m * 2**(e - 53) = m << (e + 1021) units; a negative shift only occurs
        # for subnormals, whose m is divisible by 2**-(e + 1021): >> is then exact.
        shift = e_min + i + FRAC_BITS - 53
        total += m << shift if shift >= 0 else m >> -shift
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


def segment_sums(values: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """Sum of each non-empty run of ``values``, the runs having lengths ``counts``.

    ``np.add.reduceat`` reduces each run on its own, so a run's sum depends only on its
    values and their order, never on where the run sits in ``values`` or on its
    neighbours (tests/metrics pin this down). Empty runs are dropped.
    """
    counts = np.asarray(counts, dtype=np.int64)
    values = np.asarray(values, dtype=np.float64)
    nonempty = counts > 0
    if not nonempty.any():
        return np.zeros(0, dtype=np.float64)
    starts = (np.cumsum(counts) - counts)[nonempty]
    return np.add.reduceat(values, starts)
