"""Scenarios: per-step trajectories of the simulator's latent knobs.

A scenario is named by the health finding code it should trigger (`healthy` triggers
none). `build_knobs(plan, rng)` returns a `Knobs` of arrays indexed by step: the healthy
trajectory of the run's parameters, then the scenario's change blended in by a ramp that
starts at the onset step. Most pathologies develop gradually (a smoothstep over about a
third of the remaining steps); failure bursts, the reporting bug and the stall are
abrupt, as they are in real runs. The engine (engine.py) turns knobs into attempts,
tokens and rewards; nothing here draws per-attempt randomness. docs/run-format.md lists
what each scenario does.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from rlstream.simulate.config import RunPlan

SCENARIOS: tuple[str, ...] = (
    "healthy",
    "no_learning_signal",
    "tasks_too_hard",
    "tasks_too_easy",
    "tasks_mastered",
    "unusable_groups_streak",
    "rollout_failure_burst",
    "grading_failure_burst",
    "out_of_room",
    "mismatch_kl_rising",
    "low_ess",
    "stale_rollouts",
    "reward_too_fast",
    "degenerate_outputs",
    "entropy_collapse",
    "entropy_too_high",
    "length_explosion",
    "length_collapse",
    "noisy_reward",
    "heldout_gap",
    "metric_disagreement",
    "stalled",
    "transcript_hack_flags",
)

# Present from the first step: the task set is wrong for the model, not a change.
ZERO_ONSET = frozenset({"tasks_too_hard", "tasks_too_easy"})


@dataclass(slots=True)
class Knobs:
    """Latent parameters per step (each field an array of length `steps`)."""

    skill: np.ndarray  # policy ability, logit scale
    heldout_skill: np.ndarray  # ability on the held-out set
    diff_mean: np.ndarray  # task difficulty mean, logit scale
    collapse: np.ndarray  # P(a group's attempts all get one shared outcome)
    flip: np.ndarray  # P(the grader flips a reward)
    shift_sd: np.ndarray  # sd of a per-step random shift of pass logits
    fail_rollout: np.ndarray  # P(rollout_failed) per attempt
    fail_grading: np.ndarray  # P(grading_failed) per attempt
    lag_scale: np.ndarray  # mean policy lag per group (async)
    len_mult: np.ndarray  # multiplier of the median completion length
    turn_p: np.ndarray  # P(another turn) in multi-turn runs
    conf: np.ndarray  # logit boost of the top candidate (higher: lower entropy)
    beta: np.ndarray  # spread of candidate logits
    tail: np.ndarray  # probability mass outside the candidates
    rep: np.ndarray  # P(a token continues the generation's repeated motif)
    kl_sd: np.ndarray  # sd of trainer - sampler logprob noise
    out_frac: np.ndarray  # share of unlikely tokens (ls < -1) the trainer finds far likelier
    degen: np.ndarray  # P(an attempt answers with the run's constant completion)
    bug: np.ndarray  # 1.0 where reported metrics are computed wrongly
    hack: np.ndarray  # P(a passing attempt's text shows a shortcut; its reward is unchanged)
    stop: int  # first step never completed (steps when the run finishes)


def smoothstep(x: np.ndarray) -> np.ndarray:
    x = np.clip(x, 0.0, 1.0)
    return x * x * (3.0 - 2.0 * x)


def _ramp(steps: int, onset: int, length: float) -> np.ndarray:
    t = np.arange(steps, dtype=np.float64)
    return smoothstep((t - onset + 1.0) / max(length, 1.0))


def _freeze_after(x: np.ndarray, r: np.ndarray, onset: int) -> np.ndarray:
    """Blend x toward its value at onset: learning stops as r rises."""
    return x * (1.0 - r) + x[min(onset, x.size - 1)] * r


def _cap_at_onset(skill: np.ndarray, s0: float, onset: int, level: float) -> np.ndarray:
    """Slow the healthy learning curve so that ability at onset is at most ``level``
    (logit scale, tasks' mean difficulty 0): the run has not yet done what the
    scenario makes it do from the onset."""
    gain = skill[onset] - s0
    if gain <= 0:
        return skill
    return s0 + (skill - s0) * min(1.0, max(level - s0, 0.1) / gain)


def healthy_knobs(plan: RunPlan, rng: np.random.Generator) -> Knobs:
    p = plan.params
    steps = plan.steps
    t = np.arange(steps, dtype=np.float64)
    walk = np.cumsum(rng.normal(0.0, p["skill_walk"], steps))
    skill = p["s0"] + p["gain"] * (1.0 - np.exp(-t / p["tau"])) + walk
    ones = np.ones(steps)
    zeros = np.zeros(steps)
    return Knobs(
        skill=skill,
        heldout_skill=skill - 0.3,
        diff_mean=zeros.copy(),
        collapse=zeros.copy(),
        flip=ones * p["flip"],
        shift_sd=ones * 0.15,
        fail_rollout=ones * p["fail_rollout"],
        fail_grading=ones * p["fail_grading"],
        lag_scale=ones * 0.6,
        len_mult=ones.copy(),
        turn_p=ones * p["turn_p"],
        conf=p["conf0"] + 0.6 * t / max(steps, 1),
        beta=ones.copy(),
        tail=ones * 0.01,
        rep=ones * 0.02,
        kl_sd=ones * p["kl_sd"],
        out_frac=zeros.copy(),
        degen=zeros.copy(),
        bug=zeros.copy(),
        hack=zeros.copy(),
        stop=steps,
    )


def build_knobs(plan: RunPlan, rng: np.random.Generator) -> Knobs:
    k = healthy_knobs(plan, rng)
    name = plan.scenario
    if name == "healthy":
        return k
    steps = plan.steps
    onset = int(plan.onset or 0)
    r = _ramp(steps, onset, 0.35 * (steps - onset))
    after = (np.arange(steps) >= onset).astype(np.float64)
    s0 = plan.params["s0"]

    if name == "no_learning_signal":
        # Reward still low when learning stops: tasks sit above the ability reached.
        k.diff_mean[:] = k.skill[onset] + 1.0
        k.skill = _freeze_after(k.skill, r, onset)
        k.collapse = 0.92 * r
        k.conf = k.conf + 1.2 * r
    elif name == "tasks_too_hard":
        k.diff_mean[:] = s0 + 4.5
        k.skill = s0 + 0.2 * (k.skill - s0)
    elif name == "tasks_too_easy":
        # Too easy by tasks_too_easy's own definition (most groups all-success and
        # reward >= 0.9 from the start) whatever the run's reward kind, grader flips
        # and turn limit: easy tasks sit far below the model and are solved well
        # inside the room. 4.5 logits with the healthy turn budget left a multi-turn,
        # partial-credit run's attempts running out of turns, so most of its groups
        # kept a spread (a learning signal) and its reward started near 0.87.
        k.diff_mean[:] = s0 - 5.5
        k.turn_p = 0.5 * k.turn_p
    elif name == "tasks_mastered":
        # Not mastered before the onset (pass rate about 0.7 at most, below the
        # finding's reward threshold), then ability overtakes the task set.
        k.skill = _cap_at_onset(k.skill, s0, onset, 1.0) + 5.5 * r
    elif name == "unusable_groups_streak":
        k.collapse = 0.9 * r
        k.fail_rollout = k.fail_rollout + 0.06 * r
    elif name == "rollout_failure_burst":
        k.fail_rollout = k.fail_rollout + after * (0.3 + 0.15 * _ramp(steps, onset, 2))
    elif name == "grading_failure_burst":
        k.fail_grading = k.fail_grading + after * (0.3 + 0.15 * _ramp(steps, onset, 2))
    elif name == "out_of_room":
        # Ability keeps growing a little but the attempts that run out of turns or
        # tokens eat the gain: reward flat while max_turns and truncation climb.
        k.skill = _freeze_after(k.skill, r, onset) + 2.2 * r
        k.turn_p = k.turn_p + (0.85 - k.turn_p) * r
        k.len_mult = k.len_mult * (1.0 + 0.4 * r)
    elif name == "mismatch_kl_rising":
        k.kl_sd = k.kl_sd + 0.8 * _ramp(steps, onset, steps - onset) ** 1.5
    elif name == "low_ess":
        k.out_frac = 0.015 * r
    elif name == "stale_rollouts":
        k.lag_scale = k.lag_scale + (plan.max_steps_off_policy + 0.5 - k.lag_scale) * r
    elif name == "reward_too_fast":
        # Learning has been slow, so reward is still mid-way (ability reaches the
        # tasks' level at onset), when the policy abruptly finds a shortcut: ability
        # jumps 3 logits in about 4 steps and reward leaps from about 0.45 to about 0.9.
        k.skill = _cap_at_onset(k.skill, s0, onset, 0.0) + 3.0 * _ramp(steps, onset, 4)
    elif name == "degenerate_outputs":
        k.degen = 0.75 * r
    elif name == "entropy_collapse":
        k.conf = k.conf + 3.0 * r
        k.tail = k.tail * (1.0 - 0.9 * r)
        k.rep = k.rep + 0.5 * r
        k.skill = _freeze_after(k.skill, r, onset)
    elif name == "entropy_too_high":
        k.conf = k.conf * (1.0 - r)
        k.beta = k.beta * (1.0 - 0.6 * r)
        k.tail = k.tail + 0.35 * r
        k.skill = k.skill - 2.5 * r
        k.len_mult = k.len_mult * (1.0 + 0.4 * r)
    elif name == "length_explosion":
        k.len_mult = k.len_mult * np.exp(2.0 * r)
        k.skill = _freeze_after(k.skill, r, onset)
    elif name == "length_collapse":
        k.len_mult = k.len_mult * np.exp(-2.4 * r)
    elif name == "noisy_reward":
        # The grader becomes inconsistent from batch to batch (a reward model or judge
        # whose calibration swings between steps, a flaky test harness): each step's
        # pass logits get a random shift whose sd ramps up to 5, so a step's pass rate
        # lands anywhere from near 0 to near 1 and the reward curve jumps around a flat
        # trend far beyond the sampling noise of its attempts (a policy strong at the
        # onset stays near its level on most steps and crashes toward 0 on some).
        k.skill = _freeze_after(k.skill, r, onset)
        k.shift_sd = k.shift_sd + 5.0 * r
    elif name == "heldout_gap":
        k.heldout_skill = _freeze_after(k.heldout_skill, r, onset) - 0.8 * r
        k.skill = k.skill + 2.0 * r
    elif name == "metric_disagreement":
        k.bug = after
    elif name == "stalled":
        k.stop = onset
    elif name == "transcript_hack_flags":
        # Text-level hacking: from the onset a fast-growing share (over about 8 steps,
        # as published onsets go: low, then fast) of the attempts that pass write a
        # shortcut (rlstream.simulate.text); rewards are drawn as in the healthy twin,
        # so the reward curve rises no faster and only the text differs.
        k.hack = 0.6 * _ramp(steps, onset, 8)
    else:  # pragma: no cover - SimConfig validates names
        raise ValueError(f"unknown scenario {name!r}")
    for f in fields(Knobs):
        v = getattr(k, f.name)
        if isinstance(v, np.ndarray) and v.shape != (steps,):
            raise AssertionError(f"knob {f.name} has shape {v.shape}")
    return k
