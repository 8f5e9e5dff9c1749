"""What the simulated trainer reports in steps.jsonl, computed from the step's data.

Pure functions of a `StepData`; the definitions are the ones docs/run-format.md gives
so a reader can recompute every number from rollouts.jsonl and the transcripts.
A metric with nothing to average over (e.g. reward/mean when no attempt trained) is
left out of the record, not written as 0. With `reporting_bug` (scenario
metric_disagreement) reward/mean is a mean of group means over every group, and
train/mismatch_kl is mean(lt - ls), a sign-flipped k1, the way real trainers got it
wrong.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import numpy as np

from rlstream.simulate.engine import StepData

CLIP = 20.0


def token_masks(sd: StepData) -> tuple[np.ndarray, np.ndarray]:
    """(sampled tokens, trained sampled tokens) of the step."""
    gen_T = np.repeat(np.arange(sd.completion_len_N.size), sd.completion_len_N)
    trains_T = sd.trained_A[sd.gen_attempt_N][gen_T]
    return sd.sampled_T, sd.sampled_T & trains_T


def step_metrics(sd: StepData) -> dict[str, Any]:
    r = sd.reward_A
    trained = sd.trained_A
    out: dict[str, Any] = {}
    rt = r[trained]
    if rt.size:
        out["reward/mean"] = float(rt.mean())
        out["reward/std"] = float(rt.std())
    valid = ~np.isnan(r)
    groups = [sd.group_A == g for g in range(len(sd.group_ids))]
    per_group = [r[in_g & valid] for in_g in groups]
    per_group = [rg for rg in per_group if rg.size]
    # The guide: the spread within each trained group; the trained attempts plus the
    # attempts of the groups the run rejected.
    per_trained = [r[in_g & trained] for in_g in groups if (in_g & trained).any()]
    if per_trained:
        out["reward/group_std_mean"] = float(np.mean([rg.std() for rg in per_trained]))
    rejected = np.zeros_like(trained)
    for in_g in groups:
        if not (in_g & trained).any():
            rejected |= in_g
    usable = r[(trained | rejected) & valid]
    if usable.size:
        out["reward/mean_with_unusable"] = float(usable.mean())

    groups_nv = {
        int(g) for g, d in zip(sd.group_A, sd.discard_A, strict=True) if d == "no_variance"
    }
    groups_small = {
        int(g) for g, d in zip(sd.group_A, sd.discard_A, strict=True) if d == "group_too_small"
    }
    out["discard/groups/no_variance"] = len(groups_nv)
    out["discard/groups/group_too_small"] = len(groups_small)
    reasons = Counter(
        d for d in sd.discard_A if d is not None and d not in ("no_variance", "group_too_small")
    )
    for reason in sorted(reasons):
        out[f"discard/rollouts/{reason}"] = reasons[reason]

    meta = sd.metadata_A
    out["rollout/turns"] = float(np.mean([m["turns"] for m in meta]))
    out["rollout/tool_calls"] = float(np.mean([m["tool_calls"] for m in meta]))
    labels = Counter(m["termination_reason"] for m in meta)
    for label in sorted(labels):
        out[f"rollout/termination_reason/{label}"] = labels[label]
    passed = [m["passed_tests"] for m in meta if "passed_tests" in m]
    if passed:
        out["rollout/passed_tests"] = float(np.mean(passed))

    sampled, trained_tok = token_masks(sd)
    ls, lt = sd.tokens.ls_T, sd.tokens.lt_T
    if trained_tok.any():
        d = np.clip(lt[trained_tok] - ls[trained_tok], -CLIP, CLIP)
        out["train/mismatch_kl"] = float(np.mean(np.exp(d) - 1.0 - d))
        # ESS in log space: (Σw)² / (n Σw²) with w = exp(d).
        lse1 = np.logaddexp.reduce(d)
        lse2 = np.logaddexp.reduce(2.0 * d)
        out["train/mismatch_ess"] = float(np.exp(2.0 * lse1 - lse2 - np.log(d.size)))
        if sd.reporting_bug:
            out["train/mismatch_kl"] = float(np.mean(lt[trained_tok] - ls[trained_tok]))

    lag = (sd.step - sd.policy_version_A[trained]).astype(np.float64)
    if lag.size:
        out["freshness/lag_mean"] = float(lag.mean())
        out["freshness/lag_p90"] = float(np.percentile(lag, 90))
    if sampled.any():
        out["sampling/entropy_estimate"] = float(-np.mean(ls[sampled]))

    if sd.reporting_bug and per_group:
        # The bug: every group weighted equally, discarded ones included.
        out["reward/mean"] = float(np.mean([rg.mean() for rg in per_group]))
    if sd.eval_heldout is not None:
        out["eval/heldout"] = sd.eval_heldout
    out.update(sd.extra)
    return out
