"""Bridge from final step rows to health verdicts: the pipeline's health hook.

`HealthFold` is called by `RunGroup.poll` for every run on every poll with the rows
that just became final (maybe none). It folds them through the pure rules of
`rlstream.health`, evaluates `stalled` against the clock, stores the health state in
the run state (so it is checkpointed with everything else), sets the run's status,
findings and firing codes, and the rules its data cannot evaluate
(`health.evaluable`), and returns the transitions as `alerts` events.

The status tells the truth at a glance (`apply_health`): the worst warning or critical
finding that fired is kept with the steps it fired over (`_worst`, from the
transitions, so kept after it resolves, even within one batch of rows), so a finished
run that had one has the worst severity it had (never `finished`, and never `warning`
when a finding went critical, even one that ends firing at warning); a run
with nothing firing that the rules cannot judge (`health.evaluable.judgement`: too
few evaluable rules or too few steps) is `insufficient`, never `healthy` or
`finished`, and what is missing is kept beside it (`_judged`, `_missing`).
"""

from __future__ import annotations

from collections.abc import Sequence
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
    recent_figures,
    run_status,
)
from rlstream.health.evaluable import (
    INSUFFICIENT,
    config_figures,
    judgement,
    not_evaluable,
    row_figures,
)
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
        seen: set[str] = set()
        if rows:
            seen = set(state.headline.get("_figures", ())) | config_figures(state.config)
        for row in rows:
            before = hs
            hs, tr = fold_step(hs, row, ctx, self.rules)
            transitions.extend(tr)
            # A folded row's figures are the newest in the history: not extracted twice.
            seen |= row_figures(row, hs.rows[-1][1] if hs is not before else None)
        if rows:
            state.headline["_figures"] = sorted(seen)
            state.headline["_not_evaluable"] = not_evaluable(seen)
        hs, tr = check_time(hs, now, state.last_activity, ctx, self.rules)
        transitions.extend(tr)
        if hs is state.health and state.status is not None and not ctx.finished:
            return []  # nothing folded, nothing changed: status and findings stand
        apply_health(state, hs, ctx, self.rules, transitions)
        # The figures the rules judged, beside the findings in the fleet views.
        state.headline.update(recent_figures(hs, self.rules))
        state.headline["recent_steps"] = float(self.rules.history.recent_steps)
        return [{"run_id": state.run_id, **asdict(t)} for t in transitions]


RANK = {"warning": 1, "critical": 2}
"""Severities a run's worst finding is chosen among (info never counts)."""


def track_worst(state: RunState, transitions: Sequence[Any], last_step: int) -> dict | None:
    """The run's worst warning or critical finding so far ({code, severity,
    since_step, until_step}: the steps of one firing, from the step it began firing
    to the step it resolved or the run's last, at whatever severity), from the
    transitions in order; the first to reach the highest severity stays (`stalled`
    aside), but the same code firing again at that severity or above is its latest
    firing: a finding that fired at 77-105 and 115-119 reads 115-119, never 77-119."""
    worst = state.headline.get("_worst")
    worst = dict(worst) if worst else None
    since: dict[str, int] = dict(state.headline.get("_firing_since") or {})

    def is_worst(code: str, start: int | None) -> bool:
        return worst is not None and worst["code"] == code and worst["since_step"] == start

    for t in transitions:
        if t.code == "stalled" or t.severity not in RANK:
            continue
        if t.to_state != "firing":  # resolved (or back to pending)
            start = since.pop(t.code, None)
            if worst is not None and is_worst(t.code, start):
                worst["until_step"] = max(worst["until_step"], t.step)
            continue
        since.setdefault(t.code, t.step)
        if worst is not None and is_worst(t.code, since[t.code]):
            worst["severity"] = max(worst["severity"], t.severity, key=RANK.__getitem__)
            worst["until_step"] = max(worst["until_step"], t.step)
        elif (
            worst is None
            or RANK[t.severity] > RANK[worst["severity"]]
            or (worst["code"] == t.code and RANK[t.severity] >= RANK[worst["severity"]])
        ):
            worst = {"code": t.code, "severity": t.severity, "since_step": since[t.code]}
            worst["until_step"] = t.step
    if worst is not None and is_worst(worst["code"], since.get(worst["code"])):
        worst["until_step"] = max(worst["until_step"], last_step)
    state.headline["_firing_since"] = since
    return worst


def apply_health(
    state: RunState,
    hs: Any,
    ctx: RunContext,
    rules: RulesConfig = DEFAULT_RULES,
    transitions: Sequence[Any] = (),
) -> None:
    """Store a new health state in the run state with its status, findings, firing,
    worst finding and judgement (see the module docstring)."""
    state.health = hs
    current = findings(hs)
    state.findings = [asdict(f) for f in current]
    state.firing = [f.code for f in current if f.state == "firing"]
    worst = track_worst(state, transitions, hs.last_step)
    if worst is None:  # a state folded before worst findings were kept
        firing_now = [f for f in current if f.state == "firing" and f.severity in RANK]
        firing_now = [f for f in firing_now if f.code != "stalled"]
        if firing_now:
            f = max(firing_now, key=lambda f: RANK[f.severity])
            since = f.since_step if f.since_step is not None else hs.last_step
            worst = {"code": f.code, "severity": f.severity, "since_step": since}
            worst["until_step"] = hs.last_step
            state.headline["_firing_since"] = {f.code: since}
    state.headline["_worst"] = worst
    judged, missing = judgement(
        state.headline.get("_not_evaluable", []), state.counters["steps_final"], rules
    )
    state.headline["_judged"], state.headline["_missing"] = judged, missing
    status = run_status(hs, ctx)
    if ctx.finished and worst is not None and RANK[worst["severity"]] > RANK.get(status, 0):
        # A finished run keeps the worst it had: a finding that went critical and ended
        # at warning (or resolved) leaves the run critical, not warning.
        status = worst["severity"]
    if status in ("healthy", "finished") and judged == INSUFFICIENT:
        status = INSUFFICIENT
    state.status = status


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
