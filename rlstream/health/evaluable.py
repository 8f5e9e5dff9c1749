"""Which rules a run's data can evaluate: a rule whose inputs never appear is "not
evaluable" (reported as such in run_health) rather than silently quiet.

Readers of formats that cannot give a quantity leave its columns null, never 0, so a
rule never fires on a figure that does not exist; this module says which rules are in
that position for a run. `NEEDS` lists, per finding code, alternative sets of figures
(names of `figures.extract`, plus "eval" for held-out metrics, "pairs" for a reported
and recomputed metric side by side, "time" for timestamps, and "unusable_limit" for
the run config's `training.max_consecutive_unusable_groups`); the rule is evaluable
once every figure of one set has appeared. Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from rlstream.health.figures import as_dict, extract, metric_pairs
from rlstream.health.verdict import cfg_get

NEEDS: dict[str, tuple[tuple[str, ...], ...]] = {
    "no_learning_signal": (("reward_all", "group_std"), ("reward_all", "no_variance_frac")),
    "tasks_too_hard": (("reward_all", "no_variance_frac"),),
    "tasks_too_easy": (("reward_all", "no_variance_frac"),),
    "tasks_mastered": (("reward_all", "no_variance_frac"),),
    "unusable_groups_streak": (("unusable", "groups", "unusable_limit"),),
    "rollout_failure_burst": (("rollout_failed_rate",),),
    "grading_failure_burst": (("grading_failed_rate",),),
    "out_of_room": (("reward_all", "max_turns_rate"), ("reward_all", "truncated")),
    "mismatch_kl_rising": (("kl",),),
    "low_ess": (("ess",),),
    "stale_rollouts": (("lag_mean",),),
    "reward_too_fast": (("reward_all",),),
    "degenerate_outputs": (("top_share",), ("distinct",)),
    "entropy_collapse": (("entropy",), ("repetition",), ("distinct",)),
    "entropy_too_high": (("entropy",),),
    "length_explosion": (("len_mean",),),
    "length_collapse": (("len_mean",),),
    "noisy_reward": (("reward_all",),),
    "heldout_gap": (("eval",),),
    "metric_disagreement": (("pairs",),),
    "stalled": (("time",),),
    "transcript_hack_flags": (("flagged",),),
}


def row_figures(row: dict[str, Any]) -> set[str]:
    """The figures one final steps row carries."""
    out = set(extract(row))
    if as_dict(row.get("reported_eval")):
        out.add("eval")
    if metric_pairs(row):
        out.add("pairs")
    if row.get("time") is not None:
        out.add("time")
    return out


def config_figures(config: dict[str, Any]) -> set[str]:
    """The pseudo-figures a run's config gives."""
    limit = cfg_get(config, "training.max_consecutive_unusable_groups")
    return {"unusable_limit"} if limit else set()


def not_evaluable(seen: Iterable[str]) -> list[str]:
    """Finding codes none of whose figure sets has fully appeared, sorted."""
    have = set(seen)
    return sorted(code for code, alts in NEEDS.items() if not any(set(a) <= have for a in alts))
