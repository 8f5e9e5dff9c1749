"""One function per finding code: is its condition holding at the latest step?

Contract
--------
``RULES[code](view, rule_cfg, ctx_config, active, row) -> Verdict | None``.

- ``view`` is the run's history up to and including the latest row (``state.View``);
- ``ctx_config`` is the run's own config (run.json ``config``), read with ``cfg_get``;
- ``active`` is True while the finding is pending or firing: thresholds then relax by
  ``history.hysteresis`` (``ge``/``le`` below) so a metric hovering at a threshold does
  not flap;
- ``row`` is the raw latest row (metric_disagreement compares its columns).

A rule returns None when the row lacks what it needs (the finding's state is then
left as it is), else a ``Verdict`` whose message cites the numbers behind it and says
what to look at. ``stalled`` is time-based and lives in ``engine.check_time``.
degenerate_outputs never reads reward: it must fire on transcript-level evidence while
reward curves look healthy. entropy_collapse reads reward and held-out trends only to
weigh a moderate fall of entropy (sharpening while learning is not collapse); a fall
toward zero, or repetition with fewer distinct completions, fires whatever the reward.

The rules live in ``rules_signal`` (learning signal and reward curve), ``rules_ops``
(failures, KL, ESS, staleness, room) and ``rules_policy`` (what the policy writes);
``metric_disagreement`` is here.
"""

from __future__ import annotations

from collections.abc import Callable

from rlstream.health import config as C
from rlstream.health.figures import metric_pairs
from rlstream.health.rules_ops import (
    grading_failure_burst,
    low_ess,
    mismatch_kl_rising,
    out_of_room,
    rollout_failure_burst,
    stale_rollouts,
)
from rlstream.health.rules_policy import (
    degenerate_outputs,
    entropy_collapse,
    entropy_too_high,
    length_collapse,
    length_explosion,
    reward_too_fast,
)
from rlstream.health.rules_signal import (
    heldout_gap,
    no_learning_signal,
    noisy_reward,
    steps_to_streak,
    tasks_mastered,
    tasks_too_easy,
    tasks_too_hard,
    unusable_groups_streak,
)
from rlstream.health.rules_text import transcript_hack_flags
from rlstream.health.state import View
from rlstream.health.verdict import Ctx, Verdict

__all__ = ["RULES", "Ctx", "Verdict", "steps_to_streak"]


def _md_tol(c: C.MetricDisagreement, kind: str, rep: float, rec: float) -> float:
    if kind == "reward":
        return c.reward_atol
    if kind == "count":
        return c.count_atol
    return c.atol + c.rtol * max(abs(rep), abs(rec))


def _off_from_start(v: View, c: C.MetricDisagreement, name: str, kind: str) -> bool | None:
    """Did ``name`` disagree in most of the early-baseline rows that carried it?
    None while that baseline is still filling."""
    diffs, mags = v.base_values(f"dis/{name}"), v.base_values(f"mag/{name}")
    if len(diffs) < v.baseline_min:
        return None
    off = sum(abs(d) > _md_tol(c, kind, m, m) for d, m in zip(diffs, mags, strict=True))
    return off >= c.definition_share * len(diffs)


def metric_disagreement(
    v: View, c: C.MetricDisagreement, ctx: Ctx, active: bool, row: dict
) -> Verdict | None:
    pairs = metric_pairs(row)
    if not pairs:
        return None
    drift, definition, undecided = [], [], False
    for name, rep, rec, kind in pairs:
        tol = _md_tol(c, kind, rep, rec)
        if active:
            tol /= ctx.hysteresis
        if abs(rep - rec) <= tol:
            continue
        start = _off_from_start(v, c, name, kind)
        if start is None:  # too early to tell a definition from a drift
            undecided = True
            continue
        (definition if start else drift).append((abs(rep - rec) / max(tol, 1e-12), name, rep, rec))
    for found in (drift, definition):
        found.sort(reverse=True)
    shown = "; ".join(
        f"{n}: reported {a:.4g} vs recomputed {b:.4g}" for _, n, a, b in (drift or definition)[:3]
    )
    if drift:
        return Verdict(
            True,
            f"at step {v.step} {shown}, agreeing in the run's first steps: the trainer's "
            "metric and the transcripts disagree; check the trainer's weighting and sign "
            "conventions",
        )
    if definition:
        return Verdict(
            True,
            f"at step {v.step} {shown}, and so from the run's first steps: the trainer "
            "defines this metric differently from rlstream (docs/run-format.md); the "
            "recomputed figure is the one the rules read",
            severity="info",
        )
    return None if undecided else Verdict(False)


RULES: dict[str, Callable[..., Verdict | None]] = {
    "no_learning_signal": no_learning_signal,
    "tasks_too_hard": tasks_too_hard,
    "tasks_too_easy": tasks_too_easy,
    "tasks_mastered": tasks_mastered,
    "unusable_groups_streak": unusable_groups_streak,
    "rollout_failure_burst": rollout_failure_burst,
    "grading_failure_burst": grading_failure_burst,
    "out_of_room": out_of_room,
    "mismatch_kl_rising": mismatch_kl_rising,
    "low_ess": low_ess,
    "stale_rollouts": stale_rollouts,
    "reward_too_fast": reward_too_fast,
    "degenerate_outputs": degenerate_outputs,
    "entropy_collapse": entropy_collapse,
    "entropy_too_high": entropy_too_high,
    "length_explosion": length_explosion,
    "length_collapse": length_collapse,
    "noisy_reward": noisy_reward,
    "heldout_gap": heldout_gap,
    "metric_disagreement": metric_disagreement,
    "transcript_hack_flags": transcript_hack_flags,
}


EXPLAINED_BY: dict[str, tuple[str, ...]] = {
    "tasks_mastered": (
        "degenerate_outputs",
        "rollout_failure_burst",
        "grading_failure_burst",
    ),
}
"""Findings whose evidence another finding explains otherwise: while one of those holds
or is pending or firing, the finding does not hold. Groups without reward variance at a
high reward mean mastered tasks only when the reward is earned: one answer for every
task, or failed rollouts (no variance among the survivors) make the same figures, and
"stop or move to harder tasks" would then be the wrong advice."""
"""Step-evaluated rules; ``stalled`` is evaluated by ``engine.check_time``."""
