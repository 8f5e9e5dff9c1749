"""Health rules: fold a run's step rows into findings with Prometheus-like states.

Pure computation: imports neither ray nor fsspec (a test checks). See
``docs/health.md`` for every code's meaning, condition and defaults.
"""

from rlstream.health.config import CODES, DEFAULT_RULES, RulesConfig, load_rules, rules_from_dict
from rlstream.health.engine import (
    RunContext,
    check_time,
    findings,
    fold_step,
    new_state,
    recent_figures,
    run_status,
    typical_interval,
)
from rlstream.health.state import Finding, HealthState, Transition

__all__ = [
    "CODES",
    "DEFAULT_RULES",
    "Finding",
    "HealthState",
    "RulesConfig",
    "RunContext",
    "Transition",
    "check_time",
    "findings",
    "fold_step",
    "load_rules",
    "new_state",
    "recent_figures",
    "rules_from_dict",
    "run_status",
    "typical_interval",
]
