"""StepAgg and package-level contracts: stable columns, None fill, pickling, purity."""

from __future__ import annotations

import ast
import pickle
from pathlib import Path

import numpy as np
import pytest

import rlstream.metrics as metrics
from rlstream.metrics import (
    CompletionAgg,
    RolloutAgg,
    StepAgg,
    TokenAgg,
    TopKEntropyAgg,
)

NAN = float("nan")
PKG_DIR = Path(metrics.__file__).parent


def parts() -> dict:
    return {
        "tokens": TokenAgg.from_arrays(
            np.array([-1.0, -2.0, NAN]),
            np.array([-1.5, -2.0, -1.0]),
            np.array([0, 2, 3]),
            np.array([True, False]),
        ),
        "topk": TopKEntropyAgg.from_arrays(np.log(np.array([[0.5, 0.3]])), vocab_size=32),
        "completions": CompletionAgg.from_arrays(
            np.array([2, 1]),
            np.array([False, True]),
            np.array([4, 4, 9]),
            np.array([0, 2, 3]),
            ["t1", "t2"],
        ),
        "rollouts": RolloutAgg.from_records(
            [
                {
                    "attempt_id": "a",
                    "group_id": "g",
                    "task_id": "t1",
                    "step": 3,
                    "policy_version": 2,
                    "reward": 1.0,
                    "trained": True,
                    "discard_reason": None,
                    "metadata": {"turns": 2},
                },
            ]
        ),
    }


def test_columns_are_stable_unique_and_match_each_part() -> None:
    cols = StepAgg.columns()
    names = [n for n, _ in cols]
    assert len(names) == len(set(names))
    full = StepAgg(**parts()).finalize()
    assert list(full) == names
    assert list(StepAgg.empty().finalize()) == names
    for cls in (TokenAgg, TopKEntropyAgg, CompletionAgg, RolloutAgg):
        assert list(cls.empty().finalize()) == [n for n, _ in cls.columns()]
    for name, typ in cols:
        value = full[name]
        assert value is None or type(value) is typ, (name, type(value))
    assert full["trained_tokens"] == 2 and full["attempts"] == 1
    assert full["rollout_metadata"] == {"turns": 2.0}


def test_missing_parts_are_none_filled() -> None:
    p = parts()
    out = StepAgg(tokens=p["tokens"]).finalize()
    assert out["trained_tokens"] == 2
    assert out["mismatch_k1"] == pytest.approx(0.25)
    for name, _ in TopKEntropyAgg.columns() + CompletionAgg.columns() + RolloutAgg.columns():
        assert out[name] is None, name
    assert all(v is None for v in StepAgg.empty().finalize().values())


def test_merge_is_none_aware() -> None:
    p = parts()
    a = StepAgg(tokens=p["tokens"], rollouts=p["rollouts"])
    b = StepAgg(tokens=p["tokens"], topk=p["topk"])
    m = a.merge(b)
    assert m.completions is None
    assert m.rollouts is p["rollouts"] and m.topk is p["topk"]
    assert m.finalize()["trained_tokens"] == 4
    assert b.merge(a).finalize() == m.finalize()
    assert a.finalize()["trained_tokens"] == 2  # inputs untouched


def test_every_aggregate_pickles() -> None:
    full = StepAgg(**parts())
    for agg in [*parts().values(), full, StepAgg.empty()]:
        back = pickle.loads(pickle.dumps(agg))
        assert type(back) is type(agg)
        assert back.finalize() == agg.finalize()


def test_no_module_imports_ray_fsspec_or_other_rlstream_packages() -> None:
    files = sorted(PKG_DIR.glob("*.py"))
    assert {f.name for f in files} >= {"tokens.py", "topk.py", "quantiles.py", "step.py"}
    for path in files:
        tree = ast.parse(path.read_text(), filename=str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                assert node.level == 0, f"{path.name}: use absolute imports"
                names = [node.module or ""]
            else:
                continue
            for name in names:
                root = name.split(".")[0]
                assert root not in {"ray", "fsspec", "s3fs"}, f"{path.name} imports {name}"
                if root == "rlstream":
                    assert name.startswith("rlstream.metrics"), f"{path.name} imports {name}"
        assert ast.get_docstring(tree), f"{path.name} lacks a contract docstring"


def test_step_rows_are_bit_identical_across_splits_and_merge_orders() -> None:
    rng = np.random.default_rng(9)
    lens = rng.integers(1, 50, 40)
    offsets = np.zeros(lens.size + 1, np.int64)
    np.cumsum(lens, out=offsets[1:])
    ls = -rng.exponential(1.0, offsets[-1])
    lt = ls + rng.normal(0, 0.2, ls.size)
    toks = rng.integers(0, 5, ls.size)
    topk = np.log(rng.dirichlet(np.ones(12), ls.size))[:, :9]
    trains = rng.random(lens.size) < 0.7

    def step(g0: int, g1: int) -> StepAgg:
        a, b = offsets[g0], offsets[g1]
        off = offsets[g0 : g1 + 1] - a
        return StepAgg(
            tokens=TokenAgg.from_arrays(ls[a:b], lt[a:b], off, trains[g0:g1]),
            topk=TopKEntropyAgg.from_arrays(topk[a:b], vocab_size=64),
            completions=CompletionAgg.from_arrays(
                lens[g0:g1], trains[g0:g1], toks[a:b], off, [f"t{g % 7}" for g in range(g0, g1)]
            ),
        )

    whole = step(0, lens.size).finalize()
    parts = [step(0, 3), step(3, 4), step(4, 25), step(25, 40)]
    left = parts[0].merge(parts[1]).merge(parts[2]).merge(parts[3])
    right = parts[3].merge(parts[2].merge(parts[1].merge(parts[0])))
    tree = parts[2].merge(parts[0]).merge(parts[3].merge(parts[1]))
    for merged in (left, right, tree):
        got = merged.finalize()
        assert got == whole
        assert [repr(v) for v in got.values()] == [repr(v) for v in whole.values()]
