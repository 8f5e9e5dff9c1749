"""The health engine: fold finalized step rows into findings, one run at a time.

Contract
--------
- ``fold_step(state, row, ctx, cfg) -> (state, transitions)`` folds one finalized step
  row (rows arrive in step order; a row whose step is not after the last folded step
  is ignored and changes nothing). It returns a new state; the input is not modified.
- ``check_time(state, now, last_activity_time, ctx, cfg)`` evaluates ``stalled`` on
  wall or file time: silence longer than ``k`` times the run's median step interval
  (and at least ``min_seconds``). Finished runs are never stalled.
- ``findings(state)`` lists pending, firing and recently resolved findings in code order.
- ``run_status(state, ctx)``: the worst firing severity, then stalled / finished:
  "critical" if a critical finding fires; else "warning" if a warning fires (other
  than ``stalled``); else "stalled" if stalled fires; else "finished" if the run
  finished; else "healthy". Info findings never change it; a finished run with a
  firing warning is "warning".

Every transition (inactive->pending, pending->firing, pending->inactive,
firing->resolved, and firing->firing when a firing finding's severity changes) is
returned once, with the step and time it happened at.
"""

from __future__ import annotations

import itertools
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from rlstream.health import stats
from rlstream.health.config import CODES, DEFAULT_RULES, RuleConfig, RulesConfig
from rlstream.health.figures import RECENT_FIGURES, as_dict, extract, num
from rlstream.health.rules import EXPLAINED_BY, RULES, Ctx, Verdict
from rlstream.health.rules_ops import recent_ess
from rlstream.health.rules_signal import expected_step_noise
from rlstream.health.state import (
    FIRING,
    INACTIVE,
    LEVEL_FIGURES,
    PENDING,
    RESOLVED,
    SEVERITY_RANK,
    AlertState,
    Finding,
    HealthState,
    Transition,
    View,
)


@dataclass(frozen=True)
class RunContext:
    """What the engine knows about a run besides its rows."""

    run_id: str
    config: dict[str, Any] = field(default_factory=dict)
    """run.json ``config`` (the run's TOML as JSON)."""
    finished: bool = False


def new_state(cfg: RulesConfig = DEFAULT_RULES, run_id: str | None = None) -> HealthState:
    """An empty state sized for ``cfg``."""
    return HealthState(window=cfg.history.window, run_id=run_id)


def _view(state: HealthState, cfg: RulesConfig) -> View:
    return View(state, cfg.history.recent_steps, cfg.history.baseline_steps)


def recent_figures(state: HealthState, cfg: RulesConfig = DEFAULT_RULES) -> dict[str, float | None]:
    """run_health's ``RECENT_FIGURES`` columns: the figures the rules judge now, the
    median over ``[history] recent_steps`` rows, but for ESS the tokens of the last
    ``[low_ess] steps`` rows pooled (what low_ess judges and its message cites)."""
    view = _view(state, cfg)
    out = {key: view.recent(figure) for key, figure in RECENT_FIGURES.items()}
    out["mismatch_ess_recent"] = recent_ess(view, cfg.low_ess)
    return out


def _update_levels(state: HealthState, skip: int, n: int) -> None:
    """Track the lowest and highest ``n``-row median of each LEVEL_FIGURES figure."""
    if state.n_rows < skip + n:
        return
    rows = list(state.rows)[-n:]
    for name in LEVEL_FIGURES:
        vals = [f[name] for _, f in rows if name in f]
        if len(vals) * 2 <= n:
            continue
        m = stats.median(vals)
        lo, hi = state.levels.get(name, (m, m))
        state.levels[name] = (min(lo, m), max(hi, m))


def _update_streak(state: HealthState, figs: dict[str, float]) -> None:
    """Estimate the run of consecutive unusable groups ending at this step.

    Rows give counts, not the order of groups: steps with no trained group extend the
    streak by all their unusable groups; otherwise the unusable groups are assumed
    spread evenly between the trained ones (a lower bound on the longest run).
    """
    unusable, trained = figs.get("unusable"), figs.get("groups_trained")
    if unusable is None:
        return
    if trained is not None and trained <= 0:
        state.unusable_streak += unusable
    else:
        state.unusable_streak = unusable / ((trained or 0.0) + 1.0)


