"""Bridge from final step rows to health verdicts: the pipeline's health hook.

`HealthFold` is called by `RunGroup.poll` for every run on every poll with the rows
that just became final (maybe none). It folds them through the pure rules of
`rlstream.health`, evaluates `stalled` against the clock, stores the health state in
the run state (so it is checkpointed with everything else), sets the run's status,
findings and firing codes, and the rules its data cannot evaluate
(`health.evaluable`), and returns the transitions as `alerts` events.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from rlstream.health import (
    DEFAULT_RULES,
    RulesConfig,
    RunContext,
    check_time,
    findings,
    fold_step,
    new_state,
    run_status,
)
from rlstream.health.evaluable import config_figures, not_evaluable, row_figures
from rlstream.health.figures import RECENT_FIGURES
from rlstream.health.state import View
from rlstream.pipeline.state import RunState, is_finished


class HealthFold:
    """Picklable health hook bound to one rules config."""

    def __init__(self, rules: RulesConfig = DEFAULT_RULES) -> None:
        self.rules = rules

    def __call__(
        self, state: RunState, rows: list[dict[str, Any]], now: float
    ) -> list[dict[str, Any]]:
        ctx = RunContext(state.run_id, state.config, is_finished(state))
        hs = state.health if state.health is not None else new_state(self.rules, state.run_id)
        transitions = []
        if rows:
            seen = set(state.headline.get("_figures", ())) | config_figures(state.config)
            for row in rows:
                seen |= row_figures(row)
            state.headline["_figures"] = sorted(seen)
            state.headline["_not_evaluable"] = not_evaluable(seen)
        for row in rows:
            hs, tr = fold_step(hs, row, ctx, self.rules)
            transitions.extend(tr)
        hs, tr = check_time(hs, now, state.last_activity, ctx, self.rules)
        transitions.extend(tr)
        if hs is state.health and state.status is not None and not ctx.finished:
            return []  # nothing folded, nothing changed: status and findings stand
        apply_health(state, hs, ctx)
        # The figures the rules judged, beside the findings in the fleet views.
        h = self.rules.history
        view = View(hs, h.recent_steps, h.baseline_steps)
        for key, figure in RECENT_FIGURES.items():
            state.headline[key] = view.recent(figure)
        state.headline["recent_steps"] = float(h.recent_steps)
        return [{"run_id": state.run_id, **asdict(t)} for t in transitions]


def apply_health(state: RunState, hs: Any, ctx: RunContext) -> None:
    """Store a new health state in the run state with its status, findings and firing."""
    state.health = hs
    state.status = run_status(hs, ctx)
    current = findings(hs)
    state.findings = [asdict(f) for f in current]
    state.firing = [f.code for f in current if f.state == "firing"]


class HealthHooks:
    """Picklable factory of the health hooks (`health_hooks`) for the Ray tailers, with
    the run's cohort function the driver shards runs by (`pipeline.shards`)."""

    def __init__(self, rules: RulesConfig = DEFAULT_RULES, cohort_rules: Any = ()) -> None:
        self.rules = rules
        self.cohort_rules = tuple(cohort_rules)

    def __call__(self) -> dict[str, Any]:
        return health_hooks(self.rules, self.cohort_rules)

    def cohort(self, run_id: str, run_url: str, config: dict[str, Any]) -> str:
        from rlstream.health.cohort import cohort_of

        return cohort_of(run_id, run_url, config, self.rules.cohorts, self.cohort_rules)


def health_hooks(rules: RulesConfig = DEFAULT_RULES, cohort_rules: Any = ()) -> dict[str, Any]:
    """Keyword arguments for `RunGroup` that turn health verdicts, cohorts and peer
    bands on (`cohort_rules`: `--cohort NAME=GLOB` pairs, `health.cohort`)."""
    from rlstream.pipeline.cohorts import PeerFold

    return {"health": HealthFold(rules), "peers": PeerFold(rules, tuple(cohort_rules))}
