"""Thresholds of the rules on learning signal, operations and trainer agreement.

One frozen dataclass per finding code (``RuleConfig`` holds the fields every rule
has); ``rlstream.health.config.RulesConfig`` gathers them. Each field's docstring is
its documentation: ``rlstream.health.reference`` renders it into docs/health.md.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class RuleConfig:
    """Fields every rule has."""

    enabled: bool = True
    """Evaluate this rule at all."""
    severity: str = "warning"
    """Severity of the finding: info, warning or critical."""
    for_steps: int = 5
    """Evaluations the condition must hold (pending) before the finding fires."""
    clear_steps: int = 5
    """Consecutive clear evaluations before a firing finding resolves."""


@dataclass(frozen=True)
class NoLearningSignal(RuleConfig):
    """Within-group reward spread fell toward zero while reward is still low."""

    spread_abs: float = 0.02
    """Recent within-group reward std at or below this counts as no spread."""
    spread_rel: float = 0.2
    """...or at or below this share of the spread the run had (the higher of its early
    baseline and its highest ``baseline_steps``-row median since)."""
    baseline_spread_min: float = 0.05
    """The spread it had must have been at least this (the spread *fell*; runs that
    never had spread are tasks_too_hard / tasks_too_easy)."""
    no_variance_min: float = 0.9
    """Or: at least this share of groups without reward variance now..."""
    no_variance_had_max: float = 0.5
    """...in a run whose share was at most this (early baseline, or its lowest
    ``baseline_steps``-row median since)."""
    reward_max: float = 0.6
    """Reward (with unusable groups) must be below this: at high reward it is mastery."""


@dataclass(frozen=True)
class TasksTooHard(RuleConfig):
    """Most groups discarded as no_variance from the start, with reward near 0."""

    for_steps: int = 3
    no_variance_min: float = 0.7
    """Share of groups discarded as no_variance, at the start and now; or"""
    partial_no_variance_min: float = 0.5
    """with partial credit (a few attempts score a fraction, so fewer groups are
    all-equal): at least this share no_variance..."""
    partial_spread_max: float = 0.12
    """...and the within-group reward spread over every group at or below this, at the
    start and now."""
    reward_max: float = 0.1
    """Reward with unusable groups at or below this, at the start and now."""


@dataclass(frozen=True)
class TasksTooEasy(RuleConfig):
    """Most groups discarded as no_variance from the start, with reward near 1."""

    for_steps: int = 3
    no_variance_min: float = 0.5
    """Share of groups discarded as no_variance, at the start and now (lower than for
    tasks_too_hard: reward near 1 from the start already says the tasks are easy)."""
    reward_min: float = 0.9
    """Reward with unusable groups at or above this, at the start and now."""


@dataclass(frozen=True)
class TasksMastered(RuleConfig):
    """no_variance rising late while reward with unusable groups is high."""

    severity: str = "info"
    no_variance_min: float = 0.6
    """Recent share of no_variance groups at or above this..."""
    rise_min: float = 0.3
    """...and above the baseline share by at least this."""
    reward_min: float = 0.85
    """Reward with unusable groups at or above this."""


@dataclass(frozen=True)
class UnusableGroupsStreak(RuleConfig):
    """Consecutive rejected groups approaching training.max_consecutive_unusable_groups."""

    for_steps: int = 2
    clear_steps: int = 3
    warn_frac: float = 0.375
    """Estimated streak at or above this share of the run's limit: warning..."""
    critical_frac: float = 0.8
    """...at or above this share: critical (the trainer is about to give up)."""
    share_steps: int = 40
    """...while the share of unusable groups over this many steps (at most [history]
    window) is so high that..."""
    horizon_steps: float = 1000.0
    """...a streak as long as the limit is expected at least once in this many steps
    (groups taken as independent). Healthy runs near reward 1 reach half the limit by
    chance; this tells them from runs whose groups are mostly unusable. Once firing,
    the finding stays while this holds. 0: the streak alone decides (also when the rows
    lack group totals)."""
    surprise_steps: float = 100000.0
    """Or the streak is so long for that share that it would come by chance only once in
    this many steps: the run has changed (a sudden collapse) faster than the share shows."""


@dataclass(frozen=True)
class FailureBurst(RuleConfig):
    """Failures jump above the run's steady trickle (shared by both burst rules)."""

    for_steps: int = 2
    clear_steps: int = 4
    rate_min: float = 0.15
    """Failure share of the step's attempts must reach at least this..."""
    ratio: float = 3.0
    """...and this many times the baseline share..."""
    z: float = 4.0
    """...and exceed the baseline count by this many Poisson standard deviations."""
    critical_rate: float = 0.5
    """At or above this share of attempts failing, the finding is critical."""


@dataclass(frozen=True)
class RolloutFailureBurst(FailureBurst):
    """Rollout failures (timeouts, crashes) jump above the run's trickle."""


@dataclass(frozen=True)
class GradingFailureBurst(FailureBurst):
    """Grading failures (parse errors, grader crashes) jump above the run's trickle."""


@dataclass(frozen=True)
class OutOfRoom(RuleConfig):
    """max_turns or truncation rate rising while reward is flat."""

    rate_min: float = 0.25
    """Recent share of attempts ending at max_turns or truncated at max_tokens..."""
    rise_min: float = 0.15
    """...above the baseline share by at least this."""
    reward_flat: float = 0.1
    """Reward is flat when its Theil-Sen trend over trend_steps moves it less than this."""


