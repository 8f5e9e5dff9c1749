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
