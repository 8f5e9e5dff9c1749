"""Rewards, groups, discards, freshness and rollout metadata: a mergeable aggregate.

Contract
--------
``RolloutAgg.from_records(records)`` reduces validated rollouts.jsonl records of one
step (keys ``attempt_id``, ``group_id``, ``task_id``, ``step``, ``policy_version``,
``reward``, ``trained``, ``discard_reason``, ``metadata``). ``merge`` returns a new
object; groups are merged by ``group_id`` because a group may be split across shards.

- rewards: over trained attempts (``reward_mean``, ``reward_std`` with ddof 0); and
  ``reward_mean_with_unusable``: the trained attempts plus the attempts of groups the
  run rejected (groups with no trained attempt), non-null rewards only, as the Loops
  guide defines ``reward/mean_with_unusable``;
- ``reward_group_std_mean``: mean over **trained** groups (at least one trained attempt
  with a reward) of the ddof-0 std of that group's trained rewards, the guide's
  ``reward/group_std_mean``; ``reward_group_std_mean_all``: the same over every group
  with at least one non-null reward, rejected groups included (the spread rules such as
  no_learning_signal watch). Variances come from exact sums and sums of squares;
- groups: total, with a trained attempt, carrying ``no_variance`` / ``group_too_small``;
- discards: counts by full reason (``"rollout_failed/timeout"``) and by family;
- lag: exact histogram of ``step - policy_version`` over trained, versioned attempts;
- metadata, flattened with ``"/"``: numbers (not bools, finite only) are averaged,
  booleans become rates, strings are counted as ``"key/label"``. Other values (None,
  lists) are ignored. If one key carries several kinds, the number mean keeps ``"key"``
  and a boolean rate moves to ``"key/true_rate"``; a label count never overwrites a
  number or rate of the same name.

Means are None when nothing was counted; counts are 0.

Exactness: a record is the atomic unit. Every sum is exact: rewards and metadata
numbers as ``rlstream.metrics.exact`` integers (units of 2**-1074), squared rewards as
the exact squares of those integers (units of 2**-2148). Variances are then exact
rationals (never below 0, so nothing needs clamping), rounded once; the group-std mean
sums the per-group stds exactly. So ``merge`` is exactly associative and commutative
and ``finalize`` is the same, bit for bit, whatever the split of the records into
shards and the merge order or tree.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Self

import numpy as np

from rlstream.metrics.exact import FRAC_BITS, Exact, add, fixed, fixed_square, ratio
from rlstream.metrics.quantiles import CountHistogram


def _std(n: int, s: Exact, ss: Exact) -> float:
    """ddof-0 std from the exact sum ``s`` and exact sum of squares ``ss``."""
    if isinstance(s, float) or isinstance(ss, float):
        return math.nan  # a non-finite reward (validated records carry none)
    # var = ss / n - (s / n)^2 = (n ss - s^2) / n^2, in units of 2**-2148: exact, >= 0.
    return math.sqrt((n * ss - s * s) / ((n * n) << (2 * FRAC_BITS)))


def _flatten(meta: dict[str, Any], prefix: str = "") -> list[tuple[str, Any]]:
    out: list[tuple[str, Any]] = []
    for key, value in meta.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            out.extend(_flatten(value, f"{name}/"))
        else:
            out.append((name, value))
    return out


def _add(a: dict, b: dict) -> dict:
    out = dict(a)
    for k, v in b.items():
        out[k] = add(out.get(k, 0), v)
    return out


@dataclass(slots=True)
class GroupStats:
    """Per-group exact sums over rewarded attempts (``n_rewarded``, non-null reward) and
    over the trained ones among them (``tr_*``)."""

    n: int = 0
    n_rewarded: int = 0
    sum_r: Exact = 0
    sumsq_r: Exact = 0  # Σ fixed(r)^2: units of 2**-2148
    n_trained: int = 0
    tr_rewarded: int = 0
    tr_sum_r: Exact = 0
    tr_sumsq_r: Exact = 0
    discards: Counter[str] = field(default_factory=Counter)

    def merge(self, other: Self) -> Self:
        return type(self)(
            n=self.n + other.n,
            n_rewarded=self.n_rewarded + other.n_rewarded,
            sum_r=add(self.sum_r, other.sum_r),
            sumsq_r=add(self.sumsq_r, other.sumsq_r),
            n_trained=self.n_trained + other.n_trained,
            tr_rewarded=self.tr_rewarded + other.tr_rewarded,
            tr_sum_r=add(self.tr_sum_r, other.tr_sum_r),
            tr_sumsq_r=add(self.tr_sumsq_r, other.tr_sumsq_r),
            discards=self.discards + other.discards,
        )


@dataclass(slots=True)
class RolloutAgg:
    """Mergeable reward, group, discard, lag and metadata state of one step."""

    groups: dict[str, GroupStats] = field(default_factory=dict)
    n_attempts: int = 0
    n_trained: int = 0
    tr_n: int = 0
    tr_sum: Exact = 0
    tr_sumsq: Exact = 0
    discards: Counter[str] = field(default_factory=Counter)
    lag: CountHistogram = field(default_factory=CountHistogram)
    meta_sum: dict[str, Exact] = field(default_factory=dict)
    meta_num_n: dict[str, int] = field(default_factory=dict)
    meta_true: dict[str, int] = field(default_factory=dict)
    meta_bool_n: dict[str, int] = field(default_factory=dict)
    meta_labels: Counter[str] = field(default_factory=Counter)  # "key/label" -> count

    @classmethod
    def empty(cls) -> Self:
        return cls()

    @classmethod
    def from_records(cls, records: list[dict[str, Any]]) -> Self:
        agg = cls()
        lags: list[int] = []
        for r in records:
            g = agg.groups.get(r["group_id"])
            if g is None:
                g = agg.groups[r["group_id"]] = GroupStats()
            trained = bool(r["trained"])
            reward = r.get("reward")
            reason = r.get("discard_reason")
            g.n += 1
            agg.n_attempts += 1
            if reward is not None:
                reward, square = fixed_square(reward)
                g.n_rewarded += 1
                g.sum_r = add(g.sum_r, reward)
                g.sumsq_r = add(g.sumsq_r, square)
            if trained:
                g.n_trained += 1
                agg.n_trained += 1
                if reward is not None:
                    agg.tr_n += 1
                    agg.tr_sum = add(agg.tr_sum, reward)
                    agg.tr_sumsq = add(agg.tr_sumsq, square)
                    g.tr_rewarded += 1
                    g.tr_sum_r = add(g.tr_sum_r, reward)
                    g.tr_sumsq_r = add(g.tr_sumsq_r, square)
                if r.get("policy_version") is not None:
                    lags.append(int(r["step"]) - int(r["policy_version"]))
            if reason is not None:
                g.discards[reason] += 1
                agg.discards[reason] += 1
            agg._add_metadata(r.get("metadata") or {})
        agg.lag = CountHistogram.from_values(np.asarray(lags, dtype=np.int64))
        return agg

    def _add_metadata(self, meta: dict[str, Any]) -> None:
        for key, value in _flatten(meta):
            if isinstance(value, bool):
                self.meta_bool_n[key] = self.meta_bool_n.get(key, 0) + 1
                self.meta_true[key] = self.meta_true.get(key, 0) + int(value)
            elif isinstance(value, int | float):
                if not math.isfinite(value):
                    continue
                self.meta_num_n[key] = self.meta_num_n.get(key, 0) + 1
                self.meta_sum[key] = add(self.meta_sum.get(key, 0), fixed(value))
            elif isinstance(value, str):
                self.meta_labels[f"{key}/{value}"] += 1

    def merge(self, other: Self) -> Self:
        groups = dict(self.groups)
        for key, g in other.groups.items():
            mine = groups.get(key)
            groups[key] = g.merge(GroupStats()) if mine is None else mine.merge(g)
        return type(self)(
            groups=groups,
            n_attempts=self.n_attempts + other.n_attempts,
            n_trained=self.n_trained + other.n_trained,
            tr_n=self.tr_n + other.tr_n,
            tr_sum=add(self.tr_sum, other.tr_sum),
            tr_sumsq=add(self.tr_sumsq, other.tr_sumsq),
            discards=self.discards + other.discards,
            lag=self.lag.merge(other.lag),
            meta_sum=_add(self.meta_sum, other.meta_sum),
            meta_num_n=_add(self.meta_num_n, other.meta_num_n),
            meta_true=_add(self.meta_true, other.meta_true),
            meta_bool_n=_add(self.meta_bool_n, other.meta_bool_n),
            meta_labels=self.meta_labels + other.meta_labels,
        )

    @staticmethod
    def columns() -> tuple[tuple[str, type], ...]:
        """finalize() keys in order, with the Python type of a non-None value."""
        return (
            ("attempts", int),
            ("trained_attempts", int),
            ("reward_mean", float),
            ("reward_std", float),
            ("reward_mean_with_unusable", float),
            ("reward_group_std_mean", float),
            ("reward_group_std_mean_all", float),
            ("groups", int),
            ("groups_trained", int),
            ("groups_no_variance", int),
            ("groups_group_too_small", int),
            ("discards", dict),
            ("discard_rollout_failed", int),
            ("discard_grading_failed", int),
            ("discard_unversioned", int),
            ("discard_stale", int),
            ("lag_mean", float),
            ("lag_p90", float),
            ("lag_max", int),
            ("rollout_metadata", dict),
        )

    def _metadata(self) -> dict[str, float]:
        out: dict[str, float] = {}
        for k in sorted(self.meta_num_n):
            out[k] = ratio(self.meta_sum[k], self.meta_num_n[k])
        for k in sorted(self.meta_bool_n):
            rate = self.meta_true[k] / self.meta_bool_n[k]
            out[f"{k}/true_rate" if k in out else k] = rate
        for k in sorted(self.meta_labels):
            out.setdefault(k, float(self.meta_labels[k]))
        return out

    def finalize(self) -> dict[str, Any]:
        # Each group's std depends only on its records; summed exactly, in any order.
        n_std = n_std_all = 0
        sum_std: Exact = 0
        sum_std_all: Exact = 0
        # Rejected groups (no trained attempt) join the trained attempts in
        # reward_mean_with_unusable.
        wu_n, wu_sum = self.tr_n, self.tr_sum
        for g in self.groups.values():
            if g.n_rewarded:
                n_std_all += 1
                sum_std_all = add(sum_std_all, fixed(_std(g.n_rewarded, g.sum_r, g.sumsq_r)))
            if g.tr_rewarded:
                n_std += 1
                sum_std = add(sum_std, fixed(_std(g.tr_rewarded, g.tr_sum_r, g.tr_sumsq_r)))
            if not g.n_trained:
                wu_n += g.n_rewarded
                wu_sum = add(wu_sum, g.sum_r)

        def family(prefix: str) -> int:
            return sum(c for r, c in self.discards.items() if r.split("/", 1)[0] == prefix)

        return {
            "attempts": self.n_attempts,
            "trained_attempts": self.n_trained,
            "reward_mean": ratio(self.tr_sum, self.tr_n) if self.tr_n else None,
            "reward_std": _std(self.tr_n, self.tr_sum, self.tr_sumsq) if self.tr_n else None,
            "reward_mean_with_unusable": ratio(wu_sum, wu_n) if wu_n else None,
            "reward_group_std_mean": ratio(sum_std, n_std) if n_std else None,
            "reward_group_std_mean_all": ratio(sum_std_all, n_std_all) if n_std_all else None,
            "groups": len(self.groups),
            "groups_trained": sum(1 for g in self.groups.values() if g.n_trained),
            "groups_no_variance": sum(1 for g in self.groups.values() if g.discards["no_variance"]),
            "groups_group_too_small": sum(
                1 for g in self.groups.values() if g.discards["group_too_small"]
            ),
            "discards": {k: self.discards[k] for k in sorted(self.discards)},
            "discard_rollout_failed": family("rollout_failed"),
            "discard_grading_failed": family("grading_failed"),
            "discard_unversioned": family("unversioned"),
            "discard_stale": family("stale"),
            "lag_mean": self.lag.mean(),
            "lag_p90": self.lag.quantile(0.9),
            "lag_max": self.lag.max(),
            "rollout_metadata": self._metadata(),
        }
