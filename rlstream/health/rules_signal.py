"""Rules on the learning signal and the reward curve: no_learning_signal, tasks_too_hard,
tasks_too_easy, tasks_mastered, unusable_groups_streak, noisy_reward, heldout_gap.

Contract: as ``rules.RULES`` (see rlstream/health/rules.py).
"""

from __future__ import annotations

import math
from collections.abc import Callable

from rlstream.health import config as C
from rlstream.health import stats
from rlstream.health.figures import as_dict
from rlstream.health.state import FIRING, PENDING, View
from rlstream.health.verdict import Ctx, Verdict, any_none, cfg_get, ge, le


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
    if any_none(start, nv, r, r_start):
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
    holds, evidence = got
    if not holds:
        # Partial credit: a few attempts score a fraction, so some groups keep a small
        # spread and are trained; the spread over every group stays near zero.
        part = _no_variance_from_start(
            v, c.partial_no_variance_min, lambda r: le(r, c.reward_max, active, ctx), active, ctx
        )
        spread, spread_start = v.recent("group_std"), _from_start(v, "group_std")
        if part is not None and part[0] and not any_none(spread, spread_start):
            holds = spread_start <= c.partial_spread_max and le(
                spread, c.partial_spread_max, active, ctx
            )
            evidence += (
                f", within-group reward std {spread:.3f} (from the start: {spread_start:.3f})"
            )
    return Verdict(
        holds,
        f"{evidence}; almost every attempt fails, so nothing is learned: use easier tasks, "
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
    if any_none(nv, base, r):
        return None
    holds = (
        ge(nv, c.no_variance_min, active, ctx)
        and ge(nv - base, c.rise_min, active, ctx)
        and ge(r, c.reward_min, active, ctx)
    )
    evidence = (
        f"{nv:.0%} of groups have no reward variance (baseline {base:.0%}) with "
        f"reward_mean_with_unusable {r:.2f}"
    )
    doubt = next((q for code, q in MASTERY_DOUBTS.items() if _active(v, code)), None)
    if doubt is not None:
        return Verdict(holds, f"{evidence}: the tasks look mastered, but {doubt}")
    return Verdict(
        holds, f"{evidence}: the tasks are mastered; consider stopping or moving to harder tasks"
    )


MASTERY_DOUBTS = {
    "transcript_hack_flags": (
        "the scanners flag high-reward transcripts (transcript_hack_flags): fix the grader "
        "first; the reward may not be earned"
    ),
    "reward_too_fast": (
        "the reward climbed faster than the run's history allows (reward_too_fast): read "
        "the transcripts for a shortcut before stopping or moving to harder tasks"
    ),
}
"""Findings that doubt a mastery: while one is pending or firing (as of the step
before), `tasks_mastered` still holds (the same figures come from real mastery, and
`reward_too_fast` also fires on fast honest climbs) but its advice says to check first
instead of "consider stopping"; `rules.EXPLAINED_BY` silences it outright beside
findings that explain its figures."""


def _active(v: View, code: str) -> bool:
    a = v.state.alerts.get(code)
    return a is not None and a.state in (PENDING, FIRING)


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


def expected_step_noise(ys: list[float], ses: list[float], n: float) -> tuple[float, str]:
    """The step-to-step noise of reward that sampling explains over rows with rewards
    ``ys``, per-step sampling errors ``ses`` and ``n`` attempts per step, and what it
    was computed from (docs/health.md, noisy_reward)."""
    p = min(max(stats.median(ys) or 0.0, 0.05), 0.95)
    # Never expect less than a 5 % pass rate's binomial noise: near 0 or 1 a few
    # lucky attempts are not chaos.
    floor = math.sqrt(0.05 * 0.95 / n)
    if len(ses) >= len(ys) // 2:
        # Root mean square: steps whose groups all agreed (p = 0 or 1) have no spread
        # of their own, and a median would let them hide the others' noise.
        rms = math.sqrt(sum(x * x for x in ses) / len(ses))
        expected, basis = rms, "the spread of rewards within its steps"
    else:
        expected, basis = math.sqrt(p * (1 - p) / n), f"{n:.0f} attempts per step"
    return max(expected, floor, 1e-3), basis


def noisy_reward(v: View, c: C.NoisyReward, ctx: Ctx, active: bool, row: dict) -> Verdict | None:
    ys = v.values("reward_all", c.steps)
    noise = stats.step_noise(ys)
    n = v.recent("attempts") or v.recent("trained_attempts")
    base_noise = v.state.early_noise.get("reward_all")
    base_expected = v.state.early_noise.get("reward_se")
    if base_noise is None:  # short runs: the early baseline's values
        base_vals = v.base_values("reward_all")
        base_noise = stats.step_noise(base_vals) if len(base_vals) >= 5 else None
        if base_noise is not None and n is not None and n > 0:
            base_expected = expected_step_noise(base_vals, v.base_values("reward_se"), n)[0]
    if len(ys) < min(c.steps, 10) or any_none(noise, base_noise):
        return None
    if n is None or n <= 0:
        return None
    expected, basis = expected_step_noise(ys, v.values("reward_se", c.steps), n)
    # The early noise at today's level: sampling noise is largest mid-way, so a run
    # whose reward was near 0.5 early and sits near 0 or 1 now expects less noise now;
    # what the early rows had beyond their own sampling error is what it may keep.
    level = expected / base_expected if base_expected else 1.0
    early = max(base_noise * level, 1e-3)
    by_noise = ge(noise, c.k_expected * expected, active, ctx) and ge(
        noise, c.ratio * early, active, ctx
    )
    # A reward near its level on most steps and far from it on some (a strong policy
    # whose grader sometimes fails it wholesale): the robust step noise ignores such
    # steps by design, so count them against the larger of the expected error and the
    # early noise (a run always that noisy needs larger jumps).
    scale = max(expected, early)
    devs = stats.local_deviations(ys, c.crash_neighbours)
    jump = c.crash_k * scale * (ctx.hysteresis if active else 1.0)
    far = [d for d in devs if abs(d) >= jump]
    # Counted against the full window: a short history's one crash is not a share.
    by_crashes = len(far) >= c.crash_share * c.steps
    noisy = (
        f"reward moves {noise:.3f} step to step around its trend over the last "
        f"{len(ys)} steps, {noise / expected:.1f}x the {expected:.3f} expected from "
        f"{basis} and {noise / early:.1f}x its early noise at today's level"
    )
    if by_crashes and not by_noise:
        below = sum(d < 0 for d in far)
        noisy = (
            f"reward jumps at least {jump:.2f} off its local level on "
            f"{len(far)} of the last {len(ys)} steps ({below} below, "
            f"{len(far) - below} above; median jump {stats.median([abs(d) for d in far]):.2f}), "
            f"{c.crash_k:g}x the larger of the {expected:.3f} expected from {basis} and "
            f"its early noise at today's level, {early:.3f}"
        )
    return Verdict(
        by_noise or by_crashes,
        f"{noisy}: check the grader for nondeterminism and the batch for mixing task sources",
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
    if any_none(train, ev, widen) or span <= 0:
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
