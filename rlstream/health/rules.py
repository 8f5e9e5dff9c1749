"""One function per finding code: is its condition holding at the latest step?

Contract
--------
``RULES[code](view, rule_cfg, ctx_config, active, row) -> Verdict | None``.

- ``view`` is the run's history up to and including the latest row (``state.View``);
- ``ctx_config`` is the run's own config (run.json ``config``), read with ``cfg_get``;
- ``active`` is True while the finding is pending or firing: thresholds then relax by
  ``history.hysteresis`` (``ge``/``le`` below) so a metric hovering at a threshold does
  not flap;
- ``row`` is the raw latest row (metric_disagreement compares its columns).

A rule returns None when the row lacks what it needs (the finding's state is then
left as it is), else a ``Verdict`` whose message cites the numbers behind it and says
what to look at. ``stalled`` is time-based and lives in ``engine.check_time``.
Rules never read reward for degenerate_outputs or entropy_collapse: those must fire
on transcript-level evidence while reward curves look healthy.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, NamedTuple

from rlstream.health import config as C
from rlstream.health import stats
from rlstream.health.figures import as_dict, metric_pairs
from rlstream.health.state import View


class Verdict(NamedTuple):
    holds: bool
    message: str = ""
    severity: str | None = None
    """Overrides the rule's configured severity (escalation)."""


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


def _none(*xs: Any) -> bool:
    return any(x is None for x in xs)


def no_learning_signal(
    v: View, c: C.NoLearningSignal, ctx: Ctx, active: bool, row: dict
) -> Verdict | None:
    spread, r = v.recent("group_std"), v.recent("reward_all")
    nv = v.recent("no_variance_frac")
    # What the run had: its early baseline, or the best level it reached since (a run
    # that starts on hard tasks gains spread as it learns, then can lose it).
    base = _best(v.base("group_std"), v.highest("group_std"), max)
    nv_base = _best(v.base("no_variance_frac"), v.lowest("no_variance_frac"), min)
    if r is None or ((spread is None or base is None) and (nv is None or nv_base is None)):
        return None
    low_reward = le(r, c.reward_max, active, ctx)
    # Most groups once had variance (without group counts, the spread alone decides).
    had_signal = nv_base is None or nv_base <= c.no_variance_had_max
    by_spread = (
        had_signal
        and spread is not None
        and base is not None
        and base >= c.baseline_spread_min
        and le(spread, max(c.spread_abs, c.spread_rel * base), active, ctx)
    )
    by_groups = (
        nv is not None
        and nv_base is not None
        and had_signal
        and ge(nv, c.no_variance_min, active, ctx)
    )
    if not (low_reward and (by_spread or by_groups)):
        return Verdict(False)
    figures = (
        f"within-group reward std {spread:.3f} over the last {v.recent_steps} steps "
        f"(it had {base:.3f})"
        if spread is not None and base is not None
        else f"{nv:.0%} of groups without reward variance (it had {nv_base:.0%})"
    )
    return Verdict(
        True,
        f"{figures} while reward_mean_with_unusable is {r:.2f}; the policy has stopped "
        "exploring: raise temperature or group size, or add easier tasks",
    )


def _best(base: float | None, level: float | None, pick: Callable[..., float]) -> float | None:
    """The better of the early baseline and the run's best level since (either may be
    missing: the baseline before it is complete, levels for figures not tracked)."""
    vals = [x for x in (base, level) if x is not None]
    return pick(vals) if base is not None and vals else None


def _from_start(v: View, name: str) -> float | None:
    vals = v.base_values(name)
    return stats.median(vals) if len(vals) >= 3 else None


def _no_variance_from_start(
    v: View, no_variance_min: float, reward_ok: Callable[[float], bool], active: bool, ctx: Ctx
) -> tuple[bool, str] | None:
    """Shared by tasks_too_hard / tasks_too_easy: most groups discarded as no_variance
    from the start and now, with reward at one end (`reward_ok`)."""
    start, nv, r, r_start = (
        _from_start(v, "no_variance_frac"),
        v.recent("no_variance_frac"),
        v.recent("reward_all"),
        _from_start(v, "reward_all"),
    )
    if _none(start, nv, r, r_start):
        return None
    holds = (
        start >= no_variance_min
        and ge(nv, no_variance_min, active, ctx)
        and reward_ok(r)
        and reward_ok(r_start)
    )
    evidence = (
        f"{nv:.0%} of groups discarded as no_variance (from the start: {start:.0%}) with "
        f"reward_mean_with_unusable {r:.3f} (from the start: {r_start:.3f})"
    )
    return holds, evidence


