"""RolloutAgg: hand-computed step figures, split groups, metadata, merges."""

from __future__ import annotations

import pickle
import random
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rlstream.metrics.rollouts import RolloutAgg
from tests.metrics.merging import assert_identical, merge_tree, split_plans


def rec(group: str, reward: float | None, trained: bool, reason: str | None = None, **kw) -> dict:
    r: dict[str, Any] = {
        "attempt_id": kw.pop("attempt_id", f"{group}-{id(kw)}"),
        "group_id": group,
        "task_id": kw.pop("task_id", f"task-{group}"),
        "step": kw.pop("step", 5),
        "policy_version": kw.pop("policy_version", 5),
        "reward": reward,
        "trained": trained,
        "discard_reason": reason,
        "metadata": kw.pop("metadata", {}),
    }
    assert not kw
    return r


def step_records() -> list[dict]:
    return [
        # g1: trained, rewards 1, 0, 1, 0 -> std 0.5; lags 0, 1, 2, (none)
        rec("g1", 1.0, True, policy_version=5),
        rec("g1", 0.0, True, policy_version=4),
        rec("g1", 1.0, True, policy_version=3),
        rec("g1", 0.0, True, policy_version=None),
        # g2: all 1 -> no variance, discarded
        rec("g2", 1.0, False, "no_variance"),
        rec("g2", 1.0, False, "no_variance"),
        # g3: one failure, one lonely survivor
        rec("g3", None, False, "rollout_failed/timeout"),
        rec("g3", 0.5, False, "group_too_small", policy_version=0),
        # g4: grading failure, unversioned and stale attempts
        rec("g4", None, False, "grading_failed/parse"),
        rec("g4", 0.2, False, "unversioned", policy_version=None),
        rec("g4", 0.8, False, "stale", policy_version=1),
        rec("g4", None, False, "rollout_failed/crash"),
    ]


def test_hand_computed_step() -> None:
    out = RolloutAgg.from_records(step_records()).finalize()
    assert out["attempts"] == 12
    assert out["trained_attempts"] == 4
    assert out["reward_mean"] == pytest.approx(0.5)
    assert out["reward_std"] == pytest.approx(0.5)
    assert out["reward_mean_with_unusable"] == pytest.approx((2 + 2 + 0.5 + 1.0) / 9)
    # The guide's reward/group_std_mean is over trained groups: g1 only (std 0.5).
    assert out["reward_group_std_mean"] == pytest.approx(0.5)
    # Over every group with rewards: g1 0.5, g2 0, g3 0 (one reward), g4 std of
    # [0.2, 0.8] = 0.3.
    assert out["reward_group_std_mean_all"] == pytest.approx((0.5 + 0 + 0 + 0.3) / 4)
    assert out["groups"] == 4
    assert out["groups_trained"] == 1
    assert out["groups_no_variance"] == 1
    assert out["groups_group_too_small"] == 1
    assert out["discards"] == {
        "grading_failed/parse": 1,
        "group_too_small": 1,
        "no_variance": 2,
        "rollout_failed/crash": 1,
        "rollout_failed/timeout": 1,
        "stale": 1,
        "unversioned": 1,
    }
    assert out["discard_rollout_failed"] == 2
    assert out["discard_grading_failed"] == 1
    assert out["discard_unversioned"] == 1
    assert out["discard_stale"] == 1
    # Lags of trained, versioned attempts only: [0, 1, 2].
    assert out["lag_mean"] == pytest.approx(1.0)
    assert out["lag_p90"] == float(np.percentile([0, 1, 2], 90))
    assert out["lag_max"] == 2


def test_group_split_across_shards_merges_to_whole() -> None:
    records = step_records()
    whole = RolloutAgg.from_records(records).finalize()
    # g1 and g4 are split between the shards.
    a = RolloutAgg.from_records(records[0:2] + records[8:10])
    b = RolloutAgg.from_records(records[2:8] + records[10:])
    for merged in (a.merge(b), b.merge(a)):
        got = merged.finalize()
        assert got["groups"] == 4
        assert_identical(got, whole)
    # Naively averaging each shard's group stds would differ: the split matters.
    assert a.finalize()["reward_group_std_mean_all"] != pytest.approx(
        whole["reward_group_std_mean_all"]
    )


def test_trained_group_with_a_dropped_attempt() -> None:
    """The guide's words: reward/mean_with_unusable adds the attempts of *rejected
    groups* to the trained ones, and reward/group_std_mean is the spread within each
    *trained* group. An attempt dropped on its own (stale, unversioned) from a group
    that trained is in neither."""
    records = [
        rec("t", 1.0, True),
        rec("t", 0.0, True),
        rec("t", 1.0, True),
        rec("t", 0.0, False, "stale", policy_version=0),
        rec("n", 1.0, False, "no_variance"),
        rec("n", 1.0, False, "no_variance"),
    ]
    out = RolloutAgg.from_records(records).finalize()
    assert out["reward_mean"] == pytest.approx(2 / 3)
    assert out["reward_mean_with_unusable"] == pytest.approx(4 / 5)
    assert out["reward_group_std_mean"] == pytest.approx(float(np.std([1.0, 0.0, 1.0])))
    assert out["reward_group_std_mean_all"] == pytest.approx(np.std([1.0, 0, 1, 0]) / 2)


