"""Every code fires on its synthetic pathology, and nothing above info on healthy runs."""

from __future__ import annotations

import math

import pytest
from health_synth import CTX, PATHOLOGIES, fold_all, rows

from rlstream.health import CODES, RunContext, check_time, findings, run_status
from rlstream.health.state import FIRING, AlertState

ONSET = 60
# Steps the rule may take after onset to start (pending); codes present from the
# start are checked separately.
SINCE_RANGE = {code: (ONSET, ONSET + 25) for code in PATHOLOGIES}
SINCE_RANGE["tasks_too_hard"] = (0, 15)
SINCE_RANGE["tasks_too_easy"] = (0, 15)
SINCE_RANGE["heldout_gap"] = (ONSET, ONSET + 40)  # evals only every 10 steps
SINCE_RANGE["noisy_reward"] = (ONSET, ONSET + 40)  # MAD over 40 steps: half must be noisy


def _firing(state, code):
    return [f for f in findings(state) if f.code == code and f.state == FIRING]


def test_every_code_has_a_rule_or_is_time_based_or_judges_peers():
    # unlike_peers compares a run with its cohort (rlstream.pipeline.cohorts);
    # transcript_hack_flags reads the scanners' shares (tests/health/test_transcript_flags.py).
    extra = {"stalled", "unlike_peers", "transcript_hack_flags"}
    assert set(PATHOLOGIES) | extra == set(CODES)
    assert CODES[0] == "no_learning_signal" and CODES[-2:] == ("stalled", "unlike_peers")


@pytest.mark.parametrize("code", sorted(PATHOLOGIES))
def test_code_fires_on_its_pathology(code):
    # reward_too_fast holds while the pre-jump level is inside the history window.
    n = 100 if code == "reward_too_fast" else 130
    state, transitions = fold_all(rows(n, code, onset=ONSET))
    fired = _firing(state, code)
    assert fired, f"{code} is not firing at the end; findings: {findings(state)}"
    lo, hi = SINCE_RANGE[code]
    assert lo <= fired[0].since_step <= hi, fired[0]
    assert any(ch.isdigit() for ch in fired[0].message)
    # One clean episode: pending, then firing (then maybe a severity change), no flapping.
    mine = [(t.from_state, t.to_state) for t in transitions if t.code == code]
    mine = [m for m in mine if m != (FIRING, FIRING)]
    assert mine == [("inactive", "pending"), ("pending", FIRING)], mine


@pytest.mark.parametrize("seed", range(6))
def test_healthy_noisy_runs_raise_nothing_above_info(seed):
    state, transitions = fold_all(rows(300, None, seed=seed))
    loud = [t for t in transitions if t.severity != "info" and t.to_state == FIRING]
    assert loud == [], loud
    assert run_status(state, CTX) == "healthy"


def test_degenerate_outputs_fires_while_reward_looks_healthy():
    rs = rows(130, "degenerate_outputs", onset=ONSET)
    assert rs[-1]["reward_mean"] > 0.4  # reward curve untouched
    state, _ = fold_all(rs)
    assert _firing(state, "degenerate_outputs")[0].severity == "critical"
    assert run_status(state, CTX) == "critical"


def test_entropy_collapse_uses_text_figures_when_token_columns_are_null():
    rs = rows(130, "entropy_collapse", onset=ONSET)
    for r in rs:  # trace = "samples": no entropy anywhere
        r["entropy_estimate"] = r["reported_entropy_estimate"] = None
    state, _ = fold_all(rs)
    assert _firing(state, "entropy_collapse")


def test_kl_falls_back_to_reported_metric_when_recomputed_is_null():
    rs = rows(130, "mismatch_kl_rising", onset=ONSET)
    for r in rs:
        r["mismatch_kl"] = None
    state, _ = fold_all(rs)
    assert _firing(state, "mismatch_kl_rising")


def test_unusable_streak_uses_the_runs_own_limit():
    rs = rows(80, "unusable_groups_streak", onset=ONSET)
    state, _ = fold_all(rs)
    fired = _firing(state, "unusable_groups_streak")
    assert fired and "max_consecutive_unusable_groups = 32" in fired[0].message
    assert fired[0].severity == "critical"  # 4 groups/step * 20 steps >> 0.8 * 32
    loose = RunContext("r", {**CTX.config, "training": {"max_consecutive_unusable_groups": 10_000}})
    state, _ = fold_all(rs, ctx=loose)
    assert not _firing(state, "unusable_groups_streak")


