"""TokenAgg: oracle values, invariants and merge-equals-whole."""

from __future__ import annotations

import math
import pickle
import random
from itertools import pairwise

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rlstream.metrics.tokens import TokenAgg
from tests.metrics.merging import assert_identical, merge_tree, split_plans

NAN = float("nan")
MISMATCH_KEYS = (
    "trained_tokens",
    "mismatch_kl",
    "mismatch_k1",
    "mismatch_k2",
    "mismatch_kl_max",
    "mismatch_ess",
    "mismatch_ess_seq",
    "is_ratio_max",
    "is_frac_gt_2",
)

# A generation is (trains, [(ls, lt), ...]); NaN marks a null logprob.
Gen = tuple[bool, list[tuple[float, float]]]


def build(gens: list[Gen]) -> TokenAgg:
    ls = [t[0] for _, toks in gens for t in toks]
    lt = [t[1] for _, toks in gens for t in toks]
    offsets = np.cumsum([0] + [len(toks) for _, toks in gens])
    trains = np.array([tr for tr, _ in gens], dtype=bool)
    return TokenAgg.from_arrays(
        np.array(ls, dtype=np.float64),
        np.array(lt, dtype=np.float64),
        offsets.astype(np.int64),
        trains,
    )


def reference(gens: list[Gen]) -> dict[str, float | int | None]:
    """Straightforward per-token Python formulas of DESIGN.md section 3."""
    trained = [
        [(ls, lt) for ls, lt in toks if math.isfinite(ls) and math.isfinite(lt)]
        for tr, toks in gens
        if tr
    ]
    flat = [t for g in trained for t in g]
    sampled = [ls for _, toks in gens for ls, _ in toks if math.isfinite(ls)]
    out: dict[str, float | int | None] = dict.fromkeys(MISMATCH_KEYS)
    out["trained_tokens"] = len(flat)
    out["sampled_tokens"] = len(sampled)
    out["entropy_estimate"] = -sum(sampled) / len(sampled) if sampled else None
    if flat:
        n = len(flat)
        d = [min(20.0, max(-20.0, lt - ls)) for ls, lt in flat]
        w = [math.exp(x) for x in d]
        k3 = [math.exp(x) - 1 - x for x in d]
        out["mismatch_kl"] = sum(k3) / n
        out["mismatch_k1"] = sum(ls - lt for ls, lt in flat) / n
        out["mismatch_k2"] = sum((ls - lt) ** 2 / 2 for ls, lt in flat) / n
        out["mismatch_kl_max"] = max(k3)
        out["mismatch_ess"] = sum(w) ** 2 / (n * sum(x * x for x in w))
        out["is_ratio_max"] = max(w)
        out["is_frac_gt_2"] = sum(x > 2 for x in w) / n
    seq = [sum(min(20.0, max(-20.0, lt - ls)) for ls, lt in g) for g in trained if g]
    if seq:
        big_w = [math.exp(x) for x in seq]
        out["mismatch_ess_seq"] = sum(big_w) ** 2 / (len(seq) * sum(x * x for x in big_w))
    return out


def assert_close(got: dict, want: dict, keys=None, rel: float = 1e-9, abs_: float = 1e-12) -> None:
    for k in keys or want:
        if want[k] is None:
            assert got[k] is None, k
        else:
            assert got[k] == pytest.approx(want[k], rel=rel, abs=abs_), k


# --- strategies --------------------------------------------------------------------

logprob = st.floats(-30.0, 0.0, allow_nan=False)
maybe_null = st.one_of(logprob, st.just(NAN))


@st.composite
def token_pair(draw, equal: bool = False) -> tuple[float, float]:
    ls = draw(maybe_null)
    if equal:
        return ls, ls
    lt = draw(st.one_of(st.floats(-30.0, 0.0), st.just(NAN)))
    return ls, lt


def gens_strategy(equal: bool = False, max_gens: int = 8):
    gen = st.tuples(st.booleans(), st.lists(token_pair(equal), max_size=6))
    return st.lists(gen, max_size=max_gens)


# --- oracle tests ------------------------------------------------------------------