def tasks_too_hard(v: View, c: C.TasksTooHard, ctx: Ctx, active: bool, row: dict) -> Verdict | None:
    got = _no_variance_from_start(
        v, c.no_variance_min, lambda r: le(r, c.reward_max, active, ctx), active, ctx
    )
    if got is None:
        return None
    return Verdict(
        got[0],
        f"{got[1]}; almost every attempt fails, so nothing is learned: use easier tasks, "
        "a curriculum or a stronger initial policy",
    )


def tasks_too_easy(v: View, c: C.TasksTooEasy, ctx: Ctx, active: bool, row: dict) -> Verdict | None:
    got = _no_variance_from_start(
        v, c.no_variance_min, lambda r: ge(r, c.reward_min, active, ctx), active, ctx
    )
    if got is None:
        return None
    return Verdict(
        got[0], f"{got[1]}; almost every attempt succeeds, so nothing is learned: use harder tasks"
    )


def tasks_mastered(
    v: View, c: C.TasksMastered, ctx: Ctx, active: bool, row: dict
) -> Verdict | None:
    nv, base, r = v.recent("no_variance_frac"), v.base("no_variance_frac"), v.recent("reward_all")
    if _none(nv, base, r):
        return None
    holds = (
        ge(nv, c.no_variance_min, active, ctx)
        and ge(nv - base, c.rise_min, active, ctx)
        and ge(r, c.reward_min, active, ctx)
    )
    return Verdict(
        holds,
        f"{nv:.0%} of groups have no reward variance (baseline {base:.0%}) with "
        f"reward_mean_with_unusable {r:.2f}: the tasks are mastered; consider stopping "
        "or moving to harder tasks",
    )


def steps_to_streak(share: float, limit: float, groups_per_step: float) -> float:
    """Expected steps until ``limit`` consecutive unusable groups, each group unusable
    with probability ``share`` independently: (share^-limit - 1) / (1 - share) groups.

    ``limit`` groups at a share of 1; infinite at a share of 0 (or too many to count).
    """
    if groups_per_step <= 0 or limit <= 0:
        return math.inf
    if share >= 1.0:
        return limit / groups_per_step
    if share <= 0.0:
        return math.inf
    exponent = -limit * math.log(share)
    if exponent > 700.0:
        return math.inf
    return math.expm1(exponent) / (1.0 - share) / groups_per_step


def unusable_share(v: View, n: int) -> tuple[float, float, int] | None:
    """(share of unusable groups, groups per step, rows) over the last ``n`` rows;
    None unless every row there has both counts."""
    unusable, groups = v.values("unusable", n), v.values("groups", n)
    rows = min(n, len(v.state.rows))
    if len(unusable) != rows or len(groups) != rows or sum(groups) <= 0:
        return None
    return sum(unusable) / sum(groups), sum(groups) / rows, rows


