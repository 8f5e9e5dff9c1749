"""degenerate_outputs on multi-turn agents, from a second writer: hand-written coding
agent runs (tests/health/agent_runs.py), analyzed by the in-process pipeline and read
back from OUT. The simulator's agent mode is checked in tests/simulate.

Identical short tool-call turns across tasks ("Running the tests now." run_tests())
are not a collapse; one conftest.py written for every task is.
"""

from __future__ import annotations

import pytest

from rlstream.fleet.read import read_latest
from rlstream.pipeline.local import analyze_local
from tests.health.agent_runs import write_agent_run

ONSET = 25


@pytest.fixture(scope="module")
def analysed(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict]:
    root = tmp_path_factory.mktemp("agents")
    for seed in (1, 2):
        write_agent_run(root / f"healthy-{seed}", f"agent-healthy-{seed}", seed=seed)
    write_agent_run(root / "hacked", "agent-hacked", onset=ONSET, seed=3)
    out = tmp_path_factory.mktemp("agents-out")
    analyze_local([str(root)], str(out))
    return {r["run_id"]: r for r in read_latest(str(out))}


def _codes(row: dict, severities=("warning", "critical")) -> set[str]:
    return {
        f["code"]
        for f in row["findings"] or []
        if f["state"] == "firing" and f["severity"] in severities
    }


def test_every_turn_of_every_attempt_was_read(analysed) -> None:
    for row in analysed.values():
        assert row["last_step"] == 59 and row["quarantined"] == 0
        assert row["token_metrics"] == "recomputed"
        assert row["transcripts"] == 60 * 8 * 4


@pytest.mark.parametrize("seed", [1, 2])
def test_healthy_agent_shares_its_boilerplate_but_is_not_degenerate(analysed, seed) -> None:
    row = analysed[f"agent-healthy-{seed}"]
    assert "degenerate_outputs" not in {f["code"] for f in row["findings"] or []}, row["findings"]
    assert _codes(row) == set(), row["findings"]


def test_hacked_agent_is_critical_from_the_onset(analysed) -> None:
    row = analysed["agent-hacked"]
    assert row["status"] == "critical"
    assert "degenerate_outputs" in _codes(row, ("critical",)), row["findings"]
    (f,) = [f for f in row["findings"] if f["code"] == "degenerate_outputs"]
    assert ONSET <= f["since_step"] <= ONSET + 8
