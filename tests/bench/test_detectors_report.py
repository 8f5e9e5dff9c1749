"""The detector-quality report scores runs as documented in bench/detectors.py: recall
counts firings at or after onset; the extra column also counts a firing already held
at the onset; early firings alone are neither."""

from __future__ import annotations

from bench.detectors import RunResult, report


def _run(scenario, onset, first=None, early=(), at_onset=(), loud=()):
    return RunResult(
        scenario, onset, dict(first or {}), set(early), len(loud), list(loud), set(at_onset)
    )


def test_recall_and_firing_at_onset_columns():
    code = "tasks_mastered"
    runs = [
        _run(code, 100, first={code: 110}),  # fired after onset: a hit, lead 10
        _run(code, 100, early={code}, at_onset={code}),  # fired early, held through onset
        _run(code, 100, early={code}),  # fired early, resolved before onset
        _run(code, 100),  # never fired
        _run("healthy", None, loud=["reward_too_fast"]),
        _run("healthy", None),
    ]
    table, summary = report(runs, steps=300)
    row = next(line for line in table.splitlines() if line.startswith(f"| {code} |"))
    assert row.split(" | ")[1:6] == ["4", "25%", "50%", "33%", "10"]
    assert summary[code]["recall"] == 0.25
    assert summary[code]["firing_at_or_after_onset"] == 0.5
    assert summary["_false_alarms_per_healthy_run"] == 0.5
    # The targets line names what misses: 25 % recall, 5 false alarms per ten runs.
    last = table.splitlines()[-1]
    assert "recall missed: tasks_mastered 25%" in last and last.endswith("false alarms missed")
    assert summary["_targets_met"] is False


def test_learning_runs_are_scored_by_their_observed_label():
    from bench.detectors import _learn_scenario

    assert _learn_scenario("lr_too_high", ("entropy_collapse",)) == "entropy_collapse"
    assert _learn_scenario("healthy", ()) == "healthy"
    # A preset whose pathology did not happen is neither a case nor a healthy run.
    assert _learn_scenario("loophole", ()) == "unobserved:loophole"
    runs = [
        _run("heldout_gap", 40, first={"heldout_gap": 70}),
        _run("unobserved:loophole", None, loud=["reward_too_fast"]),
        _run("healthy", None),
    ]
    table, summary = report(runs, steps=300, codes=("heldout_gap",))
    assert "| heldout_gap | 1 | 100% |" in table
    assert summary["_false_alarms_per_healthy_run"] == 0.0
    assert summary["_unobserved"] == {"unobserved:loophole": 1}
    assert "recall met; false alarms met" in table and summary["_targets_met"] is True
    assert "not observed (not scored): loophole 1" in table
