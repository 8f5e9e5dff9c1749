"""out_of_room's turn-limit share when a step names no max_turns ending.

Loops counts episode labels where they occur (`rollout/termination_reason/<label>`,
docs/run-format.md): a step none of whose attempts hit the turn limit has no
`max_turns` key at all. Such a step that counts other endings had no turn-limit
ending, so its share is 0; otherwise the rule's early baseline was built from the
first steps that had one, after the agent had started to run out of turns.
"""

from __future__ import annotations

from health_synth import ATTEMPTS, fold_all, rows

from rlstream.health import findings
from rlstream.health.figures import extract
from rlstream.health.state import FIRING

ONSET = 70


def test_a_step_that_counts_endings_without_max_turns_had_none():
    row = {"attempts": 16, "rollout_metadata": {"termination_reason/stop": 16}}
    assert extract(row)["max_turns_rate"] == 0.0
    row = {"attempts": 16, "reported_other": {"rollout/termination_reason/length": 2}}
    assert extract(row)["max_turns_rate"] == 0.0
    row = {"attempts": 16, "rollout_metadata": {"termination_reason/max_turns": 4}}
    assert extract(row)["max_turns_rate"] == 0.25
    # A step that counts no endings says nothing about the turn limit.
    assert "max_turns_rate" not in extract({"attempts": 16, "rollout_metadata": {"turns": 2}})


def _as_loops_writes(rs: list[dict]) -> list[dict]:
    """Each step's endings counted as Loops does: no attempt ends at the turn limit
    before ONSET, and a label no attempt had is absent."""
    for r in rs:
        meta = r["rollout_metadata"]
        if r["step"] < ONSET:
            meta["termination_reason/max_turns"] = 0
        hit = meta.pop("termination_reason/max_turns")
        if hit:
            meta["termination_reason/max_turns"] = hit
        meta["termination_reason/stop"] = ATTEMPTS - hit
    return rs


def test_fires_when_the_turn_limit_was_never_named_before_the_onset():
    rs = _as_loops_writes(rows(140, "out_of_room", onset=ONSET))
    assert all("termination_reason/max_turns" not in r["rollout_metadata"] for r in rs[:ONSET])
    state, _ = fold_all(rs)
    fired = [f for f in findings(state) if f.code == "out_of_room" and f.state == FIRING]
    assert fired, findings(state)
    assert ONSET <= fired[0].since_step <= ONSET + 20, fired[0]
    assert "(baseline 0%)" in fired[0].message, fired[0]


def test_healthy_steps_without_turn_limit_endings_stay_quiet():
    for seed in range(3):
        _, transitions = fold_all(_as_loops_writes(rows(200, None, seed=seed)))
        assert not [t for t in transitions if t.code == "out_of_room"], transitions