def unusable_groups_streak(
    v: View, c: C.UnusableGroupsStreak, ctx: Ctx, active: bool, row: dict
) -> Verdict | None:
    limit = cfg_get(ctx.config, "training.max_consecutive_unusable_groups")
    streak = v.state.unusable_streak
    if not limit or limit <= 0 or v.cur("unusable") is None:
        return None
    frac = streak / limit
    holds = ge(frac, c.warn_frac, active, ctx)
    risk = ""
    share = unusable_share(v, c.share_steps) if c.horizon_steps > 0 else None
    if share is not None:
        # Near reward 1 a healthy run reaches half the limit now and then by chance:
        # the streak counts when groups are unusable so often that the limit is likely
        # to be reached, or when it is too long to be chance at the run's recent share
        # (the run changed, faster than the share shows). Once firing, the finding
        # stays while the limit is likely, even if a trained group ended the streak.
        u, per_step, rows = share
        expected = steps_to_streak(u, limit, per_step)
        likely = le(expected, c.horizon_steps, active, ctx)
        sudden = ge(steps_to_streak(u, streak, per_step), c.surprise_steps, active, ctx)
        holds = (holds and (likely or sudden)) or (likely and v.firing("unusable_groups_streak"))
        risk = f"; {u:.0%} of the groups of the last {rows} steps were unusable"
        if math.isfinite(expected):
            risk += f", at which rate a streak of {limit:.0f} comes every {expected:.0f} steps"
    return Verdict(
        holds,
        f"about {streak:.0f} consecutive unusable groups at step {v.step}, "
        f"{frac:.0%} of training.max_consecutive_unusable_groups = {limit:.0f}{risk}; the "
        "trainer stops when it is reached: check reward variance and task difficulty",
        "critical" if frac >= c.critical_frac else None,
    )


def _failure_burst(v: View, c: C.FailureBurst, ctx: Ctx, active: bool, kind: str) -> Verdict | None:
    count = v.cur(f"{kind}_failed")
    if count is None:
        return None
    rate, attempts = v.cur(f"{kind}_failed_rate"), v.cur("attempts")
    base_rate = v.base_mean(f"{kind}_failed_rate")
    if rate is None or attempts is None:
        # Counts only (attempts unknown): compare with the baseline count.
        base_count = v.base_mean(f"{kind}_failed")
        if base_count is None:
            return None
        lam = base_count
        holds = ge(count, max(c.ratio * lam, lam + c.z * math.sqrt(max(lam, 1.0))), active, ctx)
        return Verdict(
            holds,
            f"{count:.0f} {kind} failures at step {v.step} against a trickle of "
            f"{base_count:.1f} per step early in the run: look at the discard reasons",
        )
    if base_rate is None:
        return None
    lam = base_rate * attempts
    holds = (
        ge(rate, c.rate_min, active, ctx)
        and ge(rate, c.ratio * base_rate, active, ctx)
        and ge(count, lam + c.z * math.sqrt(max(lam, 1.0)), active, ctx)
    )
    sev = "critical" if rate >= c.critical_rate else None
    return Verdict(
        holds,
        f"{count:.0f} of {attempts:.0f} attempts ({rate:.0%}) had {kind} failures at step "
        f"{v.step} against a trickle of {base_rate:.1%} early in the run: look at the "
        "discard reasons (discard/rollouts/...)",
        sev,
    )


def rollout_failure_burst(
    v: View, c: C.FailureBurst, ctx: Ctx, active: bool, row: dict
) -> Verdict | None:
    return _failure_burst(v, c, ctx, active, "rollout")


def grading_failure_burst(
    v: View, c: C.FailureBurst, ctx: Ctx, active: bool, row: dict
) -> Verdict | None:
    return _failure_burst(v, c, ctx, active, "grading")


def _room(v: View, f: Callable[[View, str], float | None]) -> tuple[float | None, str]:
    mt, tr = f(v, "max_turns_rate"), f(v, "truncated")
    if mt is None and tr is None:
        return None, ""
    if tr is None or (mt is not None and mt >= tr):
        return mt, "ending at rollout.max_turns"
    return tr, "truncated at sampling.max_tokens"


def out_of_room(v: View, c: C.OutOfRoom, ctx: Ctx, active: bool, row: dict) -> Verdict | None:
    now, what = _room(v, View.recent)
    base, _ = _room(v, View.base)
    slope = v.trend("reward_all", ctx.trend_steps)
    if _none(now, base, slope):
        return None
    change = slope * ctx.trend_steps
    holds = (
        ge(now, c.rate_min, active, ctx)
        and ge(now - base, c.rise_min, active, ctx)
        and le(abs(change), c.reward_flat, active, ctx)
    )
    turns, max_turns = v.recent("turns"), cfg_get(ctx.config, "rollout.max_turns")
    extra = f"; mean turns {turns:.1f} of max_turns {max_turns:.0f}" if turns and max_turns else ""
    return Verdict(
        holds,
        f"{now:.0%} of attempts {what} (baseline {base:.0%}) while reward moved "
        f"{change:+.3f} over the last {ctx.trend_steps} steps{extra}; the agent runs out of "
        "room: raise the limit or shorten the task",
    )


