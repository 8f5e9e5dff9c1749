"""Rules on what the policy writes: reward_too_fast, degenerate_outputs, entropy_collapse,
entropy_too_high, length_explosion, length_collapse.

Contract: as ``rules.RULES`` (see rlstream/health/rules.py).
"""

from __future__ import annotations

import math
from typing import NamedTuple

from rlstream.health import config as C
from rlstream.health import stats
from rlstream.health.state import View
from rlstream.health.verdict import Ctx, Verdict, any_none, cfg_get, ge, le


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
    if any_none(noise_b, noise_a, slope):
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


def _eval_transfer(v: View, steps: list[float], c: C.RewardTooFast) -> float | None:
    """How far the held-out score rose over the compared steps: its evals in the last
    ``short_steps`` against those in the ``long_steps`` before them (None without
    evals on both sides)."""
    if len(steps) < c.short_steps + c.long_steps:
        return None
    cut, start = steps[-c.short_steps], steps[-c.short_steps - c.long_steps]
    pts = eval_points(v)
    after = [y for x, y in pts if x >= cut]
    before = [y for x, y in pts if start <= x < cut]
    if not after or not before:
        return None
    return stats.median(after) - stats.median(before)


def _eval_followed(v: View, since: int, share_of_rise: float) -> bool:
    """Has the held-out score risen by `share_of_rise` from before `since` (the step the
    finding began) to after it? Then the new reward level is learning that transfers."""
    pts = eval_points(v)
    before = [y for x, y in pts if x < since]
    after = [y for x, y in pts if x >= since]
    if not before or not after:
        return False
    return stats.median(after) - stats.median(before) >= share_of_rise


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
    transfer = _eval_transfer(v, steps, c) if hits else None
    if transfer is not None:
        hits = [r for r in hits if transfer < c.eval_share * r.excess]
    climbing = bool(hits)
    shown = max(hits or rises, key=lambda r: r.excess / r.se)
    excess, se, noise = shown.excess, shown.se, shown.noise
    # Once the climb is over, the finding stays while reward holds its new level above
    # the level before the climb began, however long ago that was: the engine keeps
    # that level (`Verdict.level`) while the finding is active.
    alert = v.state.alerts.get("reward_too_fast")
    since = alert.since_step if alert is not None and active else None
    start = len(ys) - shown.short - c.long_steps
    earlier = stats.median(ys[max(start, 0) : len(ys) - shown.short]) if climbing else None
    held = alert.level if alert is not None and active else None
    now = stats.median(ys[-c.short_steps :])
    level = (
        held is not None
        and since is not None
        and now - held >= c.rise_min * ctx.hysteresis
        and not _eval_followed(v, since, c.eval_share * (now - held))
    )
    detail = (
        f"reward rose {excess:+.2f} over the last {shown.short} steps beyond its trend "
        f"({excess / se:.1f} standard errors; step noise {noise:.3f})"
        if climbing or not level
        else f"reward jumped from {held:.2f} before step {since} to {now:.2f} and stays there"
    )
    return Verdict(
        climbing or level,
        f"{detail}; faster than the run's history allows: inspect transcripts for reward hacking",
        level=earlier,
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


def eval_points(v: View) -> list[tuple[float, float]]:
    """(step, held-out score) of the run's kept evals: ``eval/heldout`` if the run has
    it, else its first eval name."""
    evals = v.state.evals
    if not evals:
        return []
    name = "heldout" if "heldout" in evals else sorted(evals)[0]
    return [(float(p[0]), p[1]) for p in evals[name] if p[1] is not None]


def learning(v: View, c: C.EntropyCollapse | C.LengthExplosion) -> tuple[bool | None, str]:
    """Is the policy getting better? The held-out score decides when there are at
    least six evals (latest three against first three kept); else reward against its
    baseline. None when neither can tell."""
    pts = [y for _, y in eval_points(v)]
    if len(pts) >= 6:
        rise = stats.median(pts[-3:]) - stats.median(pts[:3])
        return rise >= c.eval_rise_min, f"held-out score {rise:+.2f} since the first evals"
    r, base = v.recent("reward_all", 10), v.base("reward_all")
    if any_none(r, base):
        return None, ""
    return r - base >= c.reward_rise_min, f"reward {r - base:+.2f} since the baseline"


def _degenerating(v: View, c: C.EntropyCollapse, learns: bool | None) -> list[str]:
    """Signs that outputs degenerate. While the policy is learning, a sharper policy
    writes somewhat more alike: fewer distinct completions (attempts at a task converge
    on its answer) do not count, and repetition and n-gram diversity count only beyond
    what sharpening does (``learning_repetition_support``, ``learning_diversity_ratio``)."""
    rep_min = c.learning_repetition_support if learns else c.repetition_support
    div_max = c.learning_diversity_ratio if learns else c.diversity_ratio
    signs = []
    checks = (
        ("repetition", lambda x, b: x - b >= rep_min, "repetition {x:.2f} (baseline {b:.2f})"),
        ("len_mean", lambda x, b: x <= c.length_ratio * b, "length {x:.0f} (baseline {b:.0f})"),
        ("diversity", lambda x, b: x <= div_max * b, "diversity {x:.2f} (baseline {b:.2f})"),
        ("distinct", lambda x, b: x <= c.support_distinct_ratio * b, "distinct completions {x:.0%} (baseline {b:.0%})"),
    )  # fmt: skip
    for name, bad, text in checks:
        x, b = v.recent(name), v.base(name)
        if any_none(x, b) or (learns and name == "distinct"):
            continue
        if bad(x, b):
            signs.append(text.format(x=x, b=b))
    return signs


def entropy_collapse(
    v: View, c: C.EntropyCollapse, ctx: Ctx, active: bool, row: dict
) -> Verdict | None:
    ent, ent_base = v.recent("entropy"), v.base("entropy")
    rep, rep_base = v.recent("repetition"), v.base("repetition")
    dist, dist_base = v.recent("distinct"), v.base("distinct")
    by_text = (
        not any_none(rep, rep_base, dist, dist_base)
        and ge(rep - rep_base, c.repetition_rise, active, ctx)
        and le(dist, c.distinct_ratio * dist_base, active, ctx)
    )
    # A fall is measured from the baseline's peak: a policy that collapsed within its
    # first updates has a baseline median already near (or at) zero.
    peak = v.base_peak("entropy")
    has_entropy = ent is not None and ent_base is not None and peak is not None and peak > 0
    if not has_entropy and any_none(rep, rep_base, dist, dist_base):
        return None
    parts, why = [], ""
    by_entropy = False
    if has_entropy:
        parts.append(
            f"entropy {ent:.3f} nats/token over the last {v.recent_steps} steps "
            f"({ent_base:.3f} at baseline, {peak:.3f} at its highest)"
        )
        toward_zero = le(ent, c.zero_ratio * peak, active, ctx)
        sharp = le(ent, c.entropy_ratio * ent_base, active, ctx)
        better, how = learning(v, c)
        signs = _degenerating(v, c, better)
        # Entropy alone condemns only a fall toward zero; a sharper policy that is
        # learning, with outputs as long and diverse as before, is sharpening.
        by_entropy = toward_zero or (sharp and (bool(signs) or better is False))
        if signs:
            why = "; " + ", ".join(signs)
        elif sharp and how:
            why = f"; {how}"
    if rep is not None and rep_base is not None and not by_entropy:
        parts.append(f"repetition {rep:.2f} (baseline {rep_base:.2f})")
    if dist is not None and dist_base is not None and not by_entropy:
        parts.append(f"distinct completions {dist:.0%} (baseline {dist_base:.0%})")
    return Verdict(
        by_entropy or by_text,
        "; ".join(parts) + why + ": the policy is collapsing onto few outputs; lower the "
        "learning rate, add an entropy bonus or KL penalty",
    )


def entropy_too_high(
    v: View, c: C.EntropyTooHigh, ctx: Ctx, active: bool, row: dict
) -> Verdict | None:
    ent, base = v.recent("entropy"), v.base("entropy")
    if any_none(ent, base):
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
    if any_none(ln, base) or base <= 0:
        return None
    cap = cfg_get(ctx.config, "sampling.max_tokens")
    trunc, trunc_base = v.recent("truncated"), v.base("truncated")
    slope = v.trend("len_mean", ctx.trend_steps)
    rising = active or slope is None or slope > 0  # needed to start, not to stay
    trunc_rise = (
        trunc is not None
        and trunc_base is not None
        and ge(trunc - trunc_base, c.truncated_rise, active, ctx)
    )
    if cap or trunc_rise:
        # Truncation rising is the cap showing itself where the files do not name it
        # (verl, TRL and prime-rl logs carry a clip or truncation share, not the cap).
        near_cap = trunc_rise or bool(cap and ge(ln, c.cap_frac * cap, active, ctx))
        holds = ge(ln, c.ratio * base, active, ctx) and near_cap and rising
    else:
        # No cap to run into: longer responses while the policy learns are expected.
        holds = ge(ln, c.ratio_no_cap * base, active, ctx) and rising
        holds = holds and learning(v, c)[0] is not True
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
    if any_none(ln, base) or base < c.min_baseline_tokens:
        return None
    return Verdict(
        le(ln, c.ratio * base, active, ctx),
        f"mean completion length {ln:.1f} tokens over the last {v.recent_steps} steps, "
        f"{ln / base:.0%} of its baseline {base:.1f}: responses are shrinking; check for "
        "a reward that favours short answers or early stops",
    )
