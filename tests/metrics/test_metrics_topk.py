"""TopKEntropyAgg: hand values, bounds around the true entropy, merges."""

from __future__ import annotations

import math
import pickle

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rlstream.metrics.topk import TopKEntropyAgg
from tests.metrics.merging import assert_identical, merge_tree, split_plans

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


row_st = st.lists(st.one_of(st.floats(-40, 0), st.just(NAN)), max_size=6)


def padded(rows: list[list[float]], width: int) -> np.ndarray:
    mat = np.full((len(rows), width), NAN)
    for i, r in enumerate(rows):
        mat[i, : len(r)] = r
    return mat


@settings(max_examples=300, deadline=None)
@given(st.lists(row_st, max_size=25), st.sampled_from([None, 3, 100, 50_000]), st.data())
def test_any_split_any_merge_tree_is_exactly_the_whole(rows, vocab, data) -> None:
    shards, shape, rnd = data.draw(split_plans(len(rows)))
    # Each batch pads to its own widest row (as the transcript reader does), plus
    # some extra NaN columns: the row's bounds must not depend on the width.
    aggs = [
        TopKEntropyAgg.from_arrays(
            padded(
                [rows[i] for i in s], max([len(rows[i]) for i in s], default=0) + rnd.randint(0, 3)
            ),
            vocab_size=vocab,
        )
        for s in shards
    ]
    merged = merge_tree(aggs, TopKEntropyAgg.empty(), shape, rnd)
    whole = TopKEntropyAgg.from_arrays(padded(rows, 6), vocab_size=vocab)
    assert_identical(merged.finalize(), whole.finalize())
    assert merged == whole


def test_wide_rows_do_not_depend_on_padding_width() -> None:
    # With 8+ entries a row-wise np.sum regroups (pairwise) as the width grows; the
    # column-by-column sums do not.
    rng = np.random.default_rng(5)
    lp = np.log(rng.dirichlet(np.ones(40), 500))[:, :24]
    base = TopKEntropyAgg.from_arrays(lp, vocab_size=1000)
    for extra in (1, 7, 8, 9, 40):
        wide = np.concatenate([lp, np.full((lp.shape[0], extra), NAN)], axis=1)
        assert TopKEntropyAgg.from_arrays(wide, vocab_size=1000) == base
    one_by_one = TopKEntropyAgg.empty()
    for row in lp[::-1]:
        one_by_one = TopKEntropyAgg.from_arrays(row[None, :], vocab_size=1000).merge(one_by_one)
    assert_identical(one_by_one.finalize(), base.finalize())


def test_pickle_round_trip() -> None:
    a = TopKEntropyAgg.from_arrays(np.log(np.array([[0.3, 0.2]])), vocab_size=7)
    b = pickle.loads(pickle.dumps(a))
    assert b == a and b.finalize() == a.finalize()