def mismatch_kl_rising(
    v: View, c: C.MismatchKlRising, ctx: Ctx, active: bool, row: dict
) -> Verdict | None:
    kl, base, slope = v.recent("kl"), v.base("kl"), v.trend("kl", ctx.trend_steps)
    if _none(kl, base):
        return None
    # Rising is needed to start; a plateau far above the baseline keeps it firing.
    rising = active or slope is None or slope >= 0
    holds = ge(kl, max(c.ratio * base, c.abs_min), active, ctx) and rising
    sev = "critical" if kl >= c.critical_abs else None
    return Verdict(
        holds,
        f"sampler/trainer mismatch KL {kl:.4f} over the last {v.recent_steps} steps, "
        f"{kl / max(base, 1e-12):.1f}x its baseline {base:.4f}: the sampler and trainer "
        "disagree more and more; check weight sync, precision and kernels",
        sev,
    )


def low_ess(v: View, c: C.LowEss, ctx: Ctx, active: bool, row: dict) -> Verdict | None:
    ess, base = v.recent("ess"), v.base("ess")
    if _none(ess, base):
        return None
    short, base_short = 1.0 - ess, max(1.0 - base, 0.01)
    holds = le(ess, c.ess_max, active, ctx) and ge(short, c.ratio * base_short, active, ctx)
    sev = "critical" if ess <= c.critical_ess else None
    return Verdict(
        holds,
        f"importance-weight ESS {ess:.2f} over the last {v.recent_steps} steps "
        f"(baseline {base:.2f}): a few tokens dominate the off-policy correction; check "
        "sampler/trainer mismatch and staleness",
        sev,
    )


def stale_rollouts(
    v: View, c: C.StaleRollouts, ctx: Ctx, active: bool, row: dict
) -> Verdict | None:
    max_off = cfg_get(ctx.config, "training.max_steps_off_policy")
    lag, lag_base = v.recent("lag_mean", c.steps), v.base("lag_mean")
    rates = v.values("stale_rate", c.steps)
    stale = sum(rates) / len(rates) if len(rates) >= c.steps // 2 else None
    stale_base = v.base_mean("stale_rate")
    if (lag is None or lag_base is None) and (stale is None or stale_base is None):
        return None
    by_lag = (
        max_off is not None
        and max_off >= 1
        and lag is not None
        and lag_base is not None
        and ge(lag, c.lag_frac * max_off, active, ctx)
        and ge(lag - lag_base, c.lag_rise, active, ctx)
    )
    by_drops = (
        stale is not None
        and stale_base is not None
        and ge(stale, c.stale_rate_min, active, ctx)
        and ge(stale, c.stale_ratio * stale_base, active, ctx)
    )
    parts = []
    if lag is not None:
        limit = f" of max_steps_off_policy {max_off:.0f}" if max_off is not None else ""
        parts.append(
            f"mean lag {lag:.2f} steps{limit} over the last {c.steps} steps "
            f"(baseline {lag_base or 0:.2f})"
        )
    if stale is not None:
        parts.append(f"{stale:.0%} of attempts dropped as stale (baseline {stale_base or 0:.0%})")
    return Verdict(
        by_lag or by_drops,
        "; ".join(parts) + ": rollouts arrive too late for the trainer; add samplers or "
        "lower the off-policy window",
    )


class _Rise(NamedTuple):
    short: int
    excess: float
    se: float
    noise: float
    above_best: bool