@dataclass(frozen=True)
class MismatchKlRising(RuleConfig):
    """Sampler/trainer KL (k3) climbing."""

    ratio: float = 4.0
    """Recent KL at or above this many times the baseline..."""
    abs_min: float = 1e-3
    """...and at least this absolute value (nats/token)."""
    critical_abs: float = 0.05
    """At or above this KL the finding is critical."""


@dataclass(frozen=True)
class LowEss(RuleConfig):
    """Importance-weight effective sample size falling."""

    steps: int = 10
    """Steps whose trained tokens are pooled into one ESS (each step's weights
    normalised to mean 1, steps counted alike: the harmonic mean of their ESS): a few
    steps far below 1 among steps near 1 show, where their median would not."""
    ess_max: float = 0.8
    """That ESS at or below this..."""
    ratio: float = 3.0
    """...its shortfall 1 - ESS at least this many times the baseline's (the early
    baseline's tokens pooled the same way)..."""
    low_steps_min: int = 2
    """...and at least this many of those steps at or below ``ess_max`` on their own
    (one step dominates the pooled figure: a lone bad step is not a trend)."""
    critical_ess: float = 0.3
    """With the median step's ESS at or below this the finding is critical."""


@dataclass(frozen=True)
class StaleRollouts(RuleConfig):
    """Lag near training.max_steps_off_policy, or many stale drops."""

    steps: int = 10
    """Steps over which lag (median) and stale drops (mean share) are judged."""
    lag_frac: float = 0.6
    """Mean lag of trained attempts at or above this share of max_steps_off_policy..."""
    lag_rise: float = 0.5
    """...and above its baseline by at least this many steps; or"""
    stale_rate_min: float = 0.15
    """the share of attempts dropped as stale at or above this..."""
    stale_ratio: float = 3.0
    """...and this many times the baseline share."""


@dataclass(frozen=True)
class NoisyReward(RuleConfig):
    """Reward curve chaotic around its trend."""

    for_steps: int = 8
    clear_steps: int = 8
    steps: int = 40
    """Steps over which the reward's step-to-step noise is measured."""
    base_steps: int = 40
    """The run's early noise is measured over this many rows after baseline_skip."""
    k_expected: float = 1.8
    """Step-to-step noise at or above this many times the sampling error the steps' own
    spread explains (root mean square over the steps of sqrt(between-group variance /
    groups + within-group variance / attempts); without group figures
    sqrt(p(1-p)/attempts); never below a 5 % pass rate's binomial noise)..."""
    ratio: float = 1.5
    """...and this many times the run's early noise at today's level: the early noise
    times the sampling error expected now over the one expected on the early rows
    (sampling noise is largest for a reward near 0.5)."""
    crash_k: float = 4.0
    """Or: a step whose reward lies this many times the larger of that expected error
    and the early noise at today's level away from its local level (the median of its
    neighbours) is a crash or spike..."""
    crash_neighbours: int = 4
    """...the local level being the median of up to this many steps on each side..."""
    crash_share: float = 0.1
    """...and at least this share of the steps over which the noise is measured are
    such steps (a reward that sits near its level on most steps and crashes far below
    it on some: the robust step noise barely sees those)."""


@dataclass(frozen=True)
class HeldoutGap(RuleConfig):
    """Training reward rising while eval reward is flat or falling. Evaluated only at
    steps that carry an eval, so for_steps and clear_steps count evals."""

    for_steps: int = 3
    clear_steps: int = 2
    min_evals: int = 5
    """Eval points needed before judging."""
    max_evals: int = 8
    """The latest this many eval points are compared with training reward."""
    train_rise_min: float = 0.1
    """Training reward must rise at least this over the eval points' span..."""
    eval_share_max: float = 0.25
    """...while eval rises by at most this share of the training rise..."""
    gap_min: float = 0.2
    """...and the train-eval gap widens by at least this..."""
    noise_k: float = 3.0
    """...and by this many times the gap's own noise (MAD around its trend)."""


@dataclass(frozen=True)
class MetricDisagreement(RuleConfig):
    """A reported metric and its recomputed counterpart differ beyond tolerance."""

    for_steps: int = 3
    reward_atol: float = 0.02
    """Absolute tolerance for reward figures."""
    count_atol: float = 0.5
    """Absolute tolerance for group counts (they must match exactly)."""
    rtol: float = 0.25
    """Relative tolerance for KL, ESS, lag and entropy figures..."""
    atol: float = 2e-3
    """...plus this absolute tolerance."""
    definition_share: float = 0.8
    """A metric that was off in at least this share of the early-baseline rows that
    carried it has disagreed from the start: a different definition, reported once as
    ``info``, not a warning held for the whole run."""


@dataclass(frozen=True)
class Stalled(RuleConfig):
    """No new step or heartbeat for k times the run's typical step interval."""

    for_steps: int = 1
    clear_steps: int = 1
    k: float = 5.0
    """Multiple of the median step interval that counts as stalled."""
    min_seconds: float = 30.0
    """Never call a run stalled before this many seconds of silence."""
    min_intervals: int = 3
    """Step intervals needed before the typical interval is trusted."""
