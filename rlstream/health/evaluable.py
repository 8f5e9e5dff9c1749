"""Which rules a run's data can evaluate: a rule whose inputs never appear is "not
evaluable" (reported as such in run_health) rather than silently quiet.

Readers of formats that cannot give a quantity leave its columns null, never 0, so a
rule never fires on a figure that does not exist; this module says which rules are in
that position for a run. `NEEDS` lists, per finding code, alternative sets of figures
(names of `figures.extract`, plus "eval" for held-out metrics, "pairs" for a reported
and recomputed metric side by side, "time" for timestamps, and "unusable_limit" for
the run config's `training.max_consecutive_unusable_groups`); the rule is evaluable
once every figure of one set has appeared.

`judgement` says whether a run can be judged at all: `insufficient` when fewer than
`MIN_EVALUABLE_SHARE` of the enabled rules (`stalled` aside: it judges liveness, not
training) are evaluable on its files, or when it has fewer final steps than the
rules' baseline and recent window need (`baseline_need`); else `judged`, naming the
rules still short of the steps they need (`steps_needed`, e.g. `reward_too_fast`'s
60 rows and 3 evaluations: 62). Pure: no I/O.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

from rlstream.health.config import DEFAULT_RULES, RulesConfig
from rlstream.health.figures import as_dict, extract, metric_pairs
from rlstream.health.verdict import cfg_get

MIN_EVALUABLE_SHARE = 0.6
"""A run is judged only when at least this share of the enabled rules (`stalled`
aside) can be evaluated on its files: 13 of the default 21."""
JUDGED, INSUFFICIENT = "judged", "insufficient"

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
    # the share among high-reward attempts: text whose rewards are unknown (a Loops
    # transcript without `reward`) cannot tell them, and is not read as "no hacks"
    "transcript_hack_flags": (("flagged_high",),),
}


def row_figures(row: dict[str, Any], figures: dict[str, float] | None = None) -> set[str]:
    """The figures one final steps row carries (`figures`: its `extract`, if made)."""
    out = set(extract(row) if figures is None else figures)
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


def baseline_need(rules: RulesConfig = DEFAULT_RULES) -> int:
    """Final steps before most rules can judge: warm-up, baseline and a recent window."""
    h = rules.history
    return h.baseline_skip + h.baseline_steps + h.recent_steps


def steps_needed(code: str, rules: RulesConfig = DEFAULT_RULES) -> int:
    """Final steps rule `code` needs before it can fire: for a rule with `min_rows`,
    those rows and then `for_steps` evaluations (the first at row `min_rows`), else
    `baseline_need`."""
    rule = getattr(rules, code)
    rows = getattr(rule, "min_rows", 0)
    own = rows + max(rule.for_steps, 1) - 1 if rows else 0
    return max(baseline_need(rules), own)


def judged_codes(rules: RulesConfig = DEFAULT_RULES) -> list[str]:
    """The enabled rules a run's judgement counts: every code of NEEDS but `stalled`."""
    return [c for c in NEEDS if c != "stalled" and getattr(rules, c).enabled]


def judgement(
    not_evaluable_codes: Iterable[str], steps: int, rules: RulesConfig = DEFAULT_RULES
) -> tuple[str, str | None]:
    """(`judged` or `insufficient`, what is missing or None): see the module docstring."""
    codes = judged_codes(rules)
    ne = set(not_evaluable_codes)
    evaluable = [c for c in codes if c not in ne]
    need = math.ceil(MIN_EVALUABLE_SHARE * len(codes))
    gaps = []
    if len(evaluable) < need:
        gaps.append(
            f"{len(evaluable)} of {len(codes)} rules evaluable on its files, at least "
            f"{need} needed (not_evaluable names the others)"
        )
    base = baseline_need(rules)
    if steps < base:
        gaps.append(f"{steps} final steps, the rules need {base}")
    if gaps:
        return INSUFFICIENT, "; ".join(gaps)
    short: dict[int, list[str]] = {}
    for c in evaluable:
        if (n := steps_needed(c, rules)) > steps:
            short.setdefault(n, []).append(c)
    if not short:
        return JUDGED, None
    parts = [f"{', '.join(cs)} (needs {n})" for n, cs in sorted(short.items())]
    return JUDGED, f"not yet judged at {steps} final steps: {'; '.join(parts)}"