def _rise(
    steps: list[float], ys: list[float], short: int, long: int, c: C.RewardTooFast
) -> _Rise | None:
    """How far the last ``short`` values sit above the ``long`` before them (Hodges-
    Lehmann shift) beyond what the earlier trend predicts, with its standard error."""
    if len(ys) < short + long:
        return None
    xs_b, b = steps[-short - long : -short], ys[-short - long : -short]
    a = ys[-short:]
    # Step noise before and within the recent steps, apart: reward near 0 or 1 is
    # less noisy than mid-way (binomial), so a jump to a high level narrows the spread.
    noise_b, noise_a = stats.step_noise(ys[:-short]), stats.step_noise(a)
    slope = stats.theil_sen(xs_b, b)
    if _none(noise_b, noise_a, slope):
        return None
    noise_b = max(noise_b, 1e-3)
    noise_a = max(noise_a, c.recent_noise_floor * noise_b)
    expected = max(slope, 0.0) * (short + long) / 2.0
    excess = stats.hl_shift(a, b) - expected
    se = stats.HL_SCALE * math.sqrt(noise_a**2 / len(a) + noise_b**2 / len(b))
    # Reward returning to a level it already held (after a dip) is not a climb.
    earlier = ys[:-short]
    best = max(
        (stats.median(earlier[i : i + short]) for i in range(len(earlier) - short + 1)),
        default=None,
    )
    above_best = best is None or stats.median(a) - best >= c.best_margin
    return _Rise(short, excess, se, noise_b, above_best)


def reward_too_fast(
    v: View, c: C.RewardTooFast, ctx: Ctx, active: bool, row: dict
) -> Verdict | None:
    steps, ys = v.series("reward_all")
    if len(ys) < c.short_steps + c.long_steps or v.n_rows < c.min_rows:
        return None
    # Two time scales: a jump shows first in the last short_steps; a few steps later
    # the slower test (more steps on each side) sees it with a smaller error.
    rises = [
        r
        for short in dict.fromkeys((c.short_steps, c.slow_short_steps or c.short_steps))
        if (r := _rise(steps, ys, short, c.long_steps, c)) is not None
    ]
    if not rises:
        return None
    hits = [
        r
        for r in rises
        if ge(r.excess, c.rise_min, active, ctx)
        and ge(r.excess, c.z * r.se, active, ctx)
        and r.above_best
    ]
    climbing = bool(hits)
    shown = max(hits or rises, key=lambda r: r.excess / r.se)
    excess, se, noise = shown.excess, shown.se, shown.noise
    # Once the climb is over, the finding stays while reward holds its new level above
    # the level before the climb began (as long as that level is in the window).
    alert = v.state.alerts.get("reward_too_fast")
    since = alert.since_step if alert is not None and active else None
    before = [y for x, y in zip(steps, ys, strict=True) if since is not None and x < since]
    before = before[-c.long_steps :]
    now = stats.median(ys[-c.short_steps :])
    level = (
        len(before) >= c.short_steps and now - stats.median(before) >= c.rise_min * ctx.hysteresis
    )
    detail = (
        f"reward rose {excess:+.2f} over the last {shown.short} steps beyond its trend "
        f"({excess / se:.1f} standard errors; step noise {noise:.3f})"
        if climbing or not level
        else f"reward jumped from {stats.median(before):.2f} before step {since} to "
        f"{now:.2f} and stays there"
    )
    return Verdict(
        climbing or level,
        f"{detail}; faster than the run's history allows: inspect transcripts for reward hacking",
    )


def degenerate_outputs(
    v: View, c: C.DegenerateOutputs, ctx: Ctx, active: bool, row: dict
) -> Verdict | None:
    top, top_base = v.recent("top_share"), v.base("top_share")
    dist, dist_base = v.recent("distinct"), v.base("distinct")
    groups = v.recent("groups")
    if top is not None:
        by_rel = top_base is not None and ge(
            top, max(c.top_share_min, c.top_share_ratio * top_base), active, ctx
        )
        # A hack present from the first step has no clean baseline.
        by_abs = (
            groups is not None and groups >= c.min_groups and ge(top, c.top_share_abs, active, ctx)
        )
        # Literal answers (one per task, some shared) show as completions repeating
        # within tasks while the task share rises only moderately above where it
        # started. Mode collapse alone (entropy_collapse) repeats within tasks but
        # shares nothing across them, so the task share must have risen too.
        first = v.base_values("top_share")[:3]
        start = stats.median(first) if len(first) == 3 else None
        floor = 1.0 / groups if groups else 0.0
        by_dist = (
            dist is not None
            and dist_base is not None
            and start is not None
            and top > floor + 1e-9
            and ge(top, c.top_share_rise * start, active, ctx)
            and le(dist, min(c.distinct_max, c.distinct_ratio * dist_base), active, ctx)
        )
        base_s = f" (baseline {top_base:.0%})" if top_base is not None else ""
        dist_s = (
            f"; distinct completions {dist:.0%} (baseline {dist_base:.0%})"
            if dist is not None and dist_base is not None
            else ""
        )
        return Verdict(
            by_rel or by_abs or by_dist,
            f"one completion answers {top:.0%} of a step's tasks over the last "
            f"{v.recent_steps} steps{base_s}{dist_s}: the policy emits a constant answer that "
            "fits many tasks; inspect transcripts for a hard-coded answer or grader exploit",
        )
    if dist is not None and dist_base is not None:
        holds = le(dist, min(c.distinct_max, c.distinct_ratio * dist_base), active, ctx)
        return Verdict(
            holds,
            f"distinct completions {dist:.0%} of the step's completions (baseline "
            f"{dist_base:.0%}): outputs collapsed onto a few answers; inspect transcripts",
        )
    return None


