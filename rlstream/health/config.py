"""Thresholds of the health rules: one typed, frozen config with documented defaults.

Contract
--------
``RulesConfig`` holds a ``HistoryConfig`` (window sizes shared by every rule) and one
frozen dataclass per finding code, named like the code. Every rule config carries
``enabled``, ``severity``, ``for_steps`` (how many evaluations the condition must hold
before a pending finding fires) and ``clear_steps`` (how many consecutive clear
evaluations resolve it), plus its own thresholds. Each field's docstring is its
documentation (``docs/health.md`` renders the same text).

``load_rules(path)`` reads a TOML file whose tables are ``[history]`` and
``[<code>]`` and overrides the defaults key by key. Unknown tables or keys and values
of the wrong type raise ``ConfigError`` naming the offending key and the valid ones.
"""

from __future__ import annotations

import dataclasses
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, get_type_hints

from rlstream.errors import ConfigError
from rlstream.health.config_peers import CohortsConfig, UnlikePeers

SEVERITIES = ("info", "warning", "critical")


@dataclass(frozen=True)
class HistoryConfig:
    """How much of a run's history the rules keep and look at."""

    window: int = 60
    """Rows kept in the rolling window; the longest look-back of any rule."""
    baseline_skip: int = 2
    """Steps at the start ignored by the baseline (warm-up, first compile)."""
    baseline_steps: int = 10
    """Steps after ``baseline_skip`` whose median/MAD form the run's early baseline."""
    recent_steps: int = 5
    """Steps whose median is a figure's current ("recent") value."""
    trend_steps: int = 30
    """Steps over which a robust (Theil-Sen) trend is fitted."""
    keep_resolved_steps: int = 50
    """Steps a resolved finding stays listed by ``findings()`` before it is dropped."""
    hysteresis: float = 0.8
    """While a finding is active its thresholds relax by this factor (fire at T, clear
    below 0.8 T), so a metric hovering at the threshold does not flap."""


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

    ess_max: float = 0.8
    """Recent token ESS at or below this..."""
    ratio: float = 3.0
    """...and its shortfall 1 - ESS at least this many times the baseline shortfall."""
    critical_ess: float = 0.3
    """At or below this ESS the finding is critical."""


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
class RewardTooFast(RuleConfig):
    """Reward climbing faster than the run's own history allows."""

    for_steps: int = 3
    short_steps: int = 10
    """Steps of the recent window that are compared..."""
    long_steps: int = 20
    """...with this many steps before it."""
    slow_short_steps: int = 20
    """A second, slower test: the last this-many steps against the ``long_steps`` before
    them (0: off). It sees a jump a few steps later, with a smaller error."""
    rise_min: float = 0.15
    """The rise beyond the earlier trend must reach this..."""
    z: float = 5.5
    """...and this many standard errors (Hodges-Lehmann shift; step noise by MAD, of
    the recent steps and of the steps before, apart)."""
    recent_noise_floor: float = 0.3
    """The recent steps' noise is taken as at least this share of the earlier noise
    (ten steps give a rough estimate; a low one must not inflate the rise)."""
    min_rows: int = 60
    """Rows of history needed first: early learning is legitimately fast."""
    best_margin: float = 0.1
    """The new level must also top the best earlier level in the window (highest
    ``short_steps`` median before the compared steps) by this: reward coming back to
    where it was after a dip (an outage, a bad batch) is not a climb."""
    eval_share: float = 0.5
    """A climb the held-out score follows is learning, not a shortcut: with evals in
    the compared steps and before them, the held-out score must have risen by less
    than this share of the reward's rise to start the finding."""


@dataclass(frozen=True)
class DegenerateOutputs(RuleConfig):
    """Distinct completions collapse; one answer fits many tasks (hard-coding)."""

    severity: str = "critical"
    for_steps: int = 3
    top_share_min: float = 0.4
    """Recent top_completion_task_share at or above this..."""
    top_share_ratio: float = 3.0
    """...and this many times its baseline; or"""
    top_share_abs: float = 0.6
    """Or recent top_completion_task_share at or above this whatever the baseline (a
    hack present from the first step has no clean baseline)..."""
    min_groups: float = 4.0
    """...when the steps have at least this many groups (tasks) to share an answer."""
    distinct_max: float = 0.4
    """Or recent distinct_completions at or below this..."""
    distinct_ratio: float = 0.5
    """...and this share of its baseline or less (without task ids, alone; with them,
    also the task share above 1/groups and at least ``top_share_rise`` times its median
    over the first three baseline steps: literal answers repeated within tasks and
    shared by some)."""
    top_share_rise: float = 2.0
    """See ``distinct_ratio``."""


