"""`rlstream status`: order, figures, JSON, follow; it reads only OUT."""

from __future__ import annotations

import io
import json
import shutil

from rlstream.cli import main
from rlstream.fleet.read import read_latest
from rlstream.fleet.status import follow, render_table, status_rows, trend_arrow
from tests.fleet.conftest import HOSTILE_ID


def _row(run_id, status, firing=(), **kw):
    return {
        "run_id": run_id,
        "status": status,
        "findings": [
            {"code": c, "severity": s, "state": "firing", "since_step": 3, "message": "m"}
            for c, s in firing
        ]
        + [{"code": "noisy_reward", "severity": "warning", "state": "pending", "since_step": 1}],
        "last_activity": kw.pop("last_activity", 100.0),
        **kw,
    }


def test_worst_first_then_more_findings_then_id():
    rows = status_rows(
        [
            _row("b", "healthy"),
            _row("a", "finished"),
            _row("c", "warning", [("low_ess", "warning")]),
            _row("d", "critical", [("degenerate_outputs", "critical")]),
            _row("e", "warning", [("low_ess", "warning"), ("tasks_mastered", "info")]),
            _row("f", "stalled", [("stalled", "warning")]),
        ],
        now=160.0,
    )
    assert [r["run_id"] for r in rows] == ["d", "f", "e", "c", "b", "a"]
    e = rows[2]
    # pending findings are not "firing"; severity orders the list
    assert [f["code"] for f in e["firing"]] == ["low_ess", "tasks_mastered"]
    assert e["seconds_since_update"] == 60.0


def test_table_shows_the_figures_the_rules_judged():
    # The case: ESS at the last step is 1.0, but the low_ess finding fired on
    # the window median (0.21): the table shows what the rule judged, and says so.
    rows = status_rows(
        [
            _row(
                "r1",
                "critical",
                [("low_ess", "critical"), ("mismatch_kl_rising", "warning")],
                last_step=41,
                cohort="sweep-a",
                reward_mean=0.4567,
                reward_trend=-0.004,
                mismatch_kl=0.00021,
                mismatch_ess=1.0,
                entropy_estimate=0.1234,
                truncated_frac=0.25,
                mismatch_kl_recent=0.0123,
                mismatch_ess_recent=0.21,
                entropy_recent=0.15,
                truncated_recent=0.5,
                recent_steps=5.0,
                quarantined=3,
                not_evaluable=["heldout_gap", "stalled"],
            ),
            _row("r2", "healthy", last_step=3, not_evaluable=[]),
        ],
        now=100.0 + 3 * 3600,
    )
    text = render_table(rows)
    lines = text.splitlines()
    assert lines[0] == "2 runs: 1 critical, 1 healthy running"
    assert lines[1].split() == [
        "run", "format", "cohort", "status", "step", "updated", "reward", "trend/100", "kl*", "ess*",
        "entropy*", "trunc*", "quar", "n/e", "findings",
    ]  # fmt: skip
    assert lines[2].split() == [
        "r1", "loops", "sweep-a", "critical", "41", "3h", "0.457", "↓-0.40", "1.23e-02", "0.210",
        "0.150", "0.50", "3", "2", "low_ess,mismatch_kl_rising",
    ]  # fmt: skip
    assert lines[3].split()[-2:] == ["-", "-"]  # nothing not evaluable, nothing firing
    assert lines[4] == (
        "* median of the last 5 final steps, the value the health rules judge (reward: last step, "
        "over every attempt with a reward, rejected groups included)"
    )
    assert lines[5].startswith("quar: lines quarantined")
    assert lines[6].startswith("n/e: how many health rules")
    assert rows[0]["not_evaluable"] == ["heldout_gap", "stalled"]
    # --json keeps both: the last step's value and the window's
    assert rows[0]["mismatch_ess"] == 1.0 and rows[0]["mismatch_ess_recent"] == 0.21
    assert rows[0]["recent_steps"] == 5
    assert trend_arrow(0.0001) == "→+0.01"


def test_counts_add_up_and_name_finished_runs_healthy():
    rows = status_rows([_row("a", "finished"), _row("b", "finished"), _row("c", "healthy")])
    rejected = [{"run_uri": "/r/x", "reason": "bad_run_json", "detail": "is not valid JSON"}]
    text = render_table(rows, rejected=rejected)
    lines = text.splitlines()
    assert lines[0] == (
        "3 runs: 1 healthy running, 2 finished healthy; 1 rejected run (not analysed, listed below)"
    )
    assert lines[-2:] == [
        "rejected (1 run; not analysed):",
        "  /r/x: run.json is not valid JSON",
    ]


def test_control_characters_in_run_ids_are_not_sent_to_the_terminal():
    text = render_table(status_rows([_row("x\x1b[2Jy", "healthy")], now=100.0))
    assert "\x1b" not in text
    assert "x\\x1b[2Jy" in text


def test_status_cli_json_matches_out(fleet_out, capsys, tmp_path):
    # A copy of OUT alone (no runs next to it) gives the same answer: only OUT is read.
    out = tmp_path / "out-copy"
    shutil.copytree(fleet_out.out, out)
    assert main(["status", str(out), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    by_id = {r["run_id"]: r for r in doc["runs"]}
    assert set(by_id) == set(fleet_out.run_ids.values())
    assert sum(doc["counts"].values()) == 4
    hostile = by_id[HOSTILE_ID]
    assert hostile["status"] == "critical"
    assert "degenerate_outputs" in [f["code"] for f in hostile["firing"]]
    assert doc["runs"][0]["status"] == "critical"
    healthy = by_id[fleet_out.run_ids["healthy"]]
    assert healthy["last_step"] == 39 and healthy["firing"] == []
    latest = {r["run_id"]: r for r in read_latest(str(fleet_out.out))}
    assert healthy["reward_mean"] == latest[healthy["run_id"]]["reward_mean"]
    assert main(["status", str(out)]) == 0
    table = capsys.readouterr().out
    assert table.splitlines()[0].startswith("4 runs: ")
    assert fleet_out.run_ids["entropy_collapse"] in table


def test_follow_redraws_count_times():
    calls = []
    buf = io.StringIO()
    follow(
        lambda: calls.append(1) or [_row("r", "healthy")],
        buf,
        interval=5,
        count=3,
        sleep=lambda s: calls.append(s),
    )
    assert calls == [1, 5, 1, 5, 1]
    assert buf.getvalue().count("1 run: 1 healthy running") == 3
    buf = io.StringIO()
    follow(lambda: [_row("r", "healthy")], buf, count=2, as_json=True, sleep=lambda s: None)
    docs = [json.loads(line) for line in buf.getvalue().splitlines()]
    assert [d["runs"][0]["run_id"] for d in docs] == ["r", "r"]
