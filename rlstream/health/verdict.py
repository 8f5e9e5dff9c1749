"""What a rule returns and the helpers every rule shares.

Contract
--------
``Verdict(holds, message, severity)`` is a rule's answer; ``Ctx`` carries the run's
config and the hysteresis factor; ``ge``/``le`` compare a figure with a threshold,
relaxed while the finding is active; ``cfg_get`` reads a numeric run-config value.
Pure: no I/O, no ray, no fsspec.
"""

from __future__ import annotations

from typing import Any, NamedTuple


class Verdict(NamedTuple):
    holds: bool
    message: str = ""
    severity: str | None = None
    """Overrides the rule's configured severity (escalation)."""
    level: float | None = None
    """The figure's level before the condition began, given while it holds: the engine
    keeps the first one in the finding's state (`AlertState.level`) while it is active,
    for a rule that holds as long as the figure stays away from that level."""


class Ctx(NamedTuple):
    """What rules need beyond the rows: the run's config and the hysteresis factor."""

    config: dict[str, Any]
    hysteresis: float
    trend_steps: int
    recent_steps: int


def cfg_get(config: dict[str, Any], dotted: str) -> float | None:
    """A numeric run-config value such as ``training.max_steps_off_policy``, or None."""
    cur: Any = config
    for part in dotted.split("."):
        if not isinstance(cur, dict) or part not in cur:
            return None
        cur = cur[part]
    if isinstance(cur, bool) or not isinstance(cur, int | float):
        return None
    return float(cur)


def ge(x: float, t: float, active: bool, ctx: Ctx) -> bool:
    """x >= t, relaxed to x >= h*t while active."""
    return x >= (t * ctx.hysteresis if active else t)


def le(x: float, t: float, active: bool, ctx: Ctx) -> bool:
    """x <= t, relaxed to x <= (2-h)*t while active."""
    return x <= (t * (2.0 - ctx.hysteresis) if active else t)


def any_none(*xs: Any) -> bool:
    return any(x is None for x in xs)