def _advance(
    state: HealthState,
    code: str,
    verdict: Verdict,
    rule: RuleConfig,
    step: int,
    time: float | None,
) -> list[Transition]:
    a = state.alerts.get(code)
    if a is None:
        a = state.alerts[code] = AlertState(severity=rule.severity)
    out: list[Transition] = []

    def move(to: str, severity: str | None = None) -> None:
        sev = severity or a.severity
        out.append(Transition(code, sev, a.state, to, step, time, a.message))
        a.state, a.severity = to, sev

    if verdict.holds:
        sev = verdict.severity or rule.severity
        a.misses = 0
        a.message = verdict.message
        if a.level is None or a.state in (INACTIVE, RESOLVED):
            a.level = verdict.level
        if a.state in (INACTIVE, RESOLVED):
            a.since_step, a.held, a.resolved_step = step, 1, -1
            if rule.for_steps <= 1:
                move(FIRING, sev)
            else:
                move(PENDING, sev)
        elif a.state == PENDING:
            a.held += 1
            a.severity = sev
            if a.held >= rule.for_steps:
                move(FIRING, sev)
        elif a.state == FIRING and sev != a.severity:
            move(FIRING, sev)
    elif a.state in (PENDING, FIRING):
        a.misses += 1
        if a.misses >= rule.clear_steps:
            a.level = None
            if a.state == PENDING:
                move(INACTIVE)
            else:
                a.resolved_step = step
                a.message = f"{a.message} [resolved at step {step}]" if a.message else ""
                move(RESOLVED)
    return out


def _age_out(state: HealthState, cfg: RulesConfig) -> None:
    for a in state.alerts.values():
        if (
            a.state == RESOLVED
            and state.last_step - a.resolved_step >= cfg.history.keep_resolved_steps
        ):
            a.state = INACTIVE


def _explained(s: HealthState, code: str, verdicts: dict[str, Verdict]) -> bool:
    """Does a finding that explains `code`'s evidence otherwise hold at this step, or
    is it pending or firing (`rules.EXPLAINED_BY`)? Then `code` does not hold: its
    advice would contradict that finding's."""
    for other in EXPLAINED_BY.get(code, ()):
        v, a = verdicts.get(other), s.alerts.get(other)
        if (v is not None and v.holds) or (a is not None and a.state in (PENDING, FIRING)):
            return True
    return False


def fold_step(
    state: HealthState, row: dict[str, Any], ctx: RunContext, cfg: RulesConfig = DEFAULT_RULES
) -> tuple[HealthState, list[Transition]]:
    """Fold one finalized step row; see the module docstring."""
    step = row.get("step")
    if isinstance(step, bool) or not isinstance(step, int) or step <= state.last_step:
        return state, []
    s = state.copy()
    h = cfg.history
    s.run_id = s.run_id or ctx.run_id
    figs = extract(row)
    s.rows.append((step, figs))
    s.n_rows += 1
    if s.n_rows > h.baseline_skip:
        for name, value in figs.items():
            vals = s.baseline.setdefault(name, [])
            if len(vals) < h.baseline_steps:
                vals.append(value)
    s.last_step = step
    t = num(row.get("time"))
    if t is not None and (s.last_step_time is None or t >= s.last_step_time):
        s.step_times.append(t)
        s.last_step_time = t
    _update_streak(s, figs)
    _update_levels(s, h.baseline_skip, h.baseline_steps)
    nb = cfg.noisy_reward.base_steps
    if s.n_rows == h.baseline_skip + nb and "reward_all" not in s.early_noise:
        rows = [f for _, f in list(s.rows)[-nb:]]
        early = [f["reward_all"] for f in rows if "reward_all" in f]
        noise = stats.step_noise(early) if len(early) >= nb // 2 else None
        if noise is not None:
            s.early_noise["reward_all"] = noise
            counts = [f.get("attempts") or f.get("trained_attempts") for f in rows]
            n = stats.median([x for x in counts if x])
            if n:
                ses = [f["reward_se"] for f in rows if "reward_se" in f]
                s.early_noise["reward_se"] = expected_step_noise(early, ses, n)[0]

    view = _view(s, cfg)
    evals = as_dict(row.get("reported_eval"))
    if evals:
        train = view.recent("reward_all", 2 * h.recent_steps)
        for name, value in evals.items():
            value = num(value)
            if value is not None and isinstance(name, str):
                s.evals.setdefault(name, deque(maxlen=s.window)).append((step, value, train))

    rctx = Ctx(ctx.config or {}, h.hysteresis, h.trend_steps, h.recent_steps)
    out: list[Transition] = []
    verdicts: dict[str, Verdict] = {}
    for code, rule_fn in RULES.items():
        rule = cfg.rule(code)
        if not rule.enabled:
            continue
        alert = s.alerts.get(code)
        active = alert is not None and alert.state in (PENDING, FIRING)
        verdict = rule_fn(view, rule, rctx, active, row)
        if verdict is not None:
            verdicts[code] = verdict
    for code, verdict in verdicts.items():
        if verdict.holds and _explained(s, code, verdicts):
            verdict = Verdict(False, verdict.message)
        out += _advance(s, code, verdict, cfg.rule(code), step, t)
    # A new step is activity: a stalled finding clears.
    if "stalled" in s.alerts:
        out += _advance(s, "stalled", Verdict(False), cfg.stalled, step, t)
    _age_out(s, cfg)
    return s, out