def test_no_learning_signal_message_cites_numbers():
    state, _ = fold_all(rows(100, "no_learning_signal", onset=ONSET))
    msg = _firing(state, "no_learning_signal")[0].message
    assert "within-group reward std 0.004" in msg and "0.12" in msg


def test_stalled_uses_the_runs_step_interval():
    rs = rows(40)  # steps about 30 s apart
    state, _ = fold_all(rs)
    last = rs[-1]["time"]
    same, tr = check_time(state, last + 100, None, CTX)
    assert tr == [] and not _firing(same, "stalled")
    stalled, tr = check_time(state, last + 200, None, CTX)
    assert [t.to_state for t in tr] == ["firing"]
    assert run_status(stalled, CTX) == "stalled"
    assert "median step interval of 30" in _firing(stalled, "stalled")[0].message
    # A recent heartbeat means the run is alive.
    alive, tr = check_time(state, last + 200, last + 150, CTX)
    assert tr == [] and run_status(alive, CTX) == "healthy"
    # Finished runs are never stalled, and finishing resolves a stall.
    done = RunContext(CTX.run_id, CTX.config, True)
    _, tr = check_time(state, last + 10_000, None, done)
    assert tr == []
    resolved, tr = check_time(stalled, last + 10_000, None, done)
    assert [t.to_state for t in tr] == ["resolved"]
    assert run_status(resolved, done) == "finished"


def test_new_step_resolves_stalled():
    from health_synth import fold_step

    rs = rows(41)
    state, _ = fold_all(rs[:40])
    state, _ = check_time(state, rs[39]["time"] + 500, None, CTX)
    assert _firing(state, "stalled")
    state, tr = fold_step(state, rs[40], CTX)
    assert ("stalled", "resolved") in {(t.code, t.to_state) for t in tr}


def test_run_status_precedence():
    # critical > warning > stalled > finished > healthy; info never changes it.
    state, _ = fold_all(rows(130, "length_collapse", onset=ONSET))
    assert run_status(state, CTX) == "warning"
    done = RunContext(CTX.run_id, CTX.config, True)
    assert run_status(state, done) == "warning"  # finishing does not hide a warning
    crit, _ = fold_all(rows(130, "degenerate_outputs", onset=ONSET))
    assert run_status(crit, CTX) == "critical"
    assert run_status(crit, done) == "critical"
    info, _ = fold_all(rows(130, "tasks_mastered", onset=ONSET))
    assert [f.severity for f in findings(info) if f.code == "tasks_mastered"] == ["info"]
    info, _ = fold_all(rows(130))  # healthy, plus one firing info finding
    info.alerts["tasks_mastered"] = AlertState(FIRING, 100, "info", "mastered")
    assert run_status(info, CTX) == "healthy"
    assert run_status(info, done) == "finished"
    # A warning outranks stalled; stalled outranks healthy.
    last = 1000.0 + 130 * 30.0
    warn_stalled, _ = check_time(state, last + 1e5, None, CTX)
    assert _firing(warn_stalled, "stalled") and run_status(warn_stalled, CTX) == "warning"
    crit_stalled, _ = check_time(crit, last + 1e5, None, CTX)
    assert _firing(crit_stalled, "stalled") and run_status(crit_stalled, CTX) == "critical"
    info_stalled, _ = check_time(info, last + 1e5, None, CTX)
    assert run_status(info_stalled, CTX) == "stalled"


def test_reward_recovering_from_a_dip_is_not_too_fast():
    # Every environment of a real run dipped together for ~16 steps (an outage) and
    # came back to where it was: a return to an earlier level is not a climb.
    rs = rows(200)
    for r in rs[100:116]:
        r["reward_mean"] = r["reward_mean_with_unusable"] = 0.25
    _, transitions = fold_all(rs)
    assert not [t for t in transitions if t.code == "reward_too_fast"]


def test_degenerate_outputs_fires_on_a_hack_present_from_the_first_step():
    # No clean baseline: one completion answers every task from step 0.
    rs = rows(60)
    for r in rs:
        r["top_completion_task_share"] = 1.0
    state, _ = fold_all(rs)
    assert _firing(state, "degenerate_outputs")
    few = rows(60)
    for r in few:  # two tasks per step: sharing one answer is weak evidence
        r["top_completion_task_share"], r["groups"] = 1.0, 2
    state, _ = fold_all(few)
    assert not _firing(state, "degenerate_outputs")