def test_hand_computed_two_tokens() -> None:
    ln3 = math.log(3.0)
    agg = build([(True, [(-1.0, -1.0 + ln3)]), (True, [(-1.0, -1.0)])])
    out = agg.finalize()
    # w = [3, 1]: ESS = (3 + 1)^2 / (2 * (9 + 1)) = 0.8, per token and per sequence.
    assert out["mismatch_ess"] == pytest.approx(0.8, rel=1e-12)
    assert out["mismatch_ess_seq"] == pytest.approx(0.8, rel=1e-12)
    assert out["mismatch_kl"] == pytest.approx((3 - 1 - ln3) / 2, rel=1e-12)
    assert out["mismatch_k1"] == pytest.approx(-ln3 / 2, rel=1e-12)
    assert out["mismatch_k2"] == pytest.approx(ln3**2 / 4, rel=1e-12)
    assert out["is_ratio_max"] == pytest.approx(3.0, rel=1e-12)
    assert out["is_frac_gt_2"] == 0.5
    assert out["entropy_estimate"] == pytest.approx(1.0)
    assert out["trained_tokens"] == 2 and out["sampled_tokens"] == 2


def test_clamp_applies_to_k3_and_weights_only() -> None:
    # lt - ls = +29 and -35: beyond the clamp on both sides.
    gens: list[Gen] = [(True, [(-30.0, -1.0), (-0.5, -35.5)])]
    out = build(gens).finalize()
    d = [20.0, -20.0]
    assert out["mismatch_k1"] == pytest.approx((-29.0 + 35.0) / 2)
    assert out["mismatch_k2"] == pytest.approx((29.0**2 / 2 + 35.0**2 / 2) / 2)
    k3 = [math.exp(x) - 1 - x for x in d]
    assert out["mismatch_kl"] == pytest.approx(sum(k3) / 2, rel=1e-12)
    assert out["mismatch_kl_max"] == pytest.approx(math.exp(20) - 21, rel=1e-12)
    assert out["is_ratio_max"] == pytest.approx(math.exp(20), rel=1e-12)
    assert out["is_frac_gt_2"] == 0.5
    w = [math.exp(x) for x in d]
    assert out["mismatch_ess"] == pytest.approx(sum(w) ** 2 / (2 * sum(x * x for x in w)), rel=1e-9)
    # One generation: its single weight exp(20 - 20) gives ESS_seq = 1.
    assert out["mismatch_ess_seq"] == pytest.approx(1.0)
    assert_close(out, reference(gens))


def test_null_and_untrained_tokens_are_excluded_by_hand() -> None:
    gens: list[Gen] = [
        (True, [(-1.0, -2.0), (NAN, -1.0), (-3.0, NAN)]),  # one token in T
        (False, [(-0.25, -5.0)]),  # sampled, not trained
        (True, []),
    ]
    out = build(gens).finalize()
    assert out["trained_tokens"] == 1
    assert out["sampled_tokens"] == 3
    assert out["entropy_estimate"] == pytest.approx((1.0 + 3.0 + 0.25) / 3)
    assert out["mismatch_k1"] == pytest.approx(1.0)
    assert out["mismatch_kl"] == pytest.approx(math.exp(-1.0) - 1 + 1)
    assert out["mismatch_ess"] == pytest.approx(1.0)
    assert_close(out, reference(gens))


def test_empty_is_none_not_zero() -> None:
    for agg in (TokenAgg.empty(), build([]), build([(False, [(-1.0, -1.0)])])):
        out = agg.finalize()
        assert out["trained_tokens"] == 0
        for k in MISMATCH_KEYS[1:]:
            assert out[k] is None, k
    assert TokenAgg.empty().finalize()["entropy_estimate"] is None


def test_rejects_inconsistent_offsets() -> None:
    with pytest.raises(ValueError, match="offsets_G1"):
        TokenAgg.from_arrays(np.zeros(3), np.zeros(3), np.array([0, 2]), np.array([True]))
    with pytest.raises(ValueError, match="trains_G"):
        TokenAgg.from_arrays(np.zeros(3), np.zeros(3), np.array([0, 3]), np.array([True, False]))


@settings(max_examples=200, deadline=None)
@given(gens_strategy())
def test_matches_reference(gens: list[Gen]) -> None:
    assert_close(build(gens).finalize(), reference(gens), abs_=1e-9)


# --- invariants --------------------------------------------------------------------


