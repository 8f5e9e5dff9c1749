"""length_explosion where the run's files do not name the cap (verl, TRL, prime-rl
logs carry a clip or truncation share, not `sampling.max_tokens`): a rising truncation
share is the cap showing itself, so a runaway fires even while the held-out score
improves; lengths growing without truncation while the policy learns still do not."""

from __future__ import annotations

from rlstream.health import RunContext
from tests.health.health_synth import CONFIG, fold_all, rows

NO_CAP = {k: v for k, v in CONFIG.items() if k != "sampling"}
CTX = RunContext("run-test", NO_CAP, False)


def _firing(transitions, code):
    return [t.step for t in transitions if t.code == code and t.to_state == "firing"]


def test_truncation_rising_stands_for_the_cap():
    run = rows(140, "length_explosion", onset=60, seed=3)
    # The held-out score rises in these rows: without truncation, growth is learning.
    assert run[130]["reported_eval"]["heldout"] - run[0]["reported_eval"]["heldout"] > 0.1
    _, tr = fold_all(run, CTX)
    steps = _firing(tr, "length_explosion")
    assert steps and 60 <= steps[0] <= 100, steps


def test_growth_without_truncation_while_learning_is_not_a_runaway():
    run = rows(140, "length_explosion", onset=60, seed=3)
    for r in run:
        r["truncated_frac"] = 0.03  # the cap never reached
    _, tr = fold_all(run, CTX)
    assert _firing(tr, "length_explosion") == []
