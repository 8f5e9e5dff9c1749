"""Discovery of mixed fleets, `--format`, unreadable run folders, and the tinker reader
on a real tinker-cookbook metrics.jsonl (S3 with Ray: tests/runtime/test_formats_s3.py)."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from rlstream.config import PipelineConfig
from rlstream.fleet.read import read_latest
from rlstream.fleet.report import render_report
from rlstream.fleet.status import render_table, status_rows
from rlstream.pipeline.local import analyze_local
from rlstream.simulate import SimConfig, simulate
from tests.formats.trainer_runs import FORMATS, jsonl, sim_runs, table, trainer_run
from tests.realruns.build import realruns_dir


def mixed_fleet(tmp: Path) -> Path:
    """One run of every format under one ROOT, nested at different depths."""
    root = tmp / "fleet"
    simulate(root / "loops", SimConfig(runs=1, steps=4, groups=2, group_size=4, tokens=10))
    sim = sim_runs(tmp / "sim", steps=4)
    for i, fmt in enumerate(FORMATS):
        trainer_run(sim, root / ("team" if i % 2 else "") / f"{fmt}-run", fmt)
    return root


def test_mixed_fleet_is_found_and_each_run_says_its_format(tmp_path):
    root = mixed_fleet(tmp_path)
    states = analyze_local([str(root)], str(tmp_path / "out"))
    got = sorted((s.format, s.run_id) for s in states)
    assert got == sorted(
        [("loops", states[[s.format for s in states].index("loops")].run_id)]
        + [(f, f"{f}-run") for f in FORMATS]
    )
    latest = {r["run_id"]: r["format"] for r in read_latest(str(tmp_path / "out"))}
    assert sorted(latest.values()) == sorted(["loops", *FORMATS])
    text = render_table(status_rows(read_latest(str(tmp_path / "out"))))
    legends = ("*", "n/e:", "r:", "not judged:", "partly judged:", "quar:")
    rows = [ln for ln in text.splitlines()[2:] if not ln.startswith(legends)]
    table_formats = {ln.split()[0]: ln.split()[1] for ln in rows}
    assert table_formats == latest
    steps = table(tmp_path / "out", "steps")
    assert {r["run_id"] for r in steps} == set(latest)
    # What each format cannot give (docs/formats.md) leaves these rules not evaluable.
    ne = {r["format"]: r["not_evaluable"] for r in read_latest(str(tmp_path / "out"))}
    # No failure records, no `training.max_consecutive_unusable_groups` in their config.
    no_failures = ["grading_failure_burst", "rollout_failure_burst", "unusable_groups_streak"]
    assert ne == {
        "loops": [],
        # its logtree carries the logged groups' text (docs/formats.md)
        "tinker": sorted([*no_failures, "low_ess", "out_of_room", "stalled"]),
        "verl": sorted([*no_failures, "stale_rollouts", "stalled"]),
        # the episodes give failed rollouts, not failed gradings; their nodes carry text
        "prime-rl": ["grading_failure_burst", "unusable_groups_streak"],
        "trl": sorted(
            [
                *no_failures,
                "low_ess",
                "mismatch_kl_rising",
                "stale_rollouts",
                "stalled",
            ]
        ),
    }
    # status names how many, the report names them, one line per run
    n_e = {ln.split()[0]: ln.split()[-2] for ln in rows}
    by_id = {r["run_id"]: r for r in read_latest(str(tmp_path / "out"))}
    assert n_e == {k: str(len(v["not_evaluable"]) or "-") for k, v in by_id.items()}
    html = render_report(str(tmp_path / "out"))
    for section in html.split('<section class="run"')[1:]:
        run = by_id[re.search(r'<div class="sub">id (\S+) ', section).group(1)]
        codes = run["not_evaluable"]
        assert (
            f"not evaluable on this run ({run['format']} files lack their figures): "
            f"{', '.join(codes)}</div>"
            if codes
            else "every health rule can be evaluated on this run"
        ) in section
    tinker_rows = [r for r in steps if r["run_id"] == "tinker-run"]
    assert all(r["discard_rollout_failed"] is None for r in tinker_rows)


def test_format_flag_reads_only_that_format(tmp_path):
    root = mixed_fleet(tmp_path)
    cfg = PipelineConfig(input_format="verl")
    states = analyze_local([str(root)], str(tmp_path / "out"), cfg)
    assert [(s.run_id, s.format) for s in states] == [("verl-run", "verl")]


def test_unreadable_run_folder_gets_a_quarantine_row_naming_its_format(tmp_path):
    sim = sim_runs(tmp_path / "sim", steps=2)
    run = trainer_run(sim, tmp_path / "runs" / "project", "verl")
    shutil.copy(run / "metrics.jsonl", run / "other-experiment.jsonl")
    broken = tmp_path / "runs" / "trl-run"
    broken.mkdir()
    (broken / "trainer_state.json").write_text('{"log_history": [')
    states = analyze_local([str(tmp_path / "runs")], str(tmp_path / "out"))
    assert states == []
    rows = sorted(table(tmp_path / "out", "quarantine"), key=lambda r: r["file"])
    assert [(Path(r["file"]).name, r["reason"]) for r in rows] == [
        ("project", "unreadable_run:verl"),
        ("trl-run", "unreadable_run:trl"),
    ]
    assert "several experiment logs" in rows[0]["detail"]
    assert "malformed_json" in rows[1]["detail"]


REAL = realruns_dir()


@pytest.mark.skipif(REAL is None, reason="../shared/realruns is not beside the repository")
def test_tinker_reader_on_a_real_metrics_file(tmp_path):
    """A real tinker-cookbook log_path reused by several restarts: steps 0 0 0 0 1 0.
    The newest step 0 (the last line) and the step 1 are rows; the four repeats of
    step 0 are replaced steps, counted, none quarantined."""
    src = REAL / "astOwOlfo_tinker_reward_hacking"
    run = tmp_path / "runs" / "bash_codeforces"
    run.mkdir(parents=True)
    shutil.copy(src / "bash_codeforces_metrics.jsonl", run / "metrics.jsonl")
    shutil.copy(src / "bash_codeforces_config.json", run / "config.json")
    states = analyze_local([str(tmp_path / "runs")], str(tmp_path / "out"))
    assert [(s.run_id, s.format) for s in states] == [("bash_codeforces", "tinker")]
    assert states[0].config["sampling"] == {"max_tokens": 2048}
    lines = jsonl(run / "metrics.jsonl")
    rows = table(tmp_path / "out", "steps", "order by step")
    assert [r["step"] for r in rows] == [0, 1]
    for row, m in ((rows[0], lines[5]), (rows[1], lines[4])):
        assert row["reported_reward_mean_with_unusable"] == m["env/all/reward/total"]
        assert row["reported_mismatch_kl"] == m["optim/kl_sample_train_v2"]
        assert row["reported_entropy_estimate"] == m["optim/entropy"]
        assert row["reported_completion_len_mean"] == m["env/all/ac_tokens_per_turn"]
        assert row["reported_no_variance_frac"] == pytest.approx(
            m["env/all/by_group/frac_all_good"] + m["env/all/by_group/frac_all_bad"]
        )
        assert (
            dict(row["reported_other"])["optim/kl_sample_train_v1"] == m["optim/kl_sample_train_v1"]
        )
        assert row["reward_mean"] is None and row["truncated_frac"] is None
    assert table(tmp_path / "out", "quarantine", 'order by "offset"') == []
    health = table(tmp_path / "out", "run_health", "")
    assert [(h["replaced_steps"], h["quarantined"]) for h in health] == [(4, 0)]


def test_adding_a_run_of_another_format_lists_its_folder_once(tmp_path, monkeypatch):
    """add_run detects the format and identifies the run from one listing of its
    folder: no run.json stat, no second listing (both are requests on object stores)."""
    from rlstream.io.storage import Storage
    from rlstream.pipeline.local import _group_and_runs

    sim = sim_runs(tmp_path / "sim", steps=2)
    run = trainer_run(sim, tmp_path / "runs" / "t", "tinker")
    group, urls = _group_and_runs([str(tmp_path / "runs")], str(tmp_path / "out"), PipelineConfig())
    calls: list[tuple[str, str]] = []
    for name in ("stat", "stat_many", "list_names", "list_dirs"):
        orig = getattr(Storage, name)

        def spy(self, url, *a, _orig=orig, _name=name, **kw):
            calls.append((_name, str(url)))
            return _orig(self, url, *a, **kw)

        monkeypatch.setattr(Storage, name, spy)
    assert group.add_run(urls[0]).format == "tinker"
    assert [c for c in calls if c[1].endswith("run.json")] == []
    folder = str(run).rstrip("/")
    assert sorted(n for n, u in calls if u.rstrip("/") == folder) == ["list_dirs", "list_names"]