@settings(max_examples=200, deadline=None)
@given(gens_strategy())
def test_k3_nonnegative_and_ess_in_unit_interval(gens: list[Gen]) -> None:
    for tr, toks in gens:
        for pair in toks:
            assert build([(tr, [pair])]).sum_k3 >= 0.0
    out = build(gens).finalize()
    if out["trained_tokens"]:
        assert out["mismatch_kl"] >= 0.0
        assert out["mismatch_kl_max"] >= 0.0
        assert 0.0 < out["mismatch_ess"] <= 1.0
        assert 0.0 < out["mismatch_ess_seq"] <= 1.0
        assert out["mismatch_ess"] >= 1.0 / out["trained_tokens"] * (1 - 1e-12)


@settings(max_examples=100, deadline=None)
@given(gens_strategy(equal=True))
def test_identical_policies_give_zero_kl_and_full_ess(gens: list[Gen]) -> None:
    out = build(gens).finalize()
    if not out["trained_tokens"]:
        return
    assert out["mismatch_kl"] == 0.0
    assert out["mismatch_k1"] == 0.0
    assert out["mismatch_k2"] == 0.0
    assert out["mismatch_kl_max"] == 0.0
    assert out["mismatch_ess"] == pytest.approx(1.0, rel=1e-12)
    assert out["mismatch_ess_seq"] == pytest.approx(1.0, rel=1e-12)
    assert out["is_ratio_max"] == 1.0
    assert out["is_frac_gt_2"] == 0.0


@settings(max_examples=100, deadline=None)
@given(gens_strategy(), gens_strategy(), st.randoms(use_true_random=False))
def test_nulls_and_untrained_generations_do_not_change_mismatch(gens, extra, rnd) -> None:
    base = build(gens).finalize()
    noisy: list[Gen] = []
    for tr, toks in gens:
        toks = list(toks)
        for _ in range(rnd.randint(0, 3)):  # null tokens: ls or lt missing
            pair = (NAN, -1.0) if rnd.random() < 0.5 else (-1.0, NAN)
            toks.insert(rnd.randint(0, len(toks)), pair)
        noisy.append((tr, toks))
    for _, toks in extra:
        noisy.insert(rnd.randint(0, len(noisy)), (False, toks))
    assert_close(build(noisy).finalize(), base, keys=MISMATCH_KEYS)


# --- exact merges ------------------------------------------------------------------


@settings(max_examples=300, deadline=None)
@given(gens_strategy(max_gens=12), st.data())
def test_any_split_any_merge_tree_is_exactly_the_whole(gens: list[Gen], data) -> None:
    shards, shape, rnd = data.draw(split_plans(len(gens)))
    aggs = [build([gens[i] for i in shard]) for shard in shards]
    merged = merge_tree(aggs, TokenAgg.empty(), shape, rnd)
    whole = build(gens)
    assert_identical(merged.finalize(), whole.finalize())
    assert merged == whole  # the state itself is canonical


def test_live_polls_and_restarts_match_one_batch_bit_for_bit() -> None:
    # A realistic step: 600 generations with wide-ranging lengths and logprobs,
    # folded one poll at a time (1-7 generations), in a balanced tree of
    # checkpoints, and in one batch: all three rows are identical.
    rng = np.random.default_rng(11)
    lens = rng.integers(0, 400, 600)
    offsets = np.zeros(lens.size + 1, np.int64)
    np.cumsum(lens, out=offsets[1:])
    ls = -rng.exponential(2.0, offsets[-1]) * 10.0 ** rng.integers(-6, 2, offsets[-1])
    lt = ls + rng.normal(0.0, 0.3, ls.size)
    ls[rng.random(ls.size) < 0.02] = NAN
    lt[rng.random(ls.size) < 0.05] = NAN
    trains = rng.random(lens.size) < 0.8

    def batch(g0: int, g1: int) -> TokenAgg:
        a, b = offsets[g0], offsets[g1]
        return TokenAgg.from_arrays(ls[a:b], lt[a:b], offsets[g0 : g1 + 1] - a, trains[g0:g1])

    whole = batch(0, lens.size)
    cuts = [0]
    while cuts[-1] < lens.size:
        cuts.append(min(lens.size, cuts[-1] + int(rng.integers(1, 8))))
    polls = [batch(a, b) for a, b in pairwise(cuts)]
    live = TokenAgg.empty()
    for p in polls:
        live = live.merge(p)
    restarted = merge_tree(polls, TokenAgg.empty(), "balanced", random.Random(0))
    for other in (live, restarted):
        assert_identical(other.finalize(), whole.finalize())
        assert other == whole


