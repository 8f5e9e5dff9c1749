"""CountHistogram: exact percentiles against numpy, exact merges."""

from __future__ import annotations

import pickle
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rlstream.metrics.quantiles import CountHistogram

values_st = st.lists(st.integers(0, 50), min_size=1, max_size=60)
q_st = st.one_of(st.sampled_from([0.0, 0.1, 0.25, 0.5, 0.9, 0.95, 0.99, 1.0]), st.floats(0.0, 1.0))


@settings(max_examples=400, deadline=None)
@given(values_st, q_st)
def test_quantile_is_bit_identical_to_np_percentile(values: list[int], q: float) -> None:
    arr = np.array(values, dtype=np.int64)
    h = CountHistogram.from_values(arr)
    assert h.quantile(q) == float(np.percentile(arr, 100 * q))


@settings(max_examples=200, deadline=None)
@given(st.lists(st.lists(st.integers(0, 1000), max_size=30), min_size=1, max_size=5), q_st)
def test_merge_of_parts_equals_whole(parts: list[list[int]], q: float) -> None:
    merged = CountHistogram.empty()
    for p in parts:
        merged = merged.merge(CountHistogram.from_values(np.array(p, dtype=np.int64)))
    flat = [v for p in parts for v in p]
    whole = CountHistogram.from_values(np.array(flat, dtype=np.int64))
    np.testing.assert_array_equal(merged.values, whole.values)
    np.testing.assert_array_equal(merged.counts, whole.counts)
    assert merged.count == len(flat)
    if flat:
        assert merged.mean() == whole.mean() == float(Fraction(sum(flat), len(flat)))
        assert merged.max() == max(flat) and merged.min() == min(flat)
        assert merged.quantile(q) == float(np.percentile(flat, 100 * q))


def test_hand_values() -> None:
    h = CountHistogram.from_values(np.array([3, 1, 2, 2, 10]))
    np.testing.assert_array_equal(h.values, [1, 2, 3, 10])
    np.testing.assert_array_equal(h.counts, [1, 2, 1, 1])
    assert h.count == 5
    assert h.mean() == 18 / 5
    assert h.max() == 10
    assert h.quantile(0.5) == 2.0
    assert h.quantile(0.9) == pytest.approx(3 + 0.6 * 7)  # index 3.6 between 3 and 10
    assert isinstance(h.max(), int) and isinstance(h.quantile(0.5), float)


def test_empty_answers_none() -> None:
    h = CountHistogram.empty()
    assert h.count == 0
    assert h.mean() is None and h.max() is None and h.quantile(0.5) is None
    assert CountHistogram.from_values(np.array([], dtype=np.int64)).quantile(0.9) is None


def test_merge_does_not_mutate_and_rejects_bad_input() -> None:
    a = CountHistogram.from_values(np.array([1, 2]))
    b = CountHistogram.from_values(np.array([2, 5]))
    m = a.merge(b)
    np.testing.assert_array_equal(m.counts, [1, 2, 1])
    np.testing.assert_array_equal(a.counts, [1, 1])
    np.testing.assert_array_equal(b.values, [2, 5])
    e = a.merge(CountHistogram.empty())
    assert e.values is not a.values
    with pytest.raises(ValueError, match="integer"):
        CountHistogram.from_values(np.array([1.5]))
    with pytest.raises(ValueError, match="q must be"):
        a.quantile(1.5)


def test_pickle_round_trip() -> None:
    h = CountHistogram.from_values(np.array([0, 0, 4, 7]))
    h2 = pickle.loads(pickle.dumps(h))
    np.testing.assert_array_equal(h2.values, h.values)
    np.testing.assert_array_equal(h2.counts, h.counts)
    assert h2.quantile(0.9) == h.quantile(0.9)
