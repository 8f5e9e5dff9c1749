"""Thresholds of the rules on what the policy writes: reward_too_fast,
degenerate_outputs, entropy and length (``rlstream.health.rules_policy``).

Frozen dataclasses gathered by ``rlstream.health.config.RulesConfig``; each field's
docstring is its documentation (``rlstream.health.reference``).
"""

from __future__ import annotations

from dataclasses import dataclass

from rlstream.health.thresholds import RuleConfig


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
    """On entropy alone: recent entropy at or below this share of the baseline's
    highest value (a fall toward zero, seen also when the policy collapsed within the
    baseline window); or"""
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
    learning_repetition_support: float = 0.2
    """While the policy is learning, a sharper policy writes somewhat more alike, so
    the repetition sign needs this rise instead of ``repetition_support``..."""
    learning_diversity_ratio: float = 0.6
    """...and the n-gram diversity sign this share of its baseline or less instead of
    ``diversity_ratio`` (healthy sharpening takes it to about 0.8 of its start)."""


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
    """at least this share of completions (with no cap in the config, truncation risen
    by this much is the cap showing itself: the ``ratio`` test then applies)."""
    ratio_no_cap: float = 2.5
    """Without a known cap or a truncation rise: the length ratio at this level, and no sign of learning
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
class TranscriptHackFlags(RuleConfig):
    """Transcript scanners flag the high-reward attempts: the reward is earned by a
    shortcut the text shows (docs/health.md, "Transcript scanners")."""

    severity: str = "critical"
    for_steps: int = 3
    share_min: float = 0.02
    """Median share of a step's high-reward attempts flagged by a scanner, over the last
    ``steps`` steps, at or above this (the published onset of hacking: more than 2 %
    of a step's episodes)..."""
    steps: int = 3
    """...steps in that median..."""
    min_flagged: int = 2
    """...with at least this many flagged attempts over those steps."""
