"""A finding whose evidence another finding explains does not fire beside it
(`rules.EXPLAINED_BY`): `tasks_mastered` ("consider stopping or moving to harder
tasks") never stands beside a failure burst or degenerate outputs; beside a reward
hack (`reward_too_fast`, `transcript_hack_flags`) it says to check for the hack
first instead (`rules_signal.MASTERY_DOUBTS`)."""

from __future__ import annotations

import pytest

from rlstream.fleet.read import read_latest
from rlstream.health import findings
from rlstream.health.rules import EXPLAINED_BY
from rlstream.pipeline.local import analyze_local
from rlstream.simulate import SimConfig, simulate
from tests.formats.trainer_runs import trainer_run
from tests.health.health_synth import PATHOLOGIES, fold_all, rows
from tests.outputs import out_sql

ONSET = 60


def _fired(transitions) -> set[str]:
    return {t.code for t in transitions if t.to_state == "firing"}


@pytest.mark.parametrize("other", EXPLAINED_BY["tasks_mastered"])
def test_mastered_tasks_do_not_fire_beside_what_explains_them(other):
    both = [PATHOLOGIES[other](r["step"], ONSET, r) for r in rows(160, "tasks_mastered", ONSET)]
    _, tr = fold_all(both)
    fired = _fired(tr)
    assert other in fired, f"{other} must still fire ({sorted(fired)})"
    assert "tasks_mastered" not in fired
    # Alone, the same mastered tasks still fire (recall kept).
    _, alone = fold_all(rows(160, "tasks_mastered", ONSET))
    assert "tasks_mastered" in _fired(alone)


def test_a_simulated_degenerate_run_gets_no_advice_to_stop(tmp_path):
    """The simulator's runs (another writer): degenerate outputs at a high reward."""
    simulate(
        tmp_path / "runs",
        SimConfig(runs=2, steps=90, seed=41, scenarios=("degenerate_outputs",), groups=4),
    )
    analyze_local([str(tmp_path / "runs")], str(tmp_path / "out"))
    fired = out_sql(
        tmp_path / "out",
        "select run_id, code from alerts where to_state = 'firing' order by run_id, code",
    )
    by_run: dict[str, set[str]] = {}
    for run, code in fired:
        by_run.setdefault(run, set()).add(code)
    assert by_run and all("degenerate_outputs" in c for c in by_run.values()), by_run
    assert not any("tasks_mastered" in c for c in by_run.values()), by_run


def test_findings_list_keeps_the_explaining_finding():
    both = [
        PATHOLOGIES["rollout_failure_burst"](r["step"], ONSET, r)
        for r in rows(160, "tasks_mastered", ONSET)
    ]
    state, _ = fold_all(both)
    codes = {f.code for f in findings(state)}
    assert "rollout_failure_burst" in codes and "tasks_mastered" not in codes


def test_a_reward_hack_whose_reward_holds_stays_firing_to_the_end():
    """Synthetic rows: the jump at step 60 holds for 140 steps, far past the window."""
    state, tr = fold_all(rows(200, "reward_too_fast", ONSET))
    seen = [(t.to_state, t.step) for t in tr if t.code == "reward_too_fast"]
    assert [s for s, _ in seen] == ["pending", "firing"], seen
    assert [f.state for f in findings(state) if f.code == "reward_too_fast"] == ["firing"]


STOP = "consider stopping"


def _flagged(i, onset, row):
    """Scanners flag a fifth of the high-reward attempts from onset (docs/health.md,
    transcript_hack_flags: a median share >= 2 % with 2 flagged attempts in 3 steps)."""
    if i < onset:
        return {**row, "flagged_frac": 0.0, "flagged_high_frac": 0.0, "flagged_high_n": 0}
    return {**row, "flagged_frac": 0.15, "flagged_high_frac": 0.2, "flagged_high_n": 3}


def _mastered_message(state) -> str:
    (f,) = [f for f in findings(state) if f.code == "tasks_mastered"]
    assert f.state == "firing"
    return f.message


def test_mastery_beside_a_hack_says_to_check_the_hack_not_to_stop():
    # The synthetic mastery climbs 0.6 -> 0.97 in 20 steps: reward_too_fast fires on it
    # too (a fast honest climb looks like a hack), so tasks_mastered still fires...
    state, tr = fold_all(rows(160, "tasks_mastered", ONSET))
    assert {"tasks_mastered", "reward_too_fast"} <= _fired(tr)
    msg = _mastered_message(state)
    assert STOP not in msg and "the tasks look mastered, but" in msg
    assert "(reward_too_fast): read the transcripts" in msg
    # ...and with flagged transcripts it says to fix the grader first.
    flagged = [_flagged(r["step"], ONSET, r) for r in rows(160, "tasks_mastered", ONSET)]
    state, tr = fold_all(flagged)
    assert "transcript_hack_flags" in _fired(tr)
    assert "(transcript_hack_flags): fix the grader first" in _mastered_message(state)


def _hack_ends_firing_without_advice_to_stop(out, runs: int) -> None:
    got = out_sql(
        out,
        "select run_id, to_state from alerts where code = 'reward_too_fast' order by run_id, step",
    )
    last: dict[str, str] = {}
    for run, to_state in got:
        last[run] = to_state
    assert len(last) == runs and set(last.values()) == {"firing"}, got
    # "The tasks are mastered; consider stopping" is never said beside the hack: not
    # when tasks_mastered starts firing, not in the run's latest findings.
    said = out_sql(
        out, "select message from alerts where code = 'tasks_mastered' and to_state = 'firing'"
    )
    latest = [f for r in read_latest(str(out)) for f in r["findings"]]
    assert not any(STOP in m for (m,) in said), said
    assert not any(STOP in (f["message"] or "") for f in latest), latest


def test_the_simulators_reward_hacks_end_firing(tmp_path):
    """The simulator's runs (another writer), as a user tried them: the hack fires on
    every run and is still firing when the runs end, with no advice to stop."""
    simulate(
        tmp_path / "runs",
        SimConfig(runs=3, steps=120, seed=5, scenarios=("reward_too_fast",)),
    )
    analyze_local([str(tmp_path / "runs")], str(tmp_path / "out"))
    _hack_ends_firing_without_advice_to_stop(tmp_path / "out", 3)


@pytest.mark.parametrize("fmt", ["verl", "trl"])
def test_a_reward_hack_written_by_other_trainers_gets_no_advice_to_stop(tmp_path, fmt):
    """The first of those runs (tasks_mastered fired beside its hack) as verl and TRL
    write it."""
    src = tmp_path / "src"
    simulate(src, SimConfig(runs=1, steps=120, seed=5, scenarios=("reward_too_fast",)))
    trainer_run(src, tmp_path / "runs" / fmt, fmt)
    analyze_local([str(tmp_path / "runs")], str(tmp_path / "out"))
    _hack_ends_firing_without_advice_to_stop(tmp_path / "out", 1)
