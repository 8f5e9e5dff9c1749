"""The health rules' config: one typed, frozen config with documented defaults.

Contract
--------
``RulesConfig`` holds a ``HistoryConfig`` (window sizes shared by every rule) and one
frozen dataclass per finding code, named like the code. Every rule config carries
``enabled``, ``severity``, ``for_steps`` (how many evaluations the condition must hold
before a pending finding fires) and ``clear_steps`` (how many consecutive clear
evaluations resolve it), plus its own thresholds. Each field's docstring is its
documentation (``docs/health.md`` renders the same text).

``load_rules(path)`` reads a TOML file whose tables are ``[history]``,
``[<code>]``, ``[cohorts]`` and ``[limits]`` (what is read of a run folder at most:
``LimitsConfig``, which the pipeline takes, not the rules) and overrides the defaults key by key. Unknown tables or keys and values
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
from rlstream.health.thresholds import (  # noqa: F401  (re-exported: C.<Rule>)
    FailureBurst,
    GradingFailureBurst,
    HeldoutGap,
    LowEss,
    MetricDisagreement,
    MismatchKlRising,
    NoisyReward,
    NoLearningSignal,
    OutOfRoom,
    RolloutFailureBurst,
    RuleConfig,
    StaleRollouts,
    Stalled,
    TasksMastered,
    TasksTooEasy,
    TasksTooHard,
    UnusableGroupsStreak,
)
from rlstream.health.thresholds_policy import (
    DegenerateOutputs,
    EntropyCollapse,
    EntropyTooHigh,
    LengthCollapse,
    LengthExplosion,
    RewardTooFast,
    TranscriptHackFlags,
)

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
class LimitsConfig:
    """What rlstream reads of a run folder at most (docs/runtime.md "Limits"); the
    command-line flag of the same name overrides the file."""

    max_file_bytes: int = 64 << 20
    """Largest whole run file read (a transcript, a per-step file, run.json): a larger one is quarantined as `file_too_large` with its size and not read (`--max-file-bytes`)."""
    max_tokens_slack: int = 0
    """Tokens a generation may have above its run's own `sampling.max_tokens` before it is quarantined as `exceeds_max_tokens` (`--max-tokens-slack`)."""


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
    transcript_hack_flags: TranscriptHackFlags = field(default_factory=TranscriptHackFlags)
    stalled: Stalled = field(default_factory=Stalled)
    unlike_peers: UnlikePeers = field(default_factory=UnlikePeers)
    cohorts: CohortsConfig = field(default_factory=CohortsConfig)
    limits: LimitsConfig = field(default_factory=LimitsConfig)

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            sub = getattr(self, f.name)
            if isinstance(sub, (RuleConfig, UnlikePeers)):
                _validate_rule(f.name, sub)
        if self.limits.max_file_bytes < 1 or self.limits.max_tokens_slack < 0:
            raise ConfigError("[limits] max_file_bytes must be >= 1, max_tokens_slack >= 0")
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
        if n.crash_neighbours < 1 or not 0 < n.crash_share <= 1 or n.crash_k <= 0:
            raise ConfigError(
                f"[noisy_reward] crash_neighbours ({n.crash_neighbours}) must be >= 1, "
                f"crash_share ({n.crash_share}) in (0, 1] and crash_k ({n.crash_k}) > 0"
            )

    def rule(self, code: str) -> RuleConfig:
        """The config of one finding code."""
        return getattr(self, code)


CODES: tuple[str, ...] = tuple(
    f.name
    for f in dataclasses.fields(RulesConfig)
    if f.name not in ("history", "cohorts", "limits")
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
    valid = [f.name for f in dataclasses.fields(RulesConfig)] + ["samples"]
    changes = {}
    for table, values in data.items():
        if table not in valid:
            raise ConfigError(
                f"rules file: unknown table [{table}]; valid tables: {', '.join(valid)}"
            )
        if table == "samples":  # kept samples and scanners: the pipeline's (cli_support)
            continue
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
