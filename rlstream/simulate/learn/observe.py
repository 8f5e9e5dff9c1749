"""Ground truth from what a learning run did: labels for ROOT/labels.json.

Contract
--------
``label_run(preset, observed, kl)`` turns the trainer's per-step observations
(``trainer.Observed``) and its reported ``train/mismatch_kl`` per step into
``(expected_codes, onset_step, facts)``. The label says what was observed, not what the
preset intended: a preset whose pathology did not happen in a run gets no expected
code (``facts["pathology_observed"] = False``). "Start" is the mean over the first 10
steps, "end" over the last tenth of the run (at least 10 steps).

Observed conditions and their onsets:

- ``lr_too_high``: the policy's entropy ended at or below a tenth of its start
  (``entropy_collapse``); onset: the first step whose 5-step mean entropy is at or
  below half the start.
- ``loophole``: at least half the answer digits ended as the grader's wildcard where
  it is not the right digit, and the true score rose less than half as much as the
  reward (``heldout_gap``); onset: the first step whose 5-step mean wildcard use is at
  least 0.3.
- ``too_hard``: over the first 20 steps at least 70 % of groups had no reward
  variance and the mean reward was at most 0.1 (``tasks_too_hard``); onset 0.
- ``healthy``: nothing, unless the policy's 5-step mean entropy fell at or below a
  tenth of its start at some step: then ``entropy_collapse`` (a healthy configuration
  whose policy still went near-deterministic), onset as for ``lr_too_high``.
- ``transcript_hack_flags`` (any preset, in ``facts`` only: the expected codes keep
  one code per preset): the first step at which more than 2 % of the step's
  high-reward trained attempts (reward >= 0.5) took the wildcard and say so in their
  text (the published onset of hacking: more than 2 % of a step's episodes), as
  ``facts["transcript_hack_onset"]``; None when no step passed it (every preset but
  ``loophole``, whose grader has no wildcard).
- ``stale_sampler``: the mismatch KL's median over the last tenth is at least 4 times
  its median over steps 2-11 (``mismatch_kl_rising``); onset: the first step whose
  10-step median is at least twice that start.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from rlstream.simulate.learn.trainer import Observed

EXPECTED = {
    "lr_too_high": "entropy_collapse",
    "loophole": "heldout_gap",
    "too_hard": "tasks_too_hard",
    "stale_sampler": "mismatch_kl_rising",
}


def _mean(xs: list[float | None]) -> float | None:
    vals = [x for x in xs if x is not None]
    return float(np.mean(vals)) if vals else None


def _first(xs: np.ndarray, window: int, test, stat=np.mean) -> int | None:
    for t in range(len(xs)):
        w = xs[max(0, t - window + 1) : t + 1]
        w = w[~np.isnan(w)]
        if w.size and test(stat(w)):
            return t
    return None


def label_run(
    preset: str, obs: list[Observed], kl: list[float | None]
) -> tuple[tuple[str, ...], int | None, dict[str, Any]]:
    n = len(obs)
    tail = max(10, n // 10)

    def se(get):
        vals = [get(o) for o in obs]
        return _mean(vals[:10]), _mean(vals[-tail:])

    ent0, ent1 = se(lambda o: o.policy_entropy)
    r0, r1 = se(lambda o: o.reward_all)
    s0, s1 = se(lambda o: o.true_score)
    e0, e1 = se(lambda o: o.eval_true)
    d0, d1 = se(lambda o: o.distinct)
    u0, u1 = se(lambda o: o.loophole_use)
    kla = np.array([np.nan if x is None else x for x in kl])
    k0 = float(np.nanmedian(kla[2:12])) if np.isfinite(kla[2:12]).any() else None
    k1 = float(np.nanmedian(kla[-tail:])) if np.isfinite(kla[-tail:]).any() else None
    nv20 = _mean([o.no_variance_share for o in obs[:20]])
    r20 = _mean([o.reward_all for o in obs[:20]])
    facts: dict[str, Any] = {
        "reward": [r0, r1],
        "true_score": [s0, s1],
        "heldout_true_score": [e0, e1],
        "policy_entropy": [ent0, ent1],
        "distinct_completions": [d0, d1],
        "loophole_use": [u0, u1],
        "mismatch_kl": [k0, k1],
        "no_variance_share_first_20": nv20,
        "shortcut_high": list(se(lambda o: o.shortcut_high)),
    }
    cut = np.array([np.nan if o.shortcut_high is None else o.shortcut_high for o in obs])
    facts["transcript_hack_onset"] = _first(cut, 1, lambda m: m > 0.02)
    onset: int | None = None
    seen = False
    ent = np.array([o.policy_entropy for o in obs])
    if preset == "lr_too_high" and ent0 and ent1 is not None:
        seen = ent1 <= 0.1 * ent0
        onset = _first(ent, 5, lambda m: m <= 0.5 * ent0)
    elif preset == "loophole" and u1 is not None and r0 is not None and s0 is not None:
        seen = u1 >= 0.5 and (s1 - s0) < 0.5 * (r1 - r0)
        use = np.array([np.nan if o.loophole_use is None else o.loophole_use for o in obs])
        onset = _first(use, 5, lambda m: m >= 0.3)
    elif preset == "too_hard" and nv20 is not None and r20 is not None:
        seen = nv20 >= 0.7 and r20 <= 0.1
        onset = 0
    elif preset == "stale_sampler" and k0 is not None and k1 is not None:
        seen = k1 >= 4 * k0
        onset = _first(kla, 10, lambda m: m >= 2 * k0, np.median)
    if preset == "healthy" and ent0:
        # A healthy configuration whose policy still went near-deterministic is labelled
        # by what happened: an entropy collapse, not a healthy run.
        low = _first(ent, 5, lambda m: m <= 0.1 * ent0)
        facts["entropy_collapse_observed"] = low is not None
        if low is not None:
            return ("entropy_collapse",), _first(ent, 5, lambda m: m <= 0.5 * ent0), facts
    facts["pathology_observed"] = seen if preset != "healthy" else None
    if preset == "healthy" or not seen or onset is None:
        return (), None, facts
    return (EXPECTED[preset],), onset, facts