def test_no_learning_signal_after_a_hard_start_that_learned():
    # Hard tasks at first (little spread, most groups without variance), then the run
    # learns (spread, mixed groups), then spread collapses while reward is still low:
    # the early baseline alone would say "never had a signal".
    rs = rows(160)
    for r in rs:
        i = r["step"]
        hard, learning = i < 40, 40 <= i < 100
        r["reward_group_std_mean_all"] = 0.03 if hard else 0.3 if learning else 0.0
        r["groups_no_variance"] = 6 if hard else 1 if learning else 8
        r["reward_mean_with_unusable"] = r["reward_mean"] = 0.05 if hard else 0.3
    state, _ = fold_all(rs)
    fired = _firing(state, "no_learning_signal")
    assert fired and 100 <= fired[0].since_step <= 110, findings(state)
    assert "(it had 0.300)" in fired[0].message
    # A run hard from start to end never had a signal: tasks_too_hard, not this.
    flat = rows(160)
    for r in flat:
        r["reward_group_std_mean_all"], r["groups_no_variance"] = 0.03, 7
        r["reward_mean_with_unusable"] = r["reward_mean"] = 0.05
    state, _ = fold_all(flat)
    assert not _firing(state, "no_learning_signal")
    assert _firing(state, "tasks_too_hard")


def test_reward_too_fast_weighs_the_quieter_level_after_a_jump():
    # A noisy mid-way reward (binomial noise is largest near 0.5) jumps to a quiet
    # level near 1: the rise is 0.3, about twice the step noise before it.
    import random

    rng = random.Random(7)
    rs = rows(140)
    for r in rs:
        level, sd = (0.55, 0.16) if r["step"] < 100 else (0.9, 0.04)
        r["reward_mean"] = r["reward_mean_with_unusable"] = _clip01(rng.gauss(level, sd))
    state, _ = fold_all(rs)
    fired = _firing(state, "reward_too_fast")
    assert fired and 100 <= fired[0].since_step <= 115, findings(state)
    # The same noise without the jump stays quiet.
    for r in rs[100:]:
        r["reward_mean"] = r["reward_mean_with_unusable"] = _clip01(rng.gauss(0.55, 0.16))
    _, transitions = fold_all(rs)
    assert not [t for t in transitions if t.code == "reward_too_fast"]


def _clip01(x):
    return min(1.0, max(0.0, x))


def _trained_pattern(rs, trained):
    """Set each row's trained groups (of GROUPS = 4); the rest are no_variance."""
    for r, t in zip(rs, trained, strict=True):
        r["groups_trained"], r["groups_no_variance"] = t, 4 - t
    return rs


def test_steps_to_streak():
    from rlstream.health.rules import steps_to_streak

    # (share^-L - 1) / (1 - share) groups: (4 - 1) / 0.5 = 6 groups, 3 steps of 2.
    assert steps_to_streak(0.5, 2, 2) == pytest.approx(3.0)
    assert steps_to_streak(1.0, 32, 4) == 8.0  # every group unusable: L / G steps
    assert steps_to_streak(0.0, 32, 4) == math.inf
    assert steps_to_streak(0.8, 32, 4) == pytest.approx(1576.5, abs=0.1)


def test_unusable_streak_quiet_on_a_mastered_run_that_reaches_half_the_limit_by_chance():
    # Reward near 1: three groups in four unusable, and once five steps with none
    # trained: a streak of 21.5 of 32 (the true streak too, not an estimate error; the
    # old rule fired at 17.5 and 21.5), at an unusable share of 78 % over the last 40
    # steps, where a streak of 32 comes only about once every 3200 steps.
    trained = [1] * 100 + [0] * 5 + [1] * 20
    state, transitions = fold_all(_trained_pattern(rows(125), trained))
    assert state.unusable_streak == pytest.approx(1.5)
    assert [t for t in transitions if t.code == "unusable_groups_streak"] == []