def entropy_collapse(
    v: View, c: C.EntropyCollapse, ctx: Ctx, active: bool, row: dict
) -> Verdict | None:
    ent, ent_base = v.recent("entropy"), v.base("entropy")
    rep, rep_base = v.recent("repetition"), v.base("repetition")
    dist, dist_base = v.recent("distinct"), v.base("distinct")
    by_entropy = (
        ent is not None
        and ent_base is not None
        and ent_base > 0
        and le(ent, c.entropy_ratio * ent_base, active, ctx)
    )
    by_text = (
        not _none(rep, rep_base, dist, dist_base)
        and ge(rep - rep_base, c.repetition_rise, active, ctx)
        and le(dist, c.distinct_ratio * dist_base, active, ctx)
    )
    if (ent is None or ent_base is None) and _none(rep, rep_base, dist, dist_base):
        return None
    parts = []
    if ent is not None and ent_base is not None:
        parts.append(
            f"entropy {ent:.3f} nats/token over the last {v.recent_steps} steps ({ent_base:.3f} at baseline)"
        )
    if rep is not None and rep_base is not None:
        parts.append(f"repetition {rep:.2f} (baseline {rep_base:.2f})")
    if dist is not None and dist_base is not None:
        parts.append(f"distinct completions {dist:.0%} (baseline {dist_base:.0%})")
    return Verdict(
        by_entropy or by_text,
        "; ".join(parts) + ": the policy is collapsing onto few outputs; lower the learning "
        "rate, add an entropy bonus or KL penalty",
    )


def entropy_too_high(
    v: View, c: C.EntropyTooHigh, ctx: Ctx, active: bool, row: dict
) -> Verdict | None:
    ent, base = v.recent("entropy"), v.base("entropy")
    if _none(ent, base):
        return None
    holds = ge(ent, c.ratio * base, active, ctx) and ge(ent - base, c.abs_rise, active, ctx)
    trunc = v.recent("truncated")
    extra = f"; {trunc:.0%} of completions truncated" if trunc is not None else ""
    return Verdict(
        holds,
        f"entropy {ent:.3f} nats/token over the last {v.recent_steps} steps, {ent / max(base, 1e-12):.1f}x "
        f"its baseline {base:.3f}{extra}: outputs drift toward gibberish; lower the "
        "learning rate or temperature",
    )


def length_explosion(
    v: View, c: C.LengthExplosion, ctx: Ctx, active: bool, row: dict
) -> Verdict | None:
    ln, base = v.recent("len_mean"), v.base("len_mean")
    if _none(ln, base) or base <= 0:
        return None
    cap = cfg_get(ctx.config, "sampling.max_tokens")
    trunc, trunc_base = v.recent("truncated"), v.base("truncated")
    slope = v.trend("len_mean", ctx.trend_steps)
    rising = active or slope is None or slope > 0  # needed to start, not to stay
    if cap:
        near_cap = ge(ln, c.cap_frac * cap, active, ctx) or (
            trunc is not None
            and trunc_base is not None
            and ge(trunc - trunc_base, c.truncated_rise, active, ctx)
        )
        holds = ge(ln, c.ratio * base, active, ctx) and near_cap and rising
    else:
        holds = ge(ln, c.ratio_no_cap * base, active, ctx) and rising
    cap_s = f" of max_tokens {cap:.0f}" if cap else ""
    trunc_s = f", {trunc:.0%} truncated" if trunc is not None else ""
    return Verdict(
        holds,
        f"mean completion length {ln:.0f} tokens{cap_s} over the last {v.recent_steps} "
        f"steps, {ln / base:.1f}x its baseline {base:.0f}{trunc_s}: responses run away "
        "toward the cap; add a length penalty or check for repetition loops",
    )