def typical_interval(state: HealthState) -> float | None:
    """Median of the positive differences between recorded step times."""
    ts = list(state.step_times)
    diffs = [b - a for a, b in itertools.pairwise(ts) if b > a]
    return stats.median(diffs) if diffs else None


def check_time(
    state: HealthState,
    now: float,
    last_activity_time: float | None,
    ctx: RunContext,
    cfg: RulesConfig = DEFAULT_RULES,
) -> tuple[HealthState, list[Transition]]:
    """Evaluate ``stalled`` at wall/file time ``now``; see the module docstring."""
    c = cfg.stalled
    if not c.enabled:
        return state, []
    ts = state.step_times
    interval = typical_interval(state)
    last = max(
        (x for x in (state.last_step_time, last_activity_time) if x is not None), default=None
    )
    if ctx.finished:
        verdict = Verdict(False)
    elif interval is None or len(ts) < c.min_intervals + 1 or last is None:
        return state, []
    else:
        elapsed = now - last
        limit = max(c.k * interval, c.min_seconds)
        verdict = Verdict(
            elapsed > limit,
            f"no step or heartbeat for {elapsed:.0f} s, {elapsed / interval:.1f}x the run's "
            f"median step interval of {interval:.1f} s (limit {limit:.0f} s; last step "
            f"{state.last_step}): check that the trainer and samplers are alive",
        )
    alert = state.alerts.get("stalled")
    active = alert is not None and alert.state in (PENDING, FIRING)
    if not verdict.holds and not active:
        return state, []  # the common case on every poll: nothing to change, no copy
    s = state.copy()
    if ctx.finished:
        s.alerts["stalled"].misses = c.clear_steps - 1  # finishing clears at once
    out = _advance(s, "stalled", verdict, c, max(s.last_step, 0), now)
    if not out and s.alerts.get("stalled") == alert:
        return state, []
    return s, out


def findings(state: HealthState) -> list[Finding]:
    """Pending, firing and recently resolved findings, in code order."""
    out = []
    for code in CODES:
        a = state.alerts.get(code)
        if a is not None and a.state in (PENDING, FIRING, RESOLVED):
            out.append(Finding(code, a.severity, a.state, a.since_step, a.message))
    return out


def run_status(state: HealthState, ctx: RunContext) -> str:
    """One word for the run; see the module docstring for the precedence."""
    worst = max(
        (
            SEVERITY_RANK[a.severity]
            for c, a in state.alerts.items()
            if a.state == FIRING and c != "stalled"
        ),
        default=-1,
    )
    if worst >= SEVERITY_RANK["critical"]:
        return "critical"
    if worst >= SEVERITY_RANK["warning"]:
        return "warning"
    stalled = state.alerts.get("stalled")
    if stalled is not None and stalled.state == FIRING and not ctx.finished:
        return "stalled"
    if ctx.finished:
        return "finished"
    return "healthy"
