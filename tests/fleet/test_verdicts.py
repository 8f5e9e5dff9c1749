"""A run's status tells the truth at a glance, on runs of several writers (the
simulator, the learning trainer, other trainers' formats): a finished run that had a
warning or critical finding says so with its worst finding and the steps it covered;
a run the rules cannot judge says `not judged` and what is missing; a run with only
steps.jsonl shows the reward it reports, marked as reported, in status, the report,
Prometheus, `--json` and `compare`."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import orjson
import pytest

from rlstream.cli import main
from rlstream.fleet.prometheus import render_metrics
from rlstream.fleet.read import read_latest
from rlstream.fleet.report import render_report
from rlstream.fleet.status import render_table, status_rows
from rlstream.fleet.status import verdict as status_verdict
from rlstream.pipeline.local import analyze_local
from rlstream.simulate import SimConfig, simulate
from tests.formats.trainer_runs import sim_runs, trainer_run


def _analyze(root: Path, out: Path) -> dict[str, dict]:
    analyze_local([str(root)], str(out))
    return {r["run_id"]: r for r in status_rows(read_latest(str(out)), now=2e9)}


def _prom(out: Path) -> str:
    return render_metrics(read_latest(str(out)), {}, now=2e9)


def _steps_lines(run: Path) -> list[dict]:
    lines = [orjson.loads(x) for x in (run / "steps.jsonl").read_bytes().splitlines()]
    return [x for x in lines if "step" in x]


@pytest.fixture(scope="module")
def sim_fleet(tmp_path_factory):
    """The demo's first plans (seed 1, 50 steps): healthy, entropy_collapse,
    mismatch_kl_rising; and two runs of 12 steps."""
    base = tmp_path_factory.mktemp("verdicts")
    plans = ("healthy", "entropy_collapse", "mismatch_kl_rising")
    labels = simulate(base / "runs", SimConfig(runs=3, steps=50, seed=1, scenarios=plans))
    short = simulate(base / "runs" / "short", SimConfig(runs=1, steps=12, seed=7))
    return base, _analyze(base / "runs", base / "out"), labels, short


def test_a_finished_run_with_a_critical_finding_names_it_and_its_steps(sim_fleet):
    base, rows, labels, _ = sim_fleet
    kl = rows[labels[2].run_id]
    firing = {f["code"]: f for f in kl["firing"]}
    assert kl["finished"] is True and kl["status"] == "critical"
    w = kl["worst_finding"]
    assert w["code"] == "mismatch_kl_rising" and w["severity"] == "critical"
    # From the step it fired (its pending stretch began at since_step) to the end.
    assert firing["mismatch_kl_rising"]["since_step"] <= w["since_step"] < 49
    assert w["until_step"] == 49 == kl["last_step"]
    assert kl["verdict"] == f"finished: critical mismatch_kl_rising, steps {w['since_step']}-49"
    table = render_table(list(rows.values()))
    assert kl["verdict"] in table
    assert "finished healthy" not in table.splitlines()[0].split("critical")[0]
    assert re.search(r"1 critical \(1 finished\)", table.splitlines()[0])
    # Prometheus: the run finished (so it is never "stopped reporting") and is critical.
    text = _prom(base / "out")
    assert f'rlstream_run_finished{{run_id="{kl["run_id"]}"}} 1' in text
    assert f'rlstream_run_status{{run_id="{kl["run_id"]}",status="critical"}} 1' in text
    html = render_report(str(base / "out"), now=2e9)
    assert f">{kl['verdict']}</span>" in html


def test_a_finished_run_whose_finding_went_critical_then_back_to_warning_is_critical(
    tmp_path,
):
    """Failure bursts and ESS swing between warning and critical; a run that finished
    while such a finding fires at warning had it critical: it is critical (counted and
    named so), not `finished: warning` with no code. Checked against its alerts rows."""
    from rlstream.fleet.read import read_table

    plans = ("low_ess", "rollout_failure_burst", "grading_failure_burst")
    simulate(tmp_path / "runs", SimConfig(runs=3, steps=60, seed=1, scenarios=plans))
    rows = _analyze(tmp_path / "runs", tmp_path / "out")
    alerts = read_table(str(tmp_path / "out"), "alerts").to_pylist()
    went_critical = {a["run_id"] for a in alerts
                     if a["to_state"] == "firing" and a["severity"] == "critical"}  # fmt: skip
    ends_warning = {r["run_id"] for r in rows.values()
                    if {f["severity"] for f in r["firing"]} == {"warning"}}  # fmt: skip
    assert went_critical & ends_warning, "no run to judge: the case is not exercised"
    for rid in went_critical:
        r = rows[rid]
        assert r["finished"] and r["status"] == "critical", (rid, r["status"], r["verdict"])
        w = r["worst_finding"]
        assert w["severity"] == "critical"
        assert r["verdict"] == (
            f"finished: critical {w['code']}, steps {w['since_step']}-{w['until_step']}"
        )
    table = render_table(list(rows.values()))
    assert re.search(rf"{len(went_critical)} critical \({len(went_critical)} finished\)", table)


def test_a_clean_finished_run_is_finished_and_names_the_rule_its_length_did_not_reach(
    sim_fleet,
):
    base, rows, labels, _ = sim_fleet
    ok = rows[labels[0].run_id]
    assert ok["status"] == "finished" and ok["worst_finding"] is None
    assert ok["judged"] == "judged" and ok["verdict"] == "finished"
    # 50 steps: reward_too_fast (60 rows, then 3 evaluations) has not judged it, and
    # the run says so.
    assert ok["missing"] == "not yet judged at 50 final steps: reward_too_fast (needs 62)"
    table = render_table(list(rows.values()))
    assert "partly judged: not yet judged at 50 final steps: reward_too_fast (needs 62)" in table
    assert f'rlstream_run_judged{{run_id="{ok["run_id"]}"}} 1' in _prom(base / "out")


def test_a_run_shorter_than_the_rules_baseline_is_not_judged(sim_fleet, capsys):
    base, rows, _, short = sim_fleet
    r = rows[short[0].run_id]
    assert r["firing"] == [] and r["finished"] is True
    assert r["status"] == "insufficient" and r["judged"] == "insufficient"
    assert r["missing"] == "12 final steps, the rules need 17"  # 2 + 10 + 5
    assert r["verdict"] == "finished, not judged"
    assert main(["status", str(base / "out"), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    got = {x["run_id"]: x for x in doc["runs"]}[r["run_id"]]
    assert got["status"] == "insufficient" and got["missing"] == r["missing"]
    assert doc["counts"]["insufficient"] == 1
    rid = r["run_id"]
    assert f'rlstream_run_status{{run_id="{rid}",status="insufficient"}} 1' in _prom(base / "out")
    html = render_report(str(base / "out"), now=2e9)
    assert "not judged: 12 final steps, the rules need 17" in html


def test_a_learning_trainers_finished_runs_say_what_they_had_and_what_was_not_judged(
    tmp_path,
):
    from rlstream.simulate.learn import simulate_learn

    root = tmp_path / "runs"
    (stale,) = simulate_learn(root / "a", "stale_sampler", runs=1, steps=80, seed=4)
    (ok,) = simulate_learn(root / "b", "healthy", runs=1, steps=40, seed=6)
    rows = _analyze(root, tmp_path / "out")
    s, lo = rows[stale.run_id], rows[ok.run_id]
    w = s["worst_finding"]
    assert s["finished"] and s["status"] == w["severity"] == "warning"
    assert w["code"] == "mismatch_kl_rising" and stale.onset_step <= w["since_step"]
    assert s["verdict"] == f"finished: warning mismatch_kl_rising, steps {w['since_step']}-79"
    assert s["missing"] is None  # 80 steps: every evaluable rule had its window
    assert lo["status"] == "finished" and lo["judged"] == "judged"
    assert lo["missing"] == "not yet judged at 40 final steps: reward_too_fast (needs 62)"
    head = render_table(list(rows.values())).splitlines()[0]
    assert head == "2 runs: 1 warning (1 finished), 1 finished healthy"


@pytest.mark.parametrize("fmt", ["loops", "trl"])
def test_a_hack_run_of_60_steps_says_its_climb_was_never_judged(tmp_path, fmt):
    # The issue's `simulate --steps 60 --scenario reward_too_fast --seed 5`: 60 rows
    # meet reward_too_fast's min_rows only at the last step, so it could never fire;
    # the run must not read as fully judged.
    src = tmp_path / "src"
    simulate(src, SimConfig(runs=1, steps=60, seed=5, scenarios=("reward_too_fast",)))
    root = src if fmt == "loops" else trainer_run(src, tmp_path / "runs" / fmt, fmt)
    rows = _analyze(root, tmp_path / "out")
    (r,) = rows.values()
    assert r["judged"] == "judged"  # TRL counts steps from 1, Loops from 0
    assert "reward_too_fast" not in {f["code"] for f in r["firing"]}
    assert r["missing"] == "not yet judged at 60 final steps: reward_too_fast (needs 62)"
    assert "partly judged: not yet judged at 60 final steps" in render_table([r])


def test_a_finding_that_resolved_before_the_end_keeps_the_finished_run_from_healthy(tmp_path):
    # A failure burst of 6 steps in a simulated healthy run: the finding fires, then
    # resolves well before the run ends.
    root = tmp_path / "runs"
    (label,) = simulate(root, SimConfig(runs=1, steps=60, seed=4, scenarios=("healthy",)))
    path = root / label.run / "rollouts.jsonl"
    recs = [orjson.loads(x) for x in path.read_bytes().splitlines()]
    for rec in recs:
        if 25 <= rec["step"] < 31 and int(rec["attempt_id"][1:]) % 2 == 0:
            rec.update(reward=None, trained=False, discard_reason="rollout_failed/timeout")
            rec["metadata"] = {"turns": 1, "termination_reason": "error", "tool_calls": 0}
    path.write_bytes(b"\n".join(orjson.dumps(r) for r in recs) + b"\n")
    r = _analyze(root, tmp_path / "out")[label.run_id]
    found = read_latest(str(tmp_path / "out"))[0]["findings"]
    assert [f["state"] for f in found if f["code"] == "rollout_failure_burst"] == ["resolved"]
    assert r["firing"] == []
    w = r["worst_finding"]
    assert w["code"] == "rollout_failure_burst" and 25 <= w["since_step"] <= w["until_step"] < 40
    assert r["status"] == w["severity"] and r["finished"]
    assert r["verdict"].startswith(f"finished: {w['severity']} rollout_failure_burst, steps ")
    assert "finished healthy" not in render_table([r])


def _steps_only(root: Path) -> None:
    for run in root.iterdir():
        if (run / "rollouts.jsonl").exists():
            (run / "rollouts.jsonl").unlink()
            shutil.rmtree(run / "transcripts", ignore_errors=True)


def test_a_steps_only_run_shows_its_reported_reward_and_is_not_judged(tmp_path, capsys):
    root = tmp_path / "runs"
    labels = simulate(root, SimConfig(runs=2, steps=30, seed=3))
    _steps_only(root)
    out = tmp_path / "out"
    rows = _analyze(root, out)
    for lb in labels:
        r = rows[lb.run_id]
        last = _steps_lines(root / lb.run)[-1]
        assert r["reward_mean"] == pytest.approx(last["reward/mean"])
        assert "reward_mean" in r["reported_figures"]
        # Only steps.jsonl: the rules about completions, failures and task difficulty
        # cannot speak, so the run is not called healthy.
        assert r["status"] == "insufficient" and r["firing"] == []
        assert r["missing"].startswith("9 of 21 rules evaluable on its files, at least 13")
    # The headline reward is over every attempt: steps.jsonl's reward/mean_with_unusable.
    first = rows[labels[0].run_id]
    want = _steps_lines(root / labels[0].run)[-1]["reward/mean_with_unusable"]
    assert first["reward_mean_with_unusable"] == pytest.approx(want)
    assert "reward_mean_with_unusable" in first["reported_figures"]
    table = render_table(list(rows.values()))
    assert f"{want:.3f}r" in table
    assert "r: the figure the trainer's log reports" in table
    html = render_report(str(out), now=2e9)
    assert f"{want:.3f} (reported)" in html
    assert "<title>reward: reported only</title>" in html
    assert "no data for this figure</text></svg></div>" in html  # discards: truly none
    a, b = (lb.run_id for lb in labels)
    assert main(["compare", str(out), a, b, "--json"]) == 0
    got = {d["figure"]: d for d in json.loads(capsys.readouterr().out)["divergences"]}
    assert got["reward_mean"]["source"] == "reported"
    assert got["reward_mean"]["common_steps"] == 30
    assert got["reward_mean_with_unusable"]["source"] == "reported"


def _reward_all(rollouts: Path, step: int) -> float:
    """docs/run-format.md, reward/mean_with_unusable: the trained attempts' rewards and
    those of every attempt of a group with no trained attempt, non-null only."""
    recs = [orjson.loads(x) for x in rollouts.read_bytes().splitlines()]
    recs = [x for x in recs if x["step"] == step]
    trained_groups = {x["group_id"] for x in recs if x["trained"]}
    got = [
        x["reward"]
        for x in recs
        if x["reward"] is not None and (x["trained"] or x["group_id"] not in trained_groups)
    ]
    return sum(got) / len(got)


def test_the_headline_reward_is_over_every_attempt_not_the_trained_ones(tmp_path):
    # The issue's seed-5 hack: its trained groups' reward sits at 0.75 (groups that
    # all pass are not trained on) while every attempt's is near 1.
    root = tmp_path / "runs"
    (label,) = simulate(root, SimConfig(runs=1, steps=120, seed=5, scenarios=("reward_too_fast",)))
    out = tmp_path / "out"
    (r,) = _analyze(root, out).values()
    want = _reward_all(root / label.run / "rollouts.jsonl", r["last_step"])
    assert want > 0.85 and r["reward_mean"] == pytest.approx(0.75)
    assert r["reward_mean_with_unusable"] == pytest.approx(want)
    line = render_table([r]).splitlines()[2]
    assert f" {want:.3f} " in line and " 0.750 " not in line
    html = render_report(str(out), now=2e9)
    assert f">{want:.3f}</td>" in html
    rid = r["run_id"]
    assert f'rlstream_run_reward_mean_with_unusable{{run_id="{rid}"}} {want!r}' in _prom(out)


def test_a_tensorboard_run_shows_the_reward_its_trainer_logs(tmp_path, capsys):
    # verl logging to TensorBoard: only critic/score/mean, the all-groups reward.
    src = tmp_path / "src"
    simulate(src, SimConfig(runs=2, steps=30, seed=3))
    for i, run in enumerate(sorted(p for p in src.iterdir() if p.is_dir())):
        one = tmp_path / f"one{i}"
        shutil.copytree(run, one / run.name)
        trainer_run(one, tmp_path / "runs" / f"r{i}", "tensorboard")
    out = tmp_path / "out"
    rows = _analyze(tmp_path / "runs", out)
    for r in rows.values():
        assert r["reward_mean"] is None and "reward_mean_with_unusable" in r["reported_figures"]
        assert f"{r['reward_mean_with_unusable']:.3f}r" in render_table([r])
    a, b = rows
    assert main(["compare", str(out), a, b, "--json"]) == 0
    got = {d["figure"]: d for d in json.loads(capsys.readouterr().out)["divergences"]}
    assert got["reward_mean_with_unusable"]["source"] == "reported"
    assert got["reward_mean_with_unusable"]["common_steps"] == 30


@pytest.mark.parametrize("fmt", ["steps-only", "tensorboard"])
def test_a_run_the_rules_cannot_judge_says_so_even_when_a_finding_fires(tmp_path, capsys, fmt):
    # The seed-5 hack with only steps.jsonl left, and as verl logs it to TensorBoard:
    # too few rules evaluable, yet a finding fires; the line under the table, the
    # report, Prometheus and --json say the run was not judged, never "partly judged".
    src = tmp_path / "src"
    simulate(src, SimConfig(runs=1, steps=120, seed=5, scenarios=("reward_too_fast",)))
    if fmt == "steps-only":
        _steps_only(src)
        root = src
    else:
        root = trainer_run(src, tmp_path / "runs" / fmt, fmt)
    out = tmp_path / "out"
    (r,) = _analyze(root, out).values()
    assert r["judged"] == "insufficient" and r["status"] in ("warning", "stalled")
    assert "reward_too_fast" in {f["code"] for f in r["firing"]}
    assert r["missing"].endswith("rules evaluable on its files, at least 13 needed "
                                 "(not_evaluable names the others)")  # fmt: skip
    table = render_table([r])
    assert f"not judged: {r['missing']}: {r['run_id']}" in table
    assert "partly judged" not in table
    html = render_report(str(out), now=2e9)
    assert f'<div class="sub judged">not judged: {r["missing"]}</div>' in html
    assert f'rlstream_run_judged{{run_id="{r["run_id"]}"}} 0' in _prom(out)
    assert main(["status", str(out), "--json"]) == 0
    (got,) = json.loads(capsys.readouterr().out)["runs"]
    assert got["judged"] == "insufficient" and got["missing"] == r["missing"]


@pytest.mark.parametrize("fmt", ["tinker", "verl"])
def test_other_formats_without_step_times_are_not_counted_as_healthy_running(tmp_path, fmt):
    src = sim_runs(tmp_path / "src", steps=30)
    trainer_run(src, tmp_path / "runs" / fmt, fmt)
    rows = _analyze(tmp_path / "runs", tmp_path / "out")
    (r,) = rows.values()
    assert r["status"] == "healthy" and r["last_activity"] is None and not r["finished"]
    head = render_table([r]).splitlines()[0]
    assert head == "1 run: 1 healthy, not known to be running (no step times)"
    assert "mismatch_kl" in r["reported_figures"]  # no logprobs in these files
    assert r["missing"] == "not yet judged at 30 final steps: reward_too_fast (needs 62)"


def _t(code, severity, to_state, step):
    from types import SimpleNamespace

    return SimpleNamespace(code=code, severity=severity, to_state=to_state, step=step)


def _worst(batches, last_step):
    """track_worst over `batches` of transitions folded one poll after another."""
    from rlstream.pipeline.state import RunState
    from rlstream.pipeline.verdicts import track_worst

    state = RunState("r", "u")
    worst = None
    for ts in batches:
        worst = track_worst(state, ts, last_step)
        state.headline["_worst"] = worst
    return worst


def test_a_finding_that_fired_twice_shows_its_latest_firing():
    """Fired 77-105, resolved, fired again 115 to the run's end 119: the worst finding
    is the latest firing (steps 115-119), not one span over both (77-119)."""
    code = "transcript_hack_flags"
    ts = [_t(code, "critical", "firing", 77), _t(code, "critical", "resolved", 105),
          _t(code, "critical", "firing", 115)]  # fmt: skip
    want = {"code": code, "severity": "critical", "since_step": 115, "until_step": 119}
    assert _worst([ts], 119) == want
    assert _worst([ts[:1], ts[1:2], [], ts[2:]], 119) == want  # poll by poll
    ended = [*ts, _t(code, "critical", "resolved", 117)]
    assert _worst([ended], 119) == {**want, "until_step": 117}
    row = {"status": "critical", "finished": True, "worst_finding": want}
    assert status_verdict(row) == f"finished: critical {code}, steps 115-119"


def test_a_weaker_second_firing_leaves_the_worse_first_one():
    """Critical 10-20, then the same code fires again only at warning (30 to the end):
    the critical firing stays the worst, with its own steps."""
    code = "low_ess"
    ts = [_t(code, "critical", "firing", 10), _t(code, "warning", "resolved", 20),
          _t(code, "warning", "firing", 30)]  # fmt: skip
    want = {"code": code, "severity": "critical", "since_step": 10, "until_step": 20}
    assert _worst([ts], 40) == want
