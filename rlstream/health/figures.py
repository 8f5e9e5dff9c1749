"""From one finalized step row to the flat figures the rules read.

Contract
--------
``extract(row)`` returns ``{name: float}`` holding only the figures the row supports.
Recomputed values win; where a recomputed column is null (transcripts written with
``trace = "samples"`` carry no tokens, so no KL, entropy, repetition or hashes) the
reported metric of the same meaning stands in. Rates are shares of the step's
attempts (or groups) when the count is known.

Metric-only runs: a trainer's own ``rollout/`` metrics stand in for completion length
(a key containing ``completion_len``, ``response_len``, ``length`` or
``completion_tokens``) and repetition (``repetit``); one containing ``ngram``,
``n_gram``, ``diversity`` or ``distinct`` is the ``diversity`` figure (higher = more
diverse). A step that counts its episodes' endings (``termination_reason/<label>``,
counted where they occur) and names no ``max_turns`` ending had none: its
``max_turns_rate`` is 0, not missing.

``metric_pairs(row)`` lists (name, reported, recomputed, kind) for every metric both
sides carry; ``metric_disagreement`` compares them.
"""

from __future__ import annotations

import math
from typing import Any

ROLLOUT_FAILED = "discard/rollouts/rollout_failed/"
GRADING_FAILED = "discard/rollouts/grading_failed/"
MAX_TURNS_KEYS = ("termination_reason/max_turns",)
TERMINATION = "termination_reason/"

RECENT_FIGURES = {
    "mismatch_kl_recent": "kl",
    "mismatch_ess_recent": "ess",
    "entropy_recent": "entropy",
    "truncated_recent": "truncated",
}
"""run_health columns holding, per run, the median over the rules' recent window
(`[history] recent_steps`) of the figure that kl/ESS/entropy/truncation rules judge
(`rlstream.health.figures`); `recent_steps` holds that window's length."""


def num(x: Any) -> float | None:
    """``x`` as a finite float, else None (bools and strings are not numbers here)."""
    if isinstance(x, bool) or not isinstance(x, int | float):
        return None
    x = float(x)
    return x if math.isfinite(x) else None


def _first(*xs: Any) -> float | None:
    for x in xs:
        v = num(x)
        if v is not None:
            return v
    return None


def as_dict(x: Any) -> dict[str, Any]:
    """A map column as a dict (Arrow maps read back as lists of (key, value) pairs)."""
    if isinstance(x, dict):
        return x
    if isinstance(x, list | tuple):
        try:
            return dict(x)
        except (TypeError, ValueError):
            return {}
    return {}


def _sum_prefix(d: dict[str, Any], prefix: str) -> float | None:
    vals = [num(v) for k, v in d.items() if isinstance(k, str) and k.startswith(prefix)]
    vals = [v for v in vals if v is not None]
    return sum(vals) if vals else None


def _share(count: float | None, total: float | None) -> float | None:
    if count is None or total is None or total <= 0:
        return None
    return count / total


def _mean_se(
    p: float | None, group_std: float | None, groups: float | None, attempts: float | None
) -> float | None:
    """Sampling error of the step's mean reward, from the step's own spread.

    Attempts of one group share a task, so the step mean varies with the batch's task
    mix as well as with each attempt's luck: between-group variance (the reward's total
    variance, at most p(1-p) for rewards in [0, 1], minus the within-group variance,
    times G/(G-1)) over the groups, plus within-group variance over the attempts.
    """
    if p is None or group_std is None or not groups or not attempts or groups <= 0:
        return None
    within = group_std * group_std
    # Between-group variance; the step's own p makes it biased low by (G - 1) / G.
    between = max(p * (1.0 - p) - within, 0.0) * groups / max(groups - 1.0, 1.0)
    return math.sqrt(between / groups + within / attempts)


def _ends_counted(meta: dict[str, Any], other: dict[str, Any]) -> bool:
    """Whether the step counts its episodes' endings (``termination_reason/<label>``)."""
    return any(isinstance(k, str) and k.startswith(TERMINATION) for k in meta) or any(
        isinstance(k, str) and k.startswith("rollout/" + TERMINATION) for k in other
    )


LENGTH_WORDS = ("completion_len", "response_len", "length", "completion_tokens")
DIVERSITY_WORDS = ("ngram", "n_gram", "diversity", "distinct")


def _rollout_metric(other: dict[str, Any], words: tuple[str, ...]) -> float | None:
    """A trainer's own ``rollout/<key>`` metric (no deeper namespace, so
    ``rollout/termination_reason/length`` is not a length) whose key contains one of
    ``words``; the first in key order."""
    for k in sorted(k for k in other if isinstance(k, str) and k.startswith("rollout/")):
        tail = k.removeprefix("rollout/")
        if "/" not in tail and any(w in tail for w in words):
            x = num(other[k])
            if x is not None:
                return x
    return None


