"""Synthetic step rows for the health tests, built from simple formulas.

``healthy_row(i, rng)`` is a noisy but healthy step: reward creeping up, spread,
failures at a trickle, small KL, stable entropy and length. ``PATHOLOGIES[code]`` maps
(i, onset, row) to the row with that code's pathology blended in from ``onset``.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from typing import Any

from rlstream.health import DEFAULT_RULES, RulesConfig, RunContext, fold_step, new_state

CONFIG = {
    "training": {
        "max_steps": 300,
        "max_steps_off_policy": 2,
        "max_consecutive_unusable_groups": 32,
        "mode": "async",
    },
    "rollout": {"max_turns": 4},
    "sampling": {"max_tokens": 128},
    "output": {"progress_every_seconds": 20},
}
CTX = RunContext("run-test", CONFIG, False)
ATTEMPTS = 16
GROUPS = 4


def _binom(rng: random.Random, n: int, p: float) -> int:
    return sum(rng.random() < p for _ in range(n))


def _clip(x: float, lo: float = 0.0, hi: float = 1.0) -> float:
    return min(max(x, lo), hi)


def healthy_row(i: int, rng: random.Random) -> dict[str, Any]:
    reward = _clip(0.3 + 0.3 * (1 - math.exp(-i / 80)) + rng.gauss(0, 0.08))
    nv = _binom(rng, GROUPS, 0.25)
    group_std = _clip(0.35 + rng.gauss(0, 0.04))
    kl = 5e-4 * math.exp(rng.gauss(0, 0.3))
    ess = _clip(0.995 + rng.gauss(0, 0.002))
    entropy = 0.8 - 0.1 * i / 300 + rng.gauss(0, 0.03)
    length = 24 * math.exp(rng.gauss(0, 0.08))
    lag_p90 = float(rng.choice([0, 1, 1]))
    row: dict[str, Any] = {
        "run_id": "run-test",
        "step": i,
        "time": 1000.0 + 30.0 * i + rng.gauss(0, 3),
        "attempts": ATTEMPTS,
        "trained_attempts": (GROUPS - nv) * 4,
        "reward_mean": reward,
        "reward_mean_with_unusable": reward,
        "reward_std": 0.45,
        "reward_group_std_mean": group_std,
        "reward_group_std_mean_all": group_std,
        "groups": GROUPS,
        "groups_trained": GROUPS - nv,
        "groups_no_variance": nv,
        "groups_group_too_small": 0,
        "discard_rollout_failed": _binom(rng, ATTEMPTS, 0.01),
        "discard_grading_failed": _binom(rng, ATTEMPTS, 0.005),
        "discard_stale": 0,
        "discard_unversioned": 0,
        "truncated_frac": _binom(rng, ATTEMPTS, 0.03) / ATTEMPTS,
        "rollout_metadata": {
            "turns": 2.0 + rng.gauss(0, 0.2),
            "termination_reason/max_turns": _binom(rng, ATTEMPTS, 0.03),
        },
        "mismatch_kl": kl,
        "mismatch_ess": ess,
        "lag_mean": lag_p90 / 2,
        "lag_p90": lag_p90,
        "entropy_estimate": entropy,
        "completions": ATTEMPTS,
        "completion_len_mean": length,
        "completion_len_p95": 2 * length,
        "repetition": _clip(0.03 + rng.gauss(0, 0.01)),
        "distinct_completions": _clip(0.95 + rng.gauss(0, 0.03)),
        "top_completion_task_share": rng.choice([0.25, 0.25, 0.25, 0.5]),
        "reported_eval": (
            {"heldout": _clip(0.2 + 0.3 * (1 - math.exp(-i / 80)) + rng.gauss(0, 0.03))}
            if i % 10 == 0
            else {}
        ),
        "reported_other": {},
    }
    for rep, rec in (
        ("reported_reward_mean", "reward_mean"),
        ("reported_reward_group_std_mean", "reward_group_std_mean"),
        ("reported_groups_no_variance", "groups_no_variance"),
        ("reported_mismatch_kl", "mismatch_kl"),
        ("reported_entropy_estimate", "entropy_estimate"),
    ):
        row[rep] = row[rec]
    return row


def _ramp(i: int, onset: int, length: int = 10) -> float:
    return _clip((i - onset + 1) / length)


def _set(row: dict[str, Any], **kv: Any) -> dict[str, Any]:
    row.update(kv)
    for k in (
        "reward_mean",
        "reward_group_std_mean",
        "groups_no_variance",
        "mismatch_kl",
        "entropy_estimate",
    ):
        row["reported_" + k] = row[k]
    return row


def _no_signal(i, onset, row):
    if i < onset:
        return row
    return _set(
        row,
        reward_group_std_mean_all=0.004,
        reward_mean_with_unusable=0.12,
        reward_mean=0.12,
        groups_no_variance=GROUPS - 1,
        groups_trained=1,
    )


def _too_hard(i, onset, row):
    return _set(
        row,
        reward_group_std_mean_all=0.01,
        reward_mean_with_unusable=0.02,
        reward_mean=0.3,
        groups_no_variance=GROUPS if i % 3 else GROUPS - 1,
        groups_trained=0 if i % 3 else 1,
    )


def _too_easy(i, onset, row):
    return _set(
        row,
        reward_group_std_mean_all=0.01,
        reward_mean_with_unusable=0.98,
        reward_mean=0.8,
        groups_no_variance=GROUPS if i % 3 else GROUPS - 1,
        groups_trained=0 if i % 3 else 1,
    )


def _mastered(i, onset, row):
    if i < onset:
        return row
    r = _ramp(i, onset, 20)
    nv = round(1 + 3 * r)
    return _set(
        row,
        reward_mean_with_unusable=0.6 + 0.37 * r,
        reward_mean=0.6 + 0.3 * r,
        groups_no_variance=nv,
        groups_trained=GROUPS - nv,
    )


def _streak(i, onset, row):
    if i < onset:
        return row
    return _set(row, groups_no_variance=GROUPS, groups_trained=0)


def _rollout_burst(i, onset, row):
    return row if i < onset else _set(row, discard_rollout_failed=8)


def _grading_burst(i, onset, row):
    return row if i < onset else _set(row, discard_grading_failed=7)


def _out_of_room(i, onset, row):
    if i < onset:
        return row
    r = _ramp(i, onset)
    row["rollout_metadata"]["termination_reason/max_turns"] = round(ATTEMPTS * (0.03 + 0.5 * r))
    row["rollout_metadata"]["turns"] = 2 + 1.8 * r
    return _set(row, reward_mean_with_unusable=0.45 + (row["reward_mean"] - 0.45) * 0.2)


def _kl(i, onset, row):
    return (
        row if i < onset else _set(row, mismatch_kl=row["mismatch_kl"] + 0.02 * _ramp(i, onset, 30))
    )


def _ess(i, onset, row):
    return row if i < onset else _set(row, mismatch_ess=0.995 - 0.5 * _ramp(i, onset))


def _stale(i, onset, row):
    if i < onset:
        return row
    return _set(row, lag_p90=2.0 + (i % 2), lag_mean=1.6, discard_stale=round(5 * _ramp(i, onset)))


def _too_fast(i, onset, row):
    if i < onset:
        return row
    bump = 0.5 * _ramp(i, onset, 5)
    return _set(
        row,
        reward_mean=_clip(row["reward_mean"] + bump),
        reward_mean_with_unusable=_clip(row["reward_mean_with_unusable"] + bump),
    )


def _degenerate(i, onset, row):
    if i < onset:
        return row
    r = _ramp(i, onset)
    return _set(row, top_completion_task_share=0.25 + 0.75 * r, distinct_completions=0.95 - 0.6 * r)


def _collapse(i, onset, row):
    if i < onset:
        return row
    r = _ramp(i, onset, 20)
    return _set(
        row,
        entropy_estimate=0.8 - 0.7 * r,
        repetition=0.03 + 0.5 * r,
        distinct_completions=0.95 - 0.6 * r,
    )


def _too_high(i, onset, row):
    return row if i < onset else _set(row, entropy_estimate=0.8 + 2.5 * _ramp(i, onset, 20))


def _explosion(i, onset, row):
    if i < onset:
        return row
    r = _ramp(i, onset, 30)
    return _set(row, completion_len_mean=24 * math.exp(1.6 * r), truncated_frac=0.03 + 0.5 * r)


def _length_collapse(i, onset, row):
    return (
        row
        if i < onset
        else _set(row, completion_len_mean=24 * math.exp(-1.6 * _ramp(i, onset, 20)))
    )


def _noisy(i, onset, row):
    if i < onset:
        return row
    shift = random.Random(i * 7919).gauss(0, 0.45)
    r = _clip(row["reward_mean_with_unusable"] + shift)
    return _set(row, reward_mean=r, reward_mean_with_unusable=r)


def _heldout(i, onset, row):
    if i < onset:
        return row
    bump = 0.4 * _ramp(i, onset, 40)
    r = _clip(row["reward_mean"] + bump)
    if row["reported_eval"]:
        row["reported_eval"] = {"heldout": 0.35}
    return _set(row, reward_mean=r, reward_mean_with_unusable=r)


def _disagree(i, onset, row):
    if i < onset:
        return row
    row = _set(row)
    row["reported_reward_mean"] = row["reward_mean"] + 0.2
    return row


Pathology = Callable[[int, int, dict[str, Any]], dict[str, Any]]
PATHOLOGIES: dict[str, Pathology] = {
    "no_learning_signal": _no_signal,
    "tasks_too_hard": _too_hard,
    "tasks_too_easy": _too_easy,
    "tasks_mastered": _mastered,
    "unusable_groups_streak": _streak,
    "rollout_failure_burst": _rollout_burst,
    "grading_failure_burst": _grading_burst,
    "out_of_room": _out_of_room,
    "mismatch_kl_rising": _kl,
    "low_ess": _ess,
    "stale_rollouts": _stale,
    "reward_too_fast": _too_fast,
    "degenerate_outputs": _degenerate,
    "entropy_collapse": _collapse,
    "entropy_too_high": _too_high,
    "length_explosion": _explosion,
    "length_collapse": _length_collapse,
    "noisy_reward": _noisy,
    "heldout_gap": _heldout,
    "metric_disagreement": _disagree,
}


def rows(n: int, code: str | None = None, onset: int = 60, seed: int = 0) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    out = []
    for i in range(n):
        row = healthy_row(i, rng)
        if code is not None:
            row = PATHOLOGIES[code](i, onset, row)
        out.append(row)
    return out


def fold_all(rows_, ctx: RunContext = CTX, cfg: RulesConfig = DEFAULT_RULES):
    state = new_state(cfg)
    transitions = []
    for row in rows_:
        state, tr = fold_step(state, row, ctx, cfg)
        transitions += tr
    return state, transitions
