"""Which rules a run's figures can evaluate (rlstream.health.evaluable)."""

from __future__ import annotations

from rlstream.health.evaluable import NEEDS, config_figures, not_evaluable, row_figures
from rlstream.health.rules import RULES


def test_every_rule_says_what_it_needs():
    assert set(NEEDS) == {*RULES, "stalled"}


def test_a_rule_is_evaluable_once_one_of_its_figure_sets_appeared():
    assert "no_learning_signal" in not_evaluable({"reward_all"})
    assert "no_learning_signal" not in not_evaluable({"reward_all", "no_variance_frac"})
    assert "no_learning_signal" not in not_evaluable({"reward_all", "group_std"})
    assert not_evaluable(set().union(*(a for alts in NEEDS.values() for a in alts))) == []


def test_row_figures_from_a_steps_row():
    row = {
        "time": 1.0,
        "reported_eval": {"heldout": 0.5},
        "reported_reward_mean_with_unusable": 0.4,
        "reported_truncated_frac": 0.1,
        "reported_completion_len_mean": 20.0,
        "mismatch_kl": None,
    }
    figs = row_figures(row)
    assert {"time", "eval", "reward_all", "truncated", "len_mean"} <= figs
    assert "kl" not in figs and "pairs" not in figs
    assert not_evaluable(figs) == sorted(
        c for c in NEEDS if c not in {"stalled", "heldout_gap", "reward_too_fast", "noisy_reward",
                                     "out_of_room", "length_explosion", "length_collapse"}
    )  # fmt: skip
    assert config_figures({"training": {"max_consecutive_unusable_groups": 24}}) == {
        "unusable_limit"
    }
    assert config_figures({}) == set()


def test_judgement_counts_the_enabled_rules_and_the_steps_the_rules_need():
    import dataclasses

    from rlstream.health.config import DEFAULT_RULES, HistoryConfig
    from rlstream.health.evaluable import judgement

    codes = [c for c in NEEDS if c != "stalled"]  # 21: stalled judges liveness
    assert len(codes) == 21
    # 13 of 21 evaluable (60 %, rounded up) is enough; 12 is not.
    assert judgement(codes[:8], 100) == ("judged", None)
    assert judgement(codes[:9], 100) == (
        "insufficient",
        "12 of 21 rules evaluable on its files, at least 13 needed (not_evaluable names the others)",
    )
    # `stalled` not evaluable (no step times) does not count against a run.
    assert judgement(["stalled"], 100) == ("judged", None)
    # Steps: warm-up 2 + baseline 10 + recent 5 = 17; reward_too_fast's 60 rows, then
    # its 3 evaluations (for_steps) before it can fire: 62.
    assert judgement([], 16) == ("insufficient", "16 final steps, the rules need 17")
    assert judgement([], 17) == (
        "judged",
        "not yet judged at 17 final steps: reward_too_fast (needs 62)",
    )
    assert judgement([], 60) == (
        "judged",
        "not yet judged at 60 final steps: reward_too_fast (needs 62)",
    )
    assert judgement([], 62) == ("judged", None)
    assert judgement(["reward_too_fast"], 17) == ("judged", None)
    once = dataclasses.replace(
        DEFAULT_RULES,
        reward_too_fast=dataclasses.replace(DEFAULT_RULES.reward_too_fast, for_steps=1),
    )
    assert (
        judgement([], 59, once)[1] == "not yet judged at 59 final steps: reward_too_fast (needs 60)"
    )
    assert judgement([], 60, once) == ("judged", None)
    # A rules TOML that shortens the baseline or disables rules changes both counts.
    short = dataclasses.replace(DEFAULT_RULES, history=HistoryConfig(baseline_steps=4))
    assert judgement([], 11, short) == (
        "judged",
        "not yet judged at 11 final steps: reward_too_fast (needs 62)",
    )
    off = dataclasses.replace(
        DEFAULT_RULES,
        **{c: dataclasses.replace(getattr(DEFAULT_RULES, c), enabled=False) for c in codes[:5]},
    )
    # 16 enabled, 10 needed: 10 of them evaluable is enough.
    assert judgement(codes[:11], 100, off)[0] == "judged"
    assert judgement(codes[:12], 100, off)[1].startswith("9 of 16 rules evaluable")


def test_reward_too_fast_can_fire_first_at_the_step_judgement_names():
    """`needs 62` is when the rule can first fire: a jump at step 50 is seen from row 60
    (its min_rows) and fires at the third evaluation, step 61 (row 62), not before."""
    from health_synth import fold_all, rows

    from rlstream.health import findings
    from rlstream.health.evaluable import steps_needed

    n = steps_needed("reward_too_fast")
    assert n == 62
    state, tr = fold_all(rows(n, "reward_too_fast", onset=50))
    fired = [t.step for t in tr if t.code == "reward_too_fast" and t.to_state == "firing"]
    assert fired == [n - 1]
    state, _ = fold_all(rows(n - 1, "reward_too_fast", onset=50))
    assert not [f for f in findings(state) if f.code == "reward_too_fast" and f.state == "firing"]