def test_empty() -> None:
    out = RolloutAgg.empty().finalize()
    assert out["attempts"] == 0 and out["groups"] == 0 and out["discards"] == {}
    for key in ("reward_mean", "reward_std", "reward_mean_with_unusable"):
        assert out[key] is None
    assert out["reward_group_std_mean"] is None and out["lag_mean"] is None
    assert out["reward_group_std_mean_all"] is None
    assert out["rollout_metadata"] == {}
    only_failed = RolloutAgg.from_records([rec("g", None, False, "rollout_failed/x")]).finalize()
    assert only_failed["reward_group_std_mean"] is None
    assert only_failed["reward_mean_with_unusable"] is None


def test_metadata_numbers_booleans_labels_nested() -> None:
    records = [
        rec(
            "g",
            1.0,
            True,
            metadata={
                "turns": 12,
                "solved": True,
                "termination_reason": "max_turns",
                "grader": {"score": 0.5, "label": "ok"},
                "tags": [1],
            },
        ),
        rec(
            "g",
            0.0,
            True,
            metadata={
                "turns": 4,
                "solved": False,
                "termination_reason": "stop",
                "grader": {"score": 1.5, "label": "ok"},
                "missing": None,
            },
        ),
        rec(
            "g",
            0.0,
            True,
            metadata={"termination_reason": "max_turns", "solved": True, "turns": float("nan")},
        ),
    ]
    meta = RolloutAgg.from_records(records).finalize()["rollout_metadata"]
    assert meta == {
        "turns": pytest.approx(8.0),
        "solved": pytest.approx(2 / 3),
        "termination_reason/max_turns": 2.0,
        "termination_reason/stop": 1.0,
        "grader/score": pytest.approx(1.0),
        "grader/label/ok": 2.0,
    }


def test_metadata_kind_collision_keeps_both() -> None:
    records = [rec("g", 1.0, True, metadata={"x": 3}), rec("g", 1.0, True, metadata={"x": True})]
    meta = RolloutAgg.from_records(records).finalize()["rollout_metadata"]
    assert meta == {"x": 3.0, "x/true_rate": 1.0}


def test_equal_rewards_have_exactly_zero_variance() -> None:
    # Seven rewards of 0.7: in floats sumsq / n - mean^2 rounds to -2.2e-16 (sqrt would
    # fail); the exact sums give 0 exactly.
    records = [rec("g", 0.7, True) for _ in range(7)]
    out = RolloutAgg.from_records(records).finalize()
    assert out["reward_group_std_mean"] == 0.0
    assert out["reward_std"] == 0.0


reward_st = st.one_of(
    st.none(), st.sampled_from([0.0, 0.1, 0.25, 0.7, 1.0]), st.floats(-1, 1), st.floats(-1e6, 1e6)
)
reason_st = st.sampled_from(
    [
        None,
        "no_variance",
        "group_too_small",
        "rollout_failed/timeout",
        "grading_failed/x",
        "stale",
        "unversioned",
    ]
)
record_st = st.builds(
    lambda g, r, t, reason, pv, turns, score, ok: rec(
        g,
        r,
        t,
        None if t else reason,
        policy_version=pv,
        metadata={"turns": turns, "score": score, "ok": ok, "why": "a" if ok else "b"},
    ),
    st.sampled_from(["g1", "g2", "g3", "g4"]),
    reward_st,
    st.booleans(),
    reason_st,
    st.one_of(st.none(), st.integers(0, 5)),
    st.integers(0, 20),
    st.floats(-1e3, 1e3),
    st.booleans(),
)


@settings(max_examples=200, deadline=None)
@given(st.lists(record_st, max_size=25), st.data())
def test_any_split_any_merge_tree_is_exactly_the_whole(records, data) -> None:
    shards, shape, rnd = data.draw(split_plans(len(records)))
    aggs = [RolloutAgg.from_records([records[i] for i in s]) for s in shards]
    merged = merge_tree(aggs, RolloutAgg.empty(), shape, rnd)
    assert_identical(merged.finalize(), RolloutAgg.from_records(records).finalize())


def test_one_record_per_shard_in_every_order_is_bit_identical() -> None:
    rng = np.random.default_rng(2)
    records = [
        rec(
            f"g{rng.integers(0, 30)}",
            float(rng.normal(0.5, 0.3)),
            bool(rng.random() < 0.7),
            metadata={"score": float(rng.normal(0, 1e4)), "turns": int(rng.integers(0, 9))},
        )
        for _ in range(400)
    ]
    whole = RolloutAgg.from_records(records).finalize()
    singles = [RolloutAgg.from_records([r]) for r in records]
    for shape in ("left", "right", "balanced", "random"):
        got = merge_tree(singles, RolloutAgg.empty(), shape, random.Random(1))
        assert_identical(got.finalize(), whole)


def test_merge_does_not_mutate_and_pickles() -> None:
    records = step_records()
    a = RolloutAgg.from_records(records[:3])
    b = RolloutAgg.from_records(records[3:])
    before = (a.finalize(), b.finalize())
    m = a.merge(b)
    assert (a.finalize(), b.finalize()) == before
    m2 = pickle.loads(pickle.dumps(m))
    assert m2.finalize() == m.finalize()
