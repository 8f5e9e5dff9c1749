"""Exact summation helpers, and the numpy behaviours the exact merges rely on."""

from __future__ import annotations

import math
import pickle
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rlstream.metrics import exact
from rlstream.metrics.exact import (
    FRAC_BITS,
    add,
    fixed,
    fixed_square,
    fixed_sum,
    ratio,
    segment_sums,
)

finite = st.floats(allow_nan=False, allow_infinity=False)
wide = st.one_of(finite, st.floats(-1e-300, 1e-300), st.sampled_from([5e-324, -5e-324, -0.0]))


def as_fraction(e: int) -> Fraction:
    return Fraction(e, 1 << FRAC_BITS)


@settings(max_examples=300, deadline=None)
@given(st.lists(wide, max_size=40))
def test_fixed_sum_is_the_exact_sum(values: list[float]) -> None:
    arr = np.array(values, dtype=np.float64)
    got = fixed_sum(arr)
    want = sum(map(Fraction, values), Fraction(0))
    assert isinstance(got, int) and as_fraction(got) == want
    assert got == sum(map(fixed, values)) == fixed_sum(arr[::-1].copy())
    if values and abs(want / len(values)) < 1e308:
        assert ratio(got, len(values)) == float(want / len(values))  # rounded once


@settings(max_examples=200, deadline=None)
@given(wide)
def test_fixed_square_is_exact(x: float) -> None:
    value, square = fixed_square(x)
    assert value == fixed(x) and as_fraction(value) == Fraction(x)
    assert square == value * value and Fraction(square, 1 << (2 * FRAC_BITS)) == Fraction(x) ** 2


def test_fixed_sum_over_several_chunks(monkeypatch: pytest.MonkeyPatch) -> None:
    rng = np.random.default_rng(0)
    x = rng.normal(0, 1, 1000) * 10.0 ** rng.integers(-300, 300, 1000)
    whole = fixed_sum(x)
    monkeypatch.setattr(exact, "_CHUNK", 7)
    assert fixed_sum(x) == whole == sum(fixed(v) for v in x.tolist())


def test_non_finite_values_are_order_free() -> None:
    inf, nan = math.inf, math.nan
    assert fixed_sum(np.array([1.0, inf, 2.0])) == inf
    assert math.isnan(fixed_sum(np.array([inf, -inf])))
    assert math.isnan(fixed_sum(np.array([1.0, nan])))
    assert add(fixed(1.0), fixed(-inf)) == -inf == add(fixed(-inf), 5)
    assert math.isnan(add(inf, fixed(-inf)))
    assert ratio(fixed(inf), 3) == inf
    assert fixed_square(-inf) == (-inf, inf)
    assert ratio(add(fixed(0.1), fixed(0.2)), 1) == float(Fraction(0.1) + Fraction(0.2))
    assert ratio(fixed(1.0), np.int64(4)) == 0.25  # numpy counts are accepted
    small = fixed_sum(np.array([0.1, 1e-300]))
    assert pickle.loads(pickle.dumps(small)) == small == fixed(0.1) + fixed(1e-300)


def test_segment_sums_drop_empty_runs() -> None:
    got = segment_sums(np.array([1.0, 2.0, 4.0]), np.array([0, 2, 0, 1, 0]))
    assert got.tolist() == [3.0, 4.0]
    assert segment_sums(np.zeros(0), np.array([0, 0])).size == 0


# --- numpy behaviours relied upon (canaries: fail loudly if a numpy upgrade changes them)


@pytest.mark.parametrize("length", [1, 7, 8, 9, 127, 128, 129, 1000, 8193, 40_000])
def test_segment_sum_does_not_depend_on_where_the_segment_sits(length: int) -> None:
    rng = np.random.default_rng(length)
    seg = rng.normal(0, 1, length) * 10.0 ** rng.integers(-8, 8, length)
    ref = segment_sums(seg, np.array([length]))[0]
    for pad in (1, 2, 3, 5, 8, 13, 64, 4095, 8191, 8193):
        before, after = rng.normal(0, 1, pad), rng.normal(0, 1, 3)
        values = np.concatenate([before, seg, after])
        assert segment_sums(values, np.array([pad, 0, length, 3]))[1] == ref


@pytest.mark.parametrize("func", [np.exp, np.expm1, np.log, np.log1p])
def test_elementwise_results_do_not_depend_on_position(func) -> None:
    rng = np.random.default_rng(1)
    x = rng.uniform(0.001, 20.0, 300)
    ref = func(x)
    for pad in range(1, 17):
        shifted = func(np.concatenate([rng.uniform(0.001, 20.0, pad), x]))[pad:]
        assert np.array_equal(shifted, ref)
        assert np.array_equal(func(x[pad:]), ref[pad:])
