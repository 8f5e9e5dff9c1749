"""OUT/cohorts and the cohort column end to end, in-process: `analyze` writes one
band per (cohort, step, figure) with every run of the cohort, run_health names each
run's cohort, and a kill between any two writes of a commit, then a restart, leaves
exactly the bands and alerts of an uninterrupted run (nothing lost, nothing twice)."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from rlstream.config import PipelineConfig
from rlstream.fleet.read import read_bands, read_latest, read_table
from rlstream.health import DEFAULT_RULES
from rlstream.health.peers import band
from rlstream.pipeline.local import analyze_local
from rlstream.pipeline.verdicts import health_hooks
from rlstream.simulate import SimConfig, simulate
from rlstream.sinks.cohorts import newest_bands
from tests.outputs import out_sql
from tests.pipeline.staged import run_staged


@pytest.fixture(scope="module")
def analyzed(tmp_path_factory):
    base = tmp_path_factory.mktemp("cohorts")
    simulate(base / "runs", SimConfig(runs=4, steps=12, seed=3, groups=2))
    # Runs 0, 2 and 3 form the cohort; chunks of 2 runs in folder order would split it.
    hooks = health_hooks(DEFAULT_RULES, (("sweep", "run-00[023]*"),))
    cfg = PipelineConfig(analyze_chunk_runs=2)
    analyze_local([str(base / "runs")], str(base / "out"), cfg, **hooks)
    return base


def test_run_health_names_each_runs_cohort(analyzed):
    latest = {r["run_id"]: r for r in read_latest(str(analyzed / "out"))}
    cohorts = sorted(r["cohort"] for r in latest.values())
    # Three runs match the rule; the fourth has its own config fingerprint.
    assert cohorts[1:] == ["sweep"] * 3 and cohorts[0].startswith("cfg-")


def test_bands_are_the_quantiles_of_the_cohorts_step_rows(analyzed):
    out = str(analyzed / "out")
    steps = read_table(out, "steps", columns=["run_id", "step", "mismatch_kl"])
    latest = {r["run_id"]: r["cohort"] for r in read_latest(out)}
    bands = read_bands(out, ["sweep"])["sweep"]["mismatch_kl"]
    assert bands["step"] == list(range(12))
    for i, step in enumerate(bands["step"]):
        vals = [
            r["mismatch_kl"]
            for r in steps.to_pylist()
            if r["step"] == step and latest[r["run_id"]] == "sweep" and r["mismatch_kl"] is not None
        ]
        want = band(vals)
        assert bands["n"][i] == want["n"]  # 3, or 2 at a step with no trained tokens
        assert np.isclose(bands["p10"][i], float(np.percentile(vals, 10)))
        assert np.isclose(bands["median"][i], float(np.median(vals)))
        assert np.isclose(bands["mad"][i], want["mad"])
    assert bands["n"].count(3) >= 10
    # The cohort is read in one chunk: every step's band is written once, with all three.
    raw = read_table(out, "cohorts", where=("cohort", "sweep"))
    assert raw.num_rows == newest_bands(raw).num_rows


def _staged(src: Path, root: Path, out: Path, failpoint: str | None = None) -> int:
    return run_staged(src, root, out, failpoint, cohorts=True)


def _tables(out: Path) -> dict[str, list[tuple]]:
    bands = newest_bands(read_table(str(out), "cohorts"))
    keep = ["cohort", "step", "figure", "n", "p10", "p50", "p90", "median", "mad"]
    return {
        "bands": sorted(tuple(r.values()) for r in bands.select(keep).to_pylist()),
        "alerts": out_sql(out, "select * exclude (commit_seq) from alerts order by all"),
        "cohort": out_sql(out, "select run_id, cohort from latest order by run_id"),
    }


@pytest.fixture(scope="module")
def staged(tmp_path_factory):
    base = tmp_path_factory.mktemp("staged-cohorts")
    simulate(base / "src", SimConfig(runs=3, steps=8, seed=5, groups=2))
    assert _staged(base / "src", base / "root", base / "out") == 0
    return base, _tables(base / "out")


@pytest.mark.parametrize("failpoint", ["after_state:2", "after_append:9", "after_append:2"])
def test_kill_between_writes_then_restart_leaves_the_same_bands(staged, tmp_path, failpoint):
    """Every commit appends its band rows (and steps) before the states: a kill before
    a run's state leaves band rows of an unfinished commit, which the restart deletes."""
    base, want = staged
    root, out = tmp_path / "root", tmp_path / "out"
    assert _staged(base / "src", root, out, failpoint) == 137  # died where told
    assert _staged(base / "src", root, out) == 0
    got = _tables(out)
    assert len(want["bands"]) == 8 * 6  # every step, every figure the runs have
    assert {c for _, c in got["cohort"]} == {"all"}
    assert got == want
    # No band row was appended twice: (run, commit, key) is unique.
    dup = out_sql(
        out,
        "select 1 from cohorts group by run_id, commit_seq, cohort, step, figure having count(*) > 1",
    )
    assert dup == []


def test_the_report_draws_each_run_beside_its_cohort(analyzed):
    from rlstream.fleet.report import render_report

    html = render_report(str(analyzed / "out"), now=1767300000.0)
    assert html.count('<section class="run"') == 4
    assert html.count("cohort sweep ·") == 3  # each run's header names its cohort
    # Three sweep runs: each has 2 peers, too few for a band (it would sit between
    # them), so its reward, KL, entropy, length and truncation charts draw the two
    # siblings' own curves; the fourth run is alone in its cohort and has neither.
    assert html.count('class="band"') == 0
    assert len(re.findall(r"<text[^>]*>sibling [^<]+</text>", html)) == 3 * 5 * 2