def test_merge_is_associative_commutative_and_does_not_mutate() -> None:
    a = build([(True, [(-1.0, -1.5), (-2.0, -0.5)])])
    b = build([(True, [(-0.1, -3.0)]), (False, [(-2.0, -2.0)])])
    c = build([(True, [(-4.0, -4.5)])])
    before = (a.finalize(), b.finalize())
    left, right = a.merge(b).merge(c), a.merge(b.merge(c))
    assert left == right and left.finalize() == right.finalize()
    assert b.merge(a) == a.merge(b)
    assert (a.finalize(), b.finalize()) == before
    assert a.merge(TokenAgg.empty()) == a
    assert a.merge(b).log_w_g is not a.log_w_g


def test_pickle_round_trip() -> None:
    a = build([(True, [(-1.0, -1.5), (NAN, -0.5)]), (False, [(-2.0, -2.0)])])
    b = pickle.loads(pickle.dumps(a))
    assert b == a and b is not a
    assert b.finalize() == a.finalize()
    assert a != build([(True, [(-1.0, -1.25)])])


def test_many_tokens_vectorised() -> None:
    rng = np.random.default_rng(0)
    n_gen, per = 2_000, 500
    ls = -rng.exponential(1.0, n_gen * per)
    lt = ls + rng.normal(0.0, 0.05, ls.size)
    lt[rng.random(ls.size) < 0.1] = np.nan
    offsets = np.arange(0, n_gen * per + 1, per, dtype=np.int64)
    trains = rng.random(n_gen) < 0.8
    out = TokenAgg.from_arrays(ls, lt, offsets, trains).finalize()
    # Small symmetric noise: k3 ~ sigma^2 / 2 and the token ESS close to 1.
    assert out["mismatch_kl"] == pytest.approx(0.05**2 / 2, rel=0.05)
    assert out["mismatch_ess"] == pytest.approx(math.exp(-(0.05**2)), rel=1e-3)
    assert out["trained_tokens"] == pytest.approx(0.8 * 0.9 * ls.size, rel=0.02)


def test_exact_entropy_where_given_sampler_estimate_elsewhere_by_hand() -> None:
    """docs/schema.md: the mean over tokens of the exported exact entropy where it is
    given, of -ls where it is not (and ls is finite); the share exact beside it."""
    ls = np.array([-1.0, -2.0, NAN, -0.5, -4.0])
    lt = np.array([-1.0, -2.0, -1.0, -0.5, -4.0])
    ent = np.array([0.7, NAN, 1.9, NAN, 0.1])  # token 2: exact entropy, no ls
    offsets = np.array([0, 3, 5], np.int64)
    trains = np.array([True, False])
    out = TokenAgg.from_arrays(ls, lt, offsets, trains, ent).finalize()
    assert out["entropy_estimate"] == pytest.approx((0.7 + 2.0 + 1.9 + 0.5 + 0.1) / 5)
    assert out["entropy_exact_frac"] == pytest.approx(3 / 5)
    assert out["sampled_tokens"] == 4  # finite ls, whatever the entropy's source
    # Without exact entropy: the sampler estimate alone, share 0.
    plain = TokenAgg.from_arrays(ls, lt, offsets, trains).finalize()
    assert plain["entropy_estimate"] == pytest.approx((1.0 + 2.0 + 0.5 + 4.0) / 4)
    assert plain["entropy_exact_frac"] == 0.0
    # Generations split across batches merge to the whole, bit for bit.
    a = TokenAgg.from_arrays(ls[:3], lt[:3], offsets[:2], trains[:1], ent[:3])
    b = TokenAgg.from_arrays(ls[3:], lt[3:], np.array([0, 2]), trains[1:], ent[3:])
    assert b.merge(a).finalize() == out
    with pytest.raises(ValueError):
        TokenAgg.from_arrays(ls, lt, offsets, trains, ent[:2])