def test_unusable_streak_fires_and_stays_while_most_groups_are_unusable():
    # One step in five trains a group (share 19/20 = 95 %): a streak of 32 is expected
    # every 21 steps. The streak reaches 17.5 every fifth step and falls back to 1.5
    # when a group trains; the finding fires once and stays firing.
    trained = [1] * 60 + [1, 0, 0, 0, 0] * 16
    state, transitions = fold_all(_trained_pattern(rows(140), trained))
    mine = [(t.from_state, t.to_state) for t in transitions if t.code == "unusable_groups_streak"]
    assert mine == [("inactive", "pending"), ("pending", FIRING)]
    fired = _firing(state, "unusable_groups_streak")[0]
    assert state.unusable_streak == pytest.approx(17.5)
    assert fired.severity == "warning"
    assert "95% of the groups of the last 40 steps were unusable" in fired.message
    assert "a streak of 32 comes every 21 steps" in fired.message


def test_unusable_streak_sudden_collapse_fires_before_the_limit():
    # Every group unusable from step 60 (4 a step): the trainer would stop at step 67.
    # The share of the last 40 steps is still low, which makes the streak far too long
    # to be chance: pending at 62 (streak 12.x), firing at 63.
    _, transitions = fold_all(rows(80, "unusable_groups_streak", onset=ONSET))
    mine = [(t.to_state, t.step) for t in transitions if t.code == "unusable_groups_streak"]
    assert mine[:2] == [("pending", 62), (FIRING, 63)]


def test_tasks_too_hard_with_partial_credit():
    # Partial credit: a few attempts score 1/4, so only about 60 % of groups are
    # all-equal, but the spread over every group stays near zero with reward near 0.
    rs = rows(80)
    for k, r in enumerate(rs):
        r["groups"], r["groups_no_variance"] = 8, 5 if k % 2 else 4  # 0.5-0.63
        r["groups_trained"] = 8 - r["groups_no_variance"]
        r["reward_mean_with_unusable"], r["reward_mean"] = 0.06, 0.09
        r["reward_group_std_mean_all"] = 0.04
    state, _ = fold_all(rs)
    fired = _firing(state, "tasks_too_hard")
    assert fired and "within-group reward std 0.040" in fired[0].message
    # The same shares on a hard start that has a real spread: not too hard.
    for r in rs:
        r["reward_group_std_mean_all"] = 0.15
    state, _ = fold_all(rs)
    assert not _firing(state, "tasks_too_hard")


def test_reward_too_fast_quiet_when_the_heldout_score_follows():
    # The same jump as above, but the held-out score jumps with it: learning that
    # transfers is not a shortcut. With the held-out score flat, it fires.
    import random

    def run(follow: bool):
        rng = random.Random(7)
        rs = rows(140)
        for r in rs:
            late = r["step"] >= 100
            level, sd = (0.9, 0.04) if late else (0.55, 0.16)
            r["reward_mean"] = r["reward_mean_with_unusable"] = _clip01(rng.gauss(level, sd))
            if r["reported_eval"]:
                r["reported_eval"] = {"heldout": 0.75 if late and follow else 0.45}
        return fold_all(rs)[0]

    assert _firing(run(follow=False), "reward_too_fast")
    assert not _firing(run(follow=True), "reward_too_fast")


def test_entropy_collapse_inside_the_baseline_window_still_fires():
    # Entropy 2.2 nats at the first baseline steps, near 0 by step 6: the baseline's
    # median is already collapsed, but its peak is where the policy started.
    rs = rows(60)
    for r in rs:
        s = r["step"]
        r["entropy_estimate"] = r["reported_entropy_estimate"] = 2.2 if s < 5 else 0.02
    state, _ = fold_all(rs)
    fired = _firing(state, "entropy_collapse")
    assert fired and fired[0].since_step < 20, findings(state)
    assert "2.200 at its highest" in fired[0].message
    # A baseline whose median is exactly zero (deterministic from step 5) is judged
    # from its peak too.
    for r in rs:
        s = r["step"]
        r["entropy_estimate"] = r["reported_entropy_estimate"] = 2.2 if s < 5 else 0.0
    state, _ = fold_all(rs)
    assert _firing(state, "entropy_collapse"), findings(state)
    # The same run without the early peak (entropy low and flat from the start) is a
    # run whose policy is just sharp: no fall to measure.
    for r in rs:
        r["entropy_estimate"] = r["reported_entropy_estimate"] = 0.02
    state, _ = fold_all(rs)
    assert not _firing(state, "entropy_collapse")