@dataclass(frozen=True)
class EntropyCollapse(RuleConfig):
    """Entropy falling toward zero, or falling with outputs degenerating, or repetition
    rising as distinct completions fall. Sharpening while learning is not collapse."""

    zero_ratio: float = 0.1
    """On entropy alone: recent entropy at or below this share of the baseline (a fall
    toward zero); or"""
    entropy_ratio: float = 0.4
    """recent entropy at or below this share of the baseline, with outputs degenerating
    (any of the next four) or without evidence of learning (held-out score or reward
    risen); or"""
    repetition_support: float = 0.1
    """(degenerating: repetition above its baseline by at least this,"""
    length_ratio: float = 0.6
    """mean completion length at or below this share of its baseline,"""
    diversity_ratio: float = 0.8
    """a trainer's n-gram diversity metric at or below this share of its baseline,"""
    support_distinct_ratio: float = 0.7
    """or, unless the policy is learning (its attempts then converge on each task's
    answer), distinct completions at or below this share of its baseline)"""
    eval_rise_min: float = 0.05
    """(learning: the held-out score's latest three evals above its first three by at
    least this; without evals,"""
    reward_rise_min: float = 0.1
    """reward above its baseline by at least this); or"""
    repetition_rise: float = 0.2
    """repetition above its baseline by at least this..."""
    distinct_ratio: float = 0.7
    """...while distinct_completions fell to this share of its baseline or less."""


@dataclass(frozen=True)
class EntropyTooHigh(RuleConfig):
    """Entropy gibberish-high."""

    ratio: float = 2.0
    """Recent entropy at or above this many times the baseline..."""
    abs_rise: float = 0.5
    """...and above it by at least this many nats/token."""


@dataclass(frozen=True)
class LengthExplosion(RuleConfig):
    """Response length running away toward the sampling.max_tokens cap."""

    ratio: float = 1.5
    """Recent mean completion length at or above this many times the baseline..."""
    cap_frac: float = 0.6
    """...and at or above this share of max_tokens, or truncation risen by"""
    truncated_rise: float = 0.15
    """at least this share of completions."""
    ratio_no_cap: float = 2.5
    """Without a known cap: the length ratio at this level, and no sign of learning
    (reasoning RL lengthens responses as it learns; held-out score or reward risen as
    for entropy_collapse: ``eval_rise_min``, ``reward_rise_min``)."""
    eval_rise_min: float = 0.05
    """See ``ratio_no_cap``."""
    reward_rise_min: float = 0.1
    """See ``ratio_no_cap``."""


@dataclass(frozen=True)
class LengthCollapse(RuleConfig):
    """Response length shrinking."""

    ratio: float = 0.4
    """Recent mean completion length at or below this share of the baseline."""
    min_baseline_tokens: float = 4.0
    """Ignore runs whose baseline length is below this many tokens."""


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
    """...and this many times the run's early noise."""


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


