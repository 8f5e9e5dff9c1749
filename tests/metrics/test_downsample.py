"""The step digest keeps, per bin of steps, exactly the points the definition names.

The expected points are recomputed here with a loop over the raw rows, straight from
the definition (docs/schema.md, `step_digest`): per bin of `width` steps, the first
step with the lowest value, the first with the highest, the first and the last step
with no value. Reducing points again at twice the width, and folding rows in pieces,
must give what reducing the raw rows at once gives.
"""

from __future__ import annotations

import math
import random

import numpy as np
import pyarrow as pa
import pytest

from rlstream.metrics.downsample import MAX_BINS, bin_width, fold, reduce_points


def expected(steps: list[int], values: list[float], width: int) -> list[tuple[int, float]]:
    bins: dict[int, list[tuple[int, float]]] = {}
    for s, v in zip(steps, values, strict=True):
        bins.setdefault(s // width, []).append((s, v))
    keep: set[int] = set()
    for pts in bins.values():
        have = [(s, v) for s, v in pts if not math.isnan(v)]
        if have:
            lo = min(v for _, v in have)
            hi = max(v for _, v in have)
            keep.add(next(s for s, v in have if v == lo))
            keep.add(next(s for s, v in have if v == hi))
        missing = [s for s, v in pts if math.isnan(v)]
        if missing:
            keep.update((missing[0], missing[-1]))
    by_step = dict(zip(steps, values, strict=True))
    return [(s, by_step[s]) for s in sorted(keep)]


def series(rng: random.Random, n: int) -> tuple[list[int], list[float]]:
    steps = sorted(rng.sample(range(3 * n), n))
    values = []
    for _ in steps:
        r = rng.random()
        # ties on purpose (a few distinct values), and runs of missing values
        values.append(float("nan") if r < 0.2 else float(rng.randint(0, 6)))
    return steps, values


def as_list(pts: tuple[np.ndarray, np.ndarray]) -> list[tuple[int, float]]:
    return list(zip(pts[0].tolist(), pts[1].tolist(), strict=True))


def same(a: list[tuple[int, float]], b: list[tuple[int, float]]) -> bool:
    return [(s, repr(v)) for s, v in a] == [(s, repr(v)) for s, v in b]


@pytest.mark.parametrize("seed", range(12))
def test_reduce_keeps_the_defined_points_and_coarsens_exactly(seed):
    rng = random.Random(seed)
    steps, values = series(rng, rng.randint(1, 400))
    for width in (1, 2, 4, 8, 32):
        got = as_list(reduce_points(np.array(steps), np.array(values), width))
        assert same(got, expected(steps, values, width)), width
        twice = reduce_points(*reduce_points(np.array(steps), np.array(values), width), 2 * width)
        assert same(as_list(twice), expected(steps, values, 2 * width)), width


def test_width_one_keeps_the_series_itself():
    steps, values = [0, 1, 2, 5], [1.0, float("nan"), 3.0, 2.0]
    got = as_list(reduce_points(np.array(steps), np.array(values), 1))
    assert same(got, list(zip(steps, values, strict=True)))


@pytest.mark.parametrize("first,last", [(0, 0), (0, 255), (0, 256), (7, 10_000), (999, 1_000_000)])
def test_bin_width_is_the_smallest_power_of_two_within_max_bins(first, last):
    w = bin_width(first, last)
    assert w & (w - 1) == 0 and last // w - first // w + 1 <= MAX_BINS
    assert w == 1 or last // (w // 2) - first // (w // 2) + 1 > MAX_BINS


def rows(steps: list[int], rng: random.Random, keys_from: int = 0) -> pa.Table:
    """Step rows with a plain column, a KL column (log axis), a discards map whose key
    `late` appears only from step `keys_from`, and a metadata map on some steps."""
    kl = [rng.choice([0.0, -1.0, None, rng.random()]) for _ in steps]
    reward = [None if rng.random() < 0.1 else rng.random() for _ in steps]
    disc = [
        [("a", float(rng.randint(0, 3)))] + ([("late", 1.0)] if s >= keys_from and s % 3 else [])
        for s in steps
    ]
    meta = [[("turns", float(s))] if s % 7 == 0 else [] for s in steps]
    m = pa.map_(pa.string(), pa.float64())
    return pa.table(
        {
            "step": pa.array(steps, pa.int64()),
            "reward_mean": pa.array(reward, pa.float64()),
            "mismatch_kl": pa.array(kl, pa.float64()),
            "discards": pa.array(disc, m),
            "rollout_metadata": pa.array(meta, m),
        }
    )


@pytest.mark.parametrize("seed", range(6))
def test_folding_in_pieces_equals_folding_at_once(seed):
    rng = random.Random(seed)
    n = rng.choice([50, 700, 3000])
    steps = sorted(rng.sample(range(2 * n), n))
    t = rows(steps, rng, keys_from=steps[n // 2])
    whole = fold(None, t)
    d = None
    cut = sorted(rng.sample(range(1, n), 5))
    for a, b in zip([0, *cut], [*cut, n], strict=True):
        d = fold(d, t.slice(a, b - a))
    d = fold(d, t.slice(0, n // 3))  # rows already folded in add nothing
    assert d is not None
    assert (
        (d.width, d.rows, d.last_step)
        == (whole.width, whole.rows, whole.last_step)
        == (
            bin_width(steps[0], steps[-1]),
            n,
            steps[-1],
        )
    )
    assert d.series.keys() == whole.series.keys()
    for name in whole.series:
        assert same(as_list(d.series[name]), as_list(whole.series[name])), name
    assert d.totals == pytest.approx(whole.totals)
    assert d.metadata == whole.metadata == {"turns": float(max(s for s in steps if s % 7 == 0))}
    assert d.keys("discards") == whole.keys("discards")


def test_fold_matches_the_definition_on_each_series():
    rng = random.Random(7)
    steps = list(range(0, 1500))
    t = rows(steps, rng, keys_from=900)
    d = fold(None, t)
    w = d.width
    assert w == 8
    reward = [math.nan if v is None else v for v in t.column("reward_mean").to_pylist()]
    assert same(as_list(d.points("reward_mean")), expected(steps, reward, w))
    kl = [v if v is not None and v > 0 else math.nan for v in t.column("mismatch_kl").to_pylist()]
    assert same(as_list(d.points("mismatch_kl")), expected(steps, kl, w))
    late = [dict(m).get("late", 0.0) for m in t.column("discards").to_pylist()]
    assert same(as_list(d.points("discards", "late")), expected(steps, late, w))
    assert d.totals[("discards", "late")] == sum(late)
    assert as_list(d.points("step")) == [
        (s, float(s)) for b in range(0, 1500, w) for s in (b, min(b + w - 1, 1499))
    ]
    never = d.points("reward_group_std_mean")  # no such column: missing at every bin
    assert never[0].tolist() == d.points("step")[0].tolist() and np.isnan(never[1]).all()