def length_collapse(
    v: View, c: C.LengthCollapse, ctx: Ctx, active: bool, row: dict
) -> Verdict | None:
    ln, base = v.recent("len_mean"), v.base("len_mean")
    if _none(ln, base) or base < c.min_baseline_tokens:
        return None
    return Verdict(
        le(ln, c.ratio * base, active, ctx),
        f"mean completion length {ln:.1f} tokens over the last {v.recent_steps} steps, "
        f"{ln / base:.0%} of its baseline {base:.1f}: responses are shrinking; check for "
        "a reward that favours short answers or early stops",
    )


def noisy_reward(v: View, c: C.NoisyReward, ctx: Ctx, active: bool, row: dict) -> Verdict | None:
    ys = v.values("reward_all", c.steps)
    noise = stats.step_noise(ys)
    n = v.recent("attempts") or v.recent("trained_attempts")
    base_noise = v.state.early_noise.get("reward_all")
    if base_noise is None:  # short runs: the early baseline's values
        base_vals = v.base_values("reward_all")
        base_noise = stats.step_noise(base_vals) if len(base_vals) >= 5 else None
    if len(ys) < min(c.steps, 10) or _none(noise, base_noise):
        return None
    ses = v.values("reward_se", c.steps)
    if n is None or n <= 0:
        return None
    p = min(max(stats.median(ys), 0.05), 0.95)
    binomial = math.sqrt(p * (1 - p) / n)
    # Never expect less than a 5 % pass rate's binomial noise: near 0 or 1 a few
    # lucky attempts are not chaos.
    floor = math.sqrt(0.05 * 0.95 / n)
    if len(ses) >= len(ys) // 2:
        # Root mean square: steps whose groups all agreed (p = 0 or 1) have no spread
        # of their own, and a median would let them hide the others' noise.
        rms = math.sqrt(sum(x * x for x in ses) / len(ses))
        expected, basis = rms, "the spread of rewards within its steps"
    else:
        expected, basis = binomial, f"{n:.0f} attempts per step"
    expected = max(expected, floor, 1e-3)
    holds = ge(noise, c.k_expected * expected, active, ctx) and ge(
        noise, c.ratio * max(base_noise, 1e-3), active, ctx
    )
    return Verdict(
        holds,
        f"reward moves {noise:.3f} step to step around its trend over the last "
        f"{len(ys)} steps, {noise / expected:.1f}x the {expected:.3f} expected from "
        f"{basis} and {noise / max(base_noise, 1e-3):.1f}x its early noise: "
        "check the grader for nondeterminism and the batch for mixing task sources",
    )


def heldout_gap(v: View, c: C.HeldoutGap, ctx: Ctx, active: bool, row: dict) -> Verdict | None:
    evals = as_dict(row.get("reported_eval"))
    if not evals:
        return None
    name = "heldout" if "heldout" in evals else sorted(evals)[0]
    pts = [p for p in list(v.state.evals.get(name, ()))[-c.max_evals :] if p[2] is not None]
    if len(pts) < c.min_evals:
        return None
    xs = [float(p[0]) for p in pts]
    span = xs[-1] - xs[0]
    gaps = [p[2] - p[1] for p in pts]
    train = stats.theil_sen(xs, [p[2] for p in pts])
    ev = stats.theil_sen(xs, [p[1] for p in pts])
    widen = stats.theil_sen(xs, gaps)
    if _none(train, ev, widen) or span <= 0:
        return None
    train_rise, eval_rise, gap_rise = train * span, ev * span, widen * span
    # Noise of the gap around its own trend: evals are sparse, so demand the widening
    # stand clear of it.
    resid = [g - widen * x for g, x in zip(gaps, xs, strict=True)]
    noise = stats.mad(resid) or 0.0
    holds = (
        ge(train_rise, c.train_rise_min, active, ctx)
        and eval_rise <= c.eval_share_max * train_rise
        and ge(gap_rise, max(c.gap_min, c.noise_k * noise), active, ctx)
    )
    return Verdict(
        holds,
        f"training reward rose {train_rise:+.2f} while eval/{name} moved {eval_rise:+.2f} "
        f"over steps {xs[0]:.0f}-{xs[-1]:.0f} ({len(pts)} evals; gap widened "
        f"{gap_rise:+.2f}, noise {noise:.3f}): gains do not transfer; suspect overfitting "
        "or reward hacking",
    )


