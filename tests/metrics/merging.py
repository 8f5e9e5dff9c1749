"""Shared helpers for the exact merge-equals-whole properties.

`split_plans(n)` draws a way to cut n atomic items (generations, rows, records) into
shards, contiguous or not, empty shards allowed, plus a merge-tree shape; `merge_tree`
folds the shards' aggregates along that shape; `assert_identical` compares finalize
dicts with `==` and, for floats, bit for bit (float.hex tells -0.0 from 0.0).
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Sequence
from functools import reduce
from itertools import pairwise
from typing import Any, TypeVar

from hypothesis import strategies as st

A = TypeVar("A")
SHAPES = ("left", "right", "balanced", "random", "shuffled")


def merge_tree(aggs: Sequence[A], empty: A, shape: str, rnd: random.Random) -> A:
    """Merge ``aggs`` along one tree shape (starting from ``empty`` for the folds)."""
    aggs = list(aggs)
    if shape == "left":
        return reduce(lambda acc, a: acc.merge(a), aggs, empty)
    if shape == "right":
        return reduce(lambda acc, a: a.merge(acc), reversed(aggs), empty)
    if shape == "shuffled":
        rnd.shuffle(aggs)
        return reduce(
            lambda acc, a: acc.merge(a) if rnd.random() < 0.5 else a.merge(acc), aggs, empty
        )
    if shape == "balanced":

        def halves(xs: list[A]) -> A:
            if not xs:
                return empty
            if len(xs) == 1:
                return xs[0]
            mid = len(xs) // 2
            return halves(xs[:mid]).merge(halves(xs[mid:]))

        return halves(aggs)
    if shape == "random":  # merge two random partials, either way round, until one is left
        pool = [*aggs, empty]
        while len(pool) > 1:
            a = pool.pop(rnd.randrange(len(pool)))
            b = pool.pop(rnd.randrange(len(pool)))
            pool.append(a.merge(b) if rnd.random() < 0.5 else b.merge(a))
        return pool[0]
    raise ValueError(shape)


@st.composite
def split_plans(draw: Callable, n_items: int, max_shards: int = 6) -> tuple:
    """(shards as lists of item indices, tree shape, seeded Random)."""
    n_shards = draw(st.integers(1, max_shards))
    if draw(st.booleans()):  # contiguous byte-range-like cuts
        cuts = sorted(
            draw(st.lists(st.integers(0, n_items), min_size=n_shards - 1, max_size=n_shards - 1))
        )
        bounds = [0, *cuts, n_items]
        shards = [list(range(a, b)) for a, b in pairwise(bounds)]
    else:  # any item to any shard, order kept within a shard
        owner = draw(st.lists(st.integers(0, n_shards - 1), min_size=n_items, max_size=n_items))
        shards = [[i for i, o in enumerate(owner) if o == s] for s in range(n_shards)]
    return shards, draw(st.sampled_from(SHAPES)), draw(st.randoms(use_true_random=False))


def assert_identical(got: Any, want: Any, path: str = "") -> None:
    """``got == want`` exactly; floats also bit for bit; no NaN allowed on either side."""
    if isinstance(want, dict):
        assert isinstance(got, dict) and list(got) == list(want), path
        for k in want:
            assert_identical(got[k], want[k], f"{path}/{k}")
        return
    assert type(got) is type(want), (path, got, want)
    if isinstance(want, float):
        assert not math.isnan(want), path
        assert got.hex() == want.hex(), (path, got, want)
    else:
        assert got == want, (path, got, want)
