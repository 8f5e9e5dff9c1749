"""Exactly-once across a kill between any two writes of a commit, deterministically:
the staged watch (tests/pipeline/staged.py) is killed by a failpoint (os._exit, as
SIGKILL would) after one table's append (before any resume state of the commit) or
after a resume state (before the next run's); rerun with the same arguments it must
leave the same rows as an uninterrupted run, row for row, in steps, quarantine,
alerts and samples, and the same
latest health per run."""

from __future__ import annotations

from pathlib import Path

import pytest

from rlstream.simulate import SimConfig, simulate
from tests.outputs import out_sql
from tests.pipeline.staged import run_staged as _staged


def _tables(out: Path) -> dict[str, list[tuple]]:
    return {
        "steps": out_sql(
            out, "select * exclude (reported_other, commit_seq) from steps order by run_id, step"
        ),
        "quarantine": out_sql(out, "select * exclude (commit_seq) from quarantine order by all"),
        "alerts": out_sql(out, "select * exclude (commit_seq) from alerts order by all"),
        "samples": out_sql(
            out, "select * exclude (commit_seq) from samples order by run_id, step, attempt_id"
        ),
        "latest": out_sql(
            out,
            "select * exclude (as_of, commit_seq, run_uri) from latest order by run_id",
        ),
    }


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    base = tmp_path_factory.mktemp("staged")
    scen = ("healthy", "rollout_failure_burst")
    simulate(base / "src", SimConfig(runs=2, steps=8, scenarios=scen, seed=5))
    assert _staged(base / "src", base / "root", base / "out") == 0
    return base, _tables(base / "out")


@pytest.mark.parametrize(
    "failpoint",
    ["after_state:1", "after_state:3", "after_state:4", "after_append:1", "after_append:4"],
)
def test_kill_between_writes_then_restart_equals_uninterrupted(fleet, tmp_path, failpoint):
    base, want = fleet
    root, out = tmp_path / "root", tmp_path / "out"
    assert _staged(base / "src", root, out, failpoint) == 137  # it died where told
    assert _staged(base / "src", root, out) == 0
    got = _tables(out)
    assert len(want["steps"]) == 2 * 8
    for table in want:
        assert got[table] == want[table], table


@pytest.mark.parametrize("failpoint", ["after_append:2", "after_append:3", "after_append:6"])
def test_kill_after_some_tables_then_restart_equals_uninterrupted(fleet, tmp_path, failpoint):
    """A kill after some tables of a commit leaves rows of a commit whose state was
    never written, which the restart deletes before writing them again."""
    base, want = fleet
    root, out = tmp_path / "root", tmp_path / "out"
    assert _staged(base / "src", root, out, failpoint) == 137
    assert _staged(base / "src", root, out) == 0
    # Nothing of the dead commit is left twice: (run, step) is unique.
    dup = out_sql(out, "select run_id, step from steps group by all having count(*) > 1")
    assert dup == []
    got = _tables(out)
    for table in want:
        assert got[table] == want[table], table