def _md_tol(c: C.MetricDisagreement, kind: str, rep: float, rec: float) -> float:
    if kind == "reward":
        return c.reward_atol
    if kind == "count":
        return c.count_atol
    return c.atol + c.rtol * max(abs(rep), abs(rec))


def _off_from_start(v: View, c: C.MetricDisagreement, name: str, kind: str) -> bool | None:
    """Did ``name`` disagree in most of the early-baseline rows that carried it?
    None while that baseline is still filling."""
    diffs, mags = v.base_values(f"dis/{name}"), v.base_values(f"mag/{name}")
    if len(diffs) < v.baseline_min:
        return None
    off = sum(abs(d) > _md_tol(c, kind, m, m) for d, m in zip(diffs, mags, strict=True))
    return off >= c.definition_share * len(diffs)


def metric_disagreement(
    v: View, c: C.MetricDisagreement, ctx: Ctx, active: bool, row: dict
) -> Verdict | None:
    pairs = metric_pairs(row)
    if not pairs:
        return None
    drift, definition, undecided = [], [], False
    for name, rep, rec, kind in pairs:
        tol = _md_tol(c, kind, rep, rec)
        if active:
            tol /= ctx.hysteresis
        if abs(rep - rec) <= tol:
            continue
        start = _off_from_start(v, c, name, kind)
        if start is None:  # too early to tell a definition from a drift
            undecided = True
            continue
        (definition if start else drift).append((abs(rep - rec) / max(tol, 1e-12), name, rep, rec))
    for found in (drift, definition):
        found.sort(reverse=True)
    shown = "; ".join(
        f"{n}: reported {a:.4g} vs recomputed {b:.4g}" for _, n, a, b in (drift or definition)[:3]
    )
    if drift:
        return Verdict(
            True,
            f"at step {v.step} {shown}, agreeing in the run's first steps: the trainer's "
            "metric and the transcripts disagree; check the trainer's weighting and sign "
            "conventions",
        )
    if definition:
        return Verdict(
            True,
            f"at step {v.step} {shown}, and so from the run's first steps: the trainer "
            "defines this metric differently from rlstream (docs/run-format.md); the "
            "recomputed figure is the one the rules read",
            severity="info",
        )
    return None if undecided else Verdict(False)


RULES: dict[str, Callable[..., Verdict | None]] = {
    "no_learning_signal": no_learning_signal,
    "tasks_too_hard": tasks_too_hard,
    "tasks_too_easy": tasks_too_easy,
    "tasks_mastered": tasks_mastered,
    "unusable_groups_streak": unusable_groups_streak,
    "rollout_failure_burst": rollout_failure_burst,
    "grading_failure_burst": grading_failure_burst,
    "out_of_room": out_of_room,
    "mismatch_kl_rising": mismatch_kl_rising,
    "low_ess": low_ess,
    "stale_rollouts": stale_rollouts,
    "reward_too_fast": reward_too_fast,
    "degenerate_outputs": degenerate_outputs,
    "entropy_collapse": entropy_collapse,
    "entropy_too_high": entropy_too_high,
    "length_explosion": length_explosion,
    "length_collapse": length_collapse,
    "noisy_reward": noisy_reward,
    "heldout_gap": heldout_gap,
    "metric_disagreement": metric_disagreement,
}
"""Step-evaluated rules; ``stalled`` is evaluated by ``engine.check_time``."""