@dataclass(frozen=True)
class RulesConfig:
    """Every threshold of the health rules. Tables of a rules TOML file use these names."""

    history: HistoryConfig = field(default_factory=HistoryConfig)
    no_learning_signal: NoLearningSignal = field(default_factory=NoLearningSignal)
    tasks_too_hard: TasksTooHard = field(default_factory=TasksTooHard)
    tasks_too_easy: TasksTooEasy = field(default_factory=TasksTooEasy)
    tasks_mastered: TasksMastered = field(default_factory=TasksMastered)
    unusable_groups_streak: UnusableGroupsStreak = field(default_factory=UnusableGroupsStreak)
    rollout_failure_burst: RolloutFailureBurst = field(default_factory=RolloutFailureBurst)
    grading_failure_burst: GradingFailureBurst = field(default_factory=GradingFailureBurst)
    out_of_room: OutOfRoom = field(default_factory=OutOfRoom)
    mismatch_kl_rising: MismatchKlRising = field(default_factory=MismatchKlRising)
    low_ess: LowEss = field(default_factory=LowEss)
    stale_rollouts: StaleRollouts = field(default_factory=StaleRollouts)
    reward_too_fast: RewardTooFast = field(default_factory=RewardTooFast)
    degenerate_outputs: DegenerateOutputs = field(default_factory=DegenerateOutputs)
    entropy_collapse: EntropyCollapse = field(default_factory=EntropyCollapse)
    entropy_too_high: EntropyTooHigh = field(default_factory=EntropyTooHigh)
    length_explosion: LengthExplosion = field(default_factory=LengthExplosion)
    length_collapse: LengthCollapse = field(default_factory=LengthCollapse)
    noisy_reward: NoisyReward = field(default_factory=NoisyReward)
    heldout_gap: HeldoutGap = field(default_factory=HeldoutGap)
    metric_disagreement: MetricDisagreement = field(default_factory=MetricDisagreement)
    stalled: Stalled = field(default_factory=Stalled)
    unlike_peers: UnlikePeers = field(default_factory=UnlikePeers)
    cohorts: CohortsConfig = field(default_factory=CohortsConfig)

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            sub = getattr(self, f.name)
            if isinstance(sub, (RuleConfig, UnlikePeers)):
                _validate_rule(f.name, sub)
        h = self.history
        if min(h.window, h.baseline_steps, h.recent_steps, h.trend_steps) < 1:
            raise ConfigError(
                "[history] window, baseline_steps, recent_steps, trend_steps must be >= 1"
            )
        if h.window < max(h.trend_steps, h.recent_steps):
            raise ConfigError(
                f"[history] window ({h.window}) must be >= trend_steps ({h.trend_steps}) "
                f"and recent_steps ({h.recent_steps})"
            )

        u = self.unusable_groups_streak
        if not 1 <= u.share_steps <= h.window or min(u.horizon_steps, u.surprise_steps) < 0:
            raise ConfigError(
                f"[unusable_groups_streak] share_steps ({u.share_steps}) must be between 1 "
                f"and [history] window ({h.window}); horizon_steps, surprise_steps >= 0"
            )

        n = self.noisy_reward
        if not 3 <= n.steps <= h.window or not 3 <= n.base_steps <= h.window:
            raise ConfigError(
                f"[noisy_reward] steps ({n.steps}) and base_steps ({n.base_steps}) must be "
                f"between 3 and [history] window ({h.window})"
            )

    def rule(self, code: str) -> RuleConfig:
        """The config of one finding code."""
        return getattr(self, code)


CODES: tuple[str, ...] = tuple(
    f.name for f in dataclasses.fields(RulesConfig) if f.name not in ("history", "cohorts")
)
"""Every finding code, in the order the Loops guide reads them. A stable API."""


def _validate_rule(code: str, rule: RuleConfig | UnlikePeers) -> None:
    if rule.severity not in SEVERITIES:
        raise ConfigError(f"[{code}] severity must be one of {SEVERITIES}, got {rule.severity!r}")
    if rule.for_steps < 1 or rule.clear_steps < 1:
        raise ConfigError(f"[{code}] for_steps and clear_steps must be >= 1")


DEFAULT_RULES = RulesConfig()
"""The documented defaults."""


def _coerce(table: str, key: str, value: Any, kind: type) -> Any:
    if kind is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if kind is bool and isinstance(value, bool):
        return value
    if kind in (int, str, float) and isinstance(value, kind) and not isinstance(value, bool):
        return value
    raise ConfigError(
        f"rules file: [{table}] {key} must be {kind.__name__}, got {type(value).__name__} {value!r}"
    )


def _override(table: str, current: Any, values: Any) -> Any:
    if not isinstance(values, dict):
        raise ConfigError(f"rules file: [{table}] must be a table, got {values!r}")
    hints = get_type_hints(type(current))
    valid = [f.name for f in dataclasses.fields(current)]
    changes = {}
    for key, value in values.items():
        if key not in valid:
            raise ConfigError(
                f"rules file: unknown key {key!r} in [{table}]; valid keys: {', '.join(valid)}"
            )
        changes[key] = _coerce(table, key, value, hints[key])
    return dataclasses.replace(current, **changes)


def rules_from_dict(data: dict[str, Any], base: RulesConfig = DEFAULT_RULES) -> RulesConfig:
    """Override ``base`` with ``{table: {key: value}}``; the structure of a rules TOML."""
    valid = [f.name for f in dataclasses.fields(RulesConfig)]
    changes = {}
    for table, values in data.items():
        if table not in valid:
            raise ConfigError(
                f"rules file: unknown table [{table}]; valid tables: {', '.join(valid)}"
            )
        changes[table] = _override(table, getattr(base, table), values)
    return dataclasses.replace(base, **changes)


def load_rules(path: str | Path) -> RulesConfig:
    """Read a rules TOML file; keys it does not set keep their defaults."""
    try:
        with open(path, "rb") as fh:
            data = tomllib.load(fh)
    except FileNotFoundError as exc:
        raise ConfigError(f"rules file {path} does not exist; pass an existing TOML file") from exc
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"rules file {path} is not valid TOML: {exc}") from exc
    return rules_from_dict(data)