def extract(row: dict[str, Any]) -> dict[str, float]:
    """The row's figures; see the module docstring."""
    g = row.get
    other = as_dict(g("reported_other"))
    meta = as_dict(g("rollout_metadata"))
    discards = as_dict(g("discards"))
    f: dict[str, float | None] = {}

    f["reward"] = _first(g("reward_mean"), g("reported_reward_mean"))
    f["reward_all"] = _first(
        g("reward_mean_with_unusable"), g("reported_reward_mean_with_unusable"), f["reward"]
    )
    # Spread over every group with rewards, rejected ones included (a group that
    # collapsed to one outcome counts as 0); a trainer's own figure is over trained
    # groups only (the guide's definition), the best a metric-only run offers.
    f["group_std"] = _first(g("reward_group_std_mean_all"), g("reported_reward_group_std_mean"))
    attempts = _first(g("attempts"))
    f["attempts"] = attempts
    f["trained_attempts"] = _first(g("trained_attempts"))

    nv = _first(g("groups_no_variance"), g("reported_groups_no_variance"))
    small = _first(g("groups_group_too_small"), g("reported_groups_group_too_small"))
    trained = _first(g("groups_trained"))
    groups = _first(g("groups"))
    if groups is None and trained is not None and nv is not None:
        groups = trained + nv + (small or 0.0)
    f["groups"] = groups
    f["groups_trained"] = trained
    f["no_variance"] = nv
    # Unusable groups: every group that did not train (no_variance, group_too_small,
    # stale) when the totals are known, else the two reported discard counts.
    if groups is not None and trained is not None:
        f["unusable"] = max(groups - trained, 0.0)
    else:
        f["unusable"] = None if nv is None else nv + (small or 0.0)
    f["no_variance_frac"] = _first(_share(nv, groups), g("reported_no_variance_frac"))
    f["reward_se"] = _mean_se(f["reward_all"], f["group_std"], groups, attempts)

    rf = _first(g("discard_rollout_failed"), _sum_prefix(other, ROLLOUT_FAILED))
    gf = _first(g("discard_grading_failed"), _sum_prefix(other, GRADING_FAILED))
    f["rollout_failed"] = rf
    f["grading_failed"] = gf
    f["rollout_failed_rate"] = _share(rf, attempts)
    f["grading_failed_rate"] = _share(gf, attempts)

    stale = _first(g("discard_stale"), discards.get("stale"))
    f["stale"] = stale
    f["stale_rate"] = _share(stale, attempts)
    f["lag_mean"] = _first(g("lag_mean"), g("reported_lag_mean"))
    f["lag_p90"] = _first(g("lag_p90"), g("reported_lag_p90"))

    max_turns = _first(
        *(meta.get(k) for k in MAX_TURNS_KEYS), *(other.get("rollout/" + k) for k in MAX_TURNS_KEYS)
    )
    if max_turns is None and _ends_counted(meta, other):
        # Labels are counted where they occur: a step that counts why its episodes
        # ended and names no max_turns ending had none.
        max_turns = 0.0
    f["max_turns_rate"] = _share(max_turns, attempts)
    f["turns"] = _first(meta.get("turns"), other.get("rollout/turns"))
    f["truncated"] = _first(g("truncated_frac"), g("reported_truncated_frac"))

    f["flagged"] = _first(g("flagged_frac"))
    f["flagged_high"] = _first(g("flagged_high_frac"))
    f["flagged_n"] = _first(g("flagged_high_n"))
    f["kl"] = _first(g("mismatch_kl"), g("reported_mismatch_kl"))
    f["ess"] = _first(g("mismatch_ess"), g("reported_mismatch_ess"))
    f["entropy"] = _first(g("entropy_estimate"), g("reported_entropy_estimate"))
    f["len_mean"] = _first(
        g("completion_len_mean"),
        g("reported_completion_len_mean"),
        _rollout_metric(other, LENGTH_WORDS),
    )
    f["len_p95"] = _first(g("completion_len_p95"))
    f["repetition"] = _first(g("repetition"), _rollout_metric(other, ("repetit",)))
    f["diversity"] = _rollout_metric(other, DIVERSITY_WORDS)
    f["distinct"] = _first(g("distinct_completions"))
    f["top_share"] = _first(g("top_completion_task_share"))
    # Reported minus recomputed, and the larger magnitude, per metric pair: the early
    # baseline of these tells metric_disagreement whether a difference was there from
    # the start (a different definition) or appeared later (a drift or a bug).
    for name, rep, rec, _ in metric_pairs(row):
        f[f"dis/{name}"] = rep - rec
        f[f"mag/{name}"] = max(abs(rep), abs(rec))
    return {k: v for k, v in f.items() if v is not None}


# (reported column, recomputed column, kind); kind picks the tolerance.
PAIRS: tuple[tuple[str, str, str], ...] = (
    ("reported_reward_mean", "reward_mean", "reward"),
    ("reported_reward_std", "reward_std", "reward"),
    ("reported_reward_group_std_mean", "reward_group_std_mean", "reward"),
    ("reported_reward_mean_with_unusable", "reward_mean_with_unusable", "reward"),
    ("reported_groups_no_variance", "groups_no_variance", "count"),
    ("reported_groups_group_too_small", "groups_group_too_small", "count"),
    ("reported_mismatch_kl", "mismatch_kl", "rel"),
    ("reported_mismatch_ess", "mismatch_ess", "rel"),
    ("reported_lag_mean", "lag_mean", "rel"),
    ("reported_lag_p90", "lag_p90", "rel"),
    ("reported_entropy_estimate", "entropy_estimate", "rel"),
)


def metric_pairs(row: dict[str, Any]) -> list[tuple[str, float, float, str]]:
    """(recomputed name, reported, recomputed, kind) for metrics both sides carry."""
    out = []
    for rep, rec, kind in PAIRS:
        a, b = num(row.get(rep)), num(row.get(rec))
        if a is not None and b is not None:
            out.append((rec, a, b, kind))
    return out
