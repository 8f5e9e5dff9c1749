"""Tracker runs read while they grow, and across a kill: exactly once.

Every fixture run is copied in five stages (tests/formats/trackers/staged.py: logs cut
inside records and LevelDB blocks, SQLite rows appended by a writer in WAL mode that
stays open), with a poll and a commit after each. The rows must equal one batch read
of the finished copy; and a watch killed at a commit (os._exit, as SIGKILL would)
then run again must leave the same rows, row for row, as the uninterrupted one.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from rlstream.pipeline.local import analyze_local
from tests.formats.trackers.staged import run_staged
from tests.outputs import out_sql


def _tables(out: Path) -> dict[str, list[tuple]]:
    steps = out_sql(
        out,
        "select run_id, step, time, reported_reward_mean_with_unusable, "
        "reported_completion_len_mean, reported_entropy_estimate, "
        "map_entries(reported_other), map_entries(reported_eval) "
        "from steps order by run_id, step",
    )
    return {
        "steps": [
            (*r[:6], *(sorted((e["key"], e["value"]) for e in m) for m in r[6:])) for r in steps
        ],
        "quarantine": out_sql(
            out,
            'select run_id, file, "offset", reason, step from quarantine order by all',
        ),
        "health": out_sql(
            out,
            "select run_id, format, last_step, steps_final, quarantined, replaced_steps "
            "from latest order by run_id",
        ),
    }


@pytest.fixture(scope="module")
def grown(tmp_path_factory):
    base = tmp_path_factory.mktemp("grow")
    assert run_staged(base / "root", base / "out") == 0
    return base, _tables(base / "out")


RESUMED = "rl-fixture/grpo-a"
"""Trackio's grpo-a resumed and logged steps 30..39 again (gen_trackio.py), after a
watch had made their rows final: those are `late` there, replaced in one batch read."""


def test_runs_read_while_they_grow_equal_one_batch_read(grown, tmp_path):
    base, live = grown
    analyze_local([str(base / "root")], str(tmp_path / "batch"))
    batch = _tables(tmp_path / "batch")
    assert len(batch["health"]) == 10
    relogged = {(RESUMED, s) for s in range(30, 40)}
    assert [r for r in live["steps"] if r[:2] not in relogged] == [
        r for r in batch["steps"] if r[:2] not in relogged
    ]
    late = [(RESUMED, "rl-fixture.db#grpo-a", None, "late", s) for s in range(30, 40)]
    assert live["quarantine"] == sorted(batch["quarantine"] + late)
    assert {r[3].split(":")[0] for r in batch["quarantine"]} == {"non_finite_value"}
    first = {r[1]: r[3] for r in live["steps"] if r[0] == RESUMED}
    newest = {r[1]: r[3] for r in batch["steps"] if r[0] == RESUMED}
    assert [first[s] for s in (30, 39)] == pytest.approx([0.4, 0.49])  # 0.1 + 0.01 step
    assert [newest[s] for s in (30, 39)] == [0.9, 0.9]
    want = {h[0]: h for h in batch["health"]}
    want[RESUMED] = (*want[RESUMED][:4], want[RESUMED][4] + 10, 0)
    assert {h[0]: h for h in live["health"]} == want
    assert want["tbx"][5] > 0  # the TensorBoard restart is replaced while watched too


@pytest.mark.parametrize("failpoint", ["after_state:3", "after_states:2", "after_append:5"])
def test_kill_while_growing_then_restart_equals_uninterrupted(grown, tmp_path, failpoint):
    _, want = grown
    root, out = tmp_path / "root", tmp_path / "out"
    assert run_staged(root, out, failpoint) == 137  # it died where told
    assert run_staged(root, out) == 0
    got = _tables(out)
    for table in want:
        assert got[table] == want[table], table
