"""Rules on the machinery around the policy: rollout_failure_burst,
grading_failure_burst, out_of_room, mismatch_kl_rising, low_ess, stale_rollouts.

Contract: as ``rules.RULES`` (see rlstream/health/rules.py).
"""

from __future__ import annotations

import math
from collections.abc import Callable

from rlstream.health import config as C
from rlstream.health.state import View
from rlstream.health.verdict import Ctx, Verdict, any_none, cfg_get, ge, le


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
    if any_none(now, base, slope):
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
    if any_none(kl, base):
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


def pooled_ess(ess: list[float]) -> float | None:
    """The ESS of several steps' tokens together, (ΣΣw)² / (N ΣΣw²), each step's
    weights normalised to mean 1 (a batch's correction is self-normalised) and each
    step counted as n tokens alike (one update each; a reported ESS comes without token
    counts): step i then holds Σw = n and Σw² = n / ESS_i, so the pool of k steps is
    k / Σ 1/ESS_i, their harmonic mean. None without steps."""
    if not ess or min(ess) <= 0:
        return None
    return min(1.0, len(ess) / sum(1.0 / e for e in ess))


def recent_ess(v: View, c: C.LowEss) -> float | None:
    """The ESS low_ess judges: the last ``c.steps`` rows' tokens pooled."""
    return pooled_ess(v.values("ess", c.steps))


def low_ess(v: View, c: C.LowEss, ctx: Ctx, active: bool, row: dict) -> Verdict | None:
    k = c.steps
    ess = recent_ess(v, c)
    base = pooled_ess(v.base_values("ess"))
    typical = v.recent("ess", k)
    if any_none(ess, base, typical) or len(v.base_values("ess")) < v.baseline_min:
        return None
    short, base_short = 1.0 - ess, max(1.0 - base, 0.01)
    low = sum(le(x, c.ess_max, active, ctx) for x in v.values("ess", k))
    holds = (
        le(ess, c.ess_max, active, ctx)
        and ge(short, c.ratio * base_short, active, ctx)
        and low >= c.low_steps_min
    )
    sev = "critical" if typical <= c.critical_ess else None
    return Verdict(
        holds,
        f"importance-weight ESS {ess:.2f} over the tokens of the last {k} steps "
        f"(baseline {base:.2f}; {low} of those steps at or below {c.ess_max:.2f}, median "
        f"step {typical:.2f}): a few tokens dominate the off-policy correction; check "
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
