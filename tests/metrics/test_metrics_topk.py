"""TopKEntropyAgg: hand values, bounds around the true entropy, merges."""

from __future__ import annotations

import math
import pickle

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rlstream.metrics.topk import TopKEntropyAgg

NAN = float("nan")


def test_hand_computed_row() -> None:
    lp = np.log(np.array([[0.5, 0.25, NAN], [NAN, NAN, NAN]]))
    out = TopKEntropyAgg.from_arrays(lp, vocab_size=10).finalize()
    tau = 0.25
    lb = -(0.5 * math.log(0.5) + 0.25 * math.log(0.25)) - tau * math.log(tau)
    assert out["entropy_topk_lb"] == pytest.approx(lb, rel=1e-12)
    # k = 2 finite entries: the tail spreads over 10 - 2 tokens.
    assert out["entropy_topk_ub"] == pytest.approx(lb + tau * math.log(8), rel=1e-12)
    assert TopKEntropyAgg.from_arrays(lp, vocab_size=10).n == 1  # all-NaN row skipped


def test_full_mass_has_no_tail_and_no_nan() -> None:
    lp = np.log(np.array([[0.6, 0.4000001]]))  # Σp slightly above 1: τ clamps to 0
    out = TopKEntropyAgg.from_arrays(lp, vocab_size=2).finalize()
    expected = -(0.6 * math.log(0.6) + 0.4000001 * math.log(0.4000001))
    assert out["entropy_topk_lb"] == pytest.approx(expected, rel=1e-12)
    assert out["entropy_topk_ub"] == pytest.approx(expected, rel=1e-12)


def test_unknown_vocab_and_empty() -> None:
    lp = np.log(np.array([[0.9]]))
    out = TopKEntropyAgg.from_arrays(lp, vocab_size=None).finalize()
    assert out["entropy_topk_lb"] is not None and out["entropy_topk_ub"] is None
    assert TopKEntropyAgg.empty().finalize() == {"entropy_topk_lb": None, "entropy_topk_ub": None}
    nan_rows = TopKEntropyAgg.from_arrays(np.full((3, 4), NAN), vocab_size=100)
    assert nan_rows.finalize() == {"entropy_topk_lb": None, "entropy_topk_ub": None}
    # An empty shard without V does not hide the upper bound; a real one does.
    known = TopKEntropyAgg.from_arrays(lp, vocab_size=50)
    no_v_empty = TopKEntropyAgg.from_arrays(np.zeros((0, 3)), vocab_size=None)
    assert known.merge(no_v_empty).finalize()["entropy_topk_ub"] is not None
    assert known.merge(TopKEntropyAgg.from_arrays(lp, None)).finalize()["entropy_topk_ub"] is None
    with pytest.raises(ValueError, match="2-D"):
        TopKEntropyAgg.from_arrays(np.zeros(3), vocab_size=5)


@st.composite
def distributions(draw):
    vocab = draw(st.integers(2, 40))
    logits = np.array(draw(st.lists(st.floats(-8, 8), min_size=vocab, max_size=vocab)))
    k = draw(st.integers(1, vocab))
    return vocab, logits, k


@settings(max_examples=200, deadline=None)
@given(distributions())
def test_bounds_bracket_true_entropy(dist) -> None:
    vocab, logits, k = dist
    lp_full = logits - np.log(np.sum(np.exp(logits - logits.max()))) - logits.max()
    p_full = np.exp(lp_full)
    entropy = float(-np.sum(p_full * lp_full))
    top = np.sort(lp_full)[::-1][:k]
    row = np.full((1, k + 2), NAN)
    row[0, :k] = top
    out = TopKEntropyAgg.from_arrays(row, vocab_size=vocab).finalize()
    assert out["entropy_topk_lb"] <= entropy + 1e-9
    assert entropy <= out["entropy_topk_ub"] + 1e-9


@settings(max_examples=100, deadline=None)
@given(
    st.lists(st.lists(st.floats(-10, 0), min_size=0, max_size=5), max_size=20),
    st.integers(1, 5),
    st.randoms(use_true_random=False),
)
def test_merge_of_any_split_equals_whole(rows, n_shards, rnd) -> None:
    mat = np.full((len(rows), 5), NAN)
    for i, r in enumerate(rows):
        mat[i, : len(r)] = r
    shard_of = np.array([rnd.randrange(n_shards) for _ in rows], dtype=np.int64)
    merged = TopKEntropyAgg.empty()
    for s in rnd.sample(range(n_shards), n_shards):
        merged = merged.merge(TopKEntropyAgg.from_arrays(mat[shard_of == s], vocab_size=100))
    whole = TopKEntropyAgg.from_arrays(mat, vocab_size=100).finalize()
    got = merged.finalize()
    for key, value in whole.items():
        assert got[key] == (None if value is None else pytest.approx(value, rel=1e-9, abs=1e-12))


def test_pickle_round_trip() -> None:
    a = TopKEntropyAgg.from_arrays(np.log(np.array([[0.3, 0.2]])), vocab_size=7)
    b = pickle.loads(pickle.dumps(a))
    assert b == a and b.finalize() == a.finalize()
