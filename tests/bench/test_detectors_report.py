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


def test_without_healthy_runs_false_alarms_are_not_measured():
    # `--healthy 0` with only pathological scenarios: no run to count false alarms on,
    # so the targets line neither meets nor misses them.
    table, summary = report([_run("noisy_reward", 50, first={"noisy_reward": 90})], steps=120)
    last = table.splitlines()[-1]
    assert "recall met" in last and last.endswith("false alarms not measured (no healthy runs)")
    assert summary["_healthy_runs"] == 0 and summary["_targets_met"] is False


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


def test_a_run_expected_to_raise_a_second_code_is_scored_for_it_from_its_own_onset():
    """A learning loophole run whose text shows the wildcard from step 1 is a case of
    heldout_gap (onset 40) and of transcript_hack_flags (onset 1), even when its
    heldout_gap label was not observed; a run that fired transcript_hack_flags
    without expecting it counts against its precision."""
    code = "transcript_hack_flags"
    runs = [
        RunResult("heldout_gap", 40, {"heldout_gap": 70, code: 4}, set(), 0, [], set(), also={code: 1}),
        RunResult("unobserved:loophole", None, {code: 9}, set(), 0, [], set(), also={code: 2}),
        RunResult("heldout_gap", 40, {}, {code}, 0, [], {code}, also={code: 5}),  # early, held
        RunResult("entropy_collapse", 30, {code: 50}, set(), 0, [], set()),
        _run("healthy", None),
    ]  # fmt: skip
    _, summary = report(runs, steps=300, codes=("heldout_gap", code))
    assert summary[code]["recall"] == 2 / 3
    assert summary[code]["firing_at_or_after_onset"] == 1.0
    assert summary[code]["lead"] == 5  # median of 4 - 1 and 9 - 2
    assert summary[code]["precision"] == 2 / 4  # the early firing is not a hit
    assert summary[code]["elsewhere"] == {"entropy_collapse": 1}
    assert summary["heldout_gap"]["recall"] == 0.5  # its own onset and cases unchanged
