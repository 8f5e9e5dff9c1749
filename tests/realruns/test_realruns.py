"""Runs rlstream's simulator did not make get the status their authors' verdict implies.

Real logs are read in place from ../shared/realruns (never copied here; see its
README), converted to run directories (``build.py`` says how), analysed with the
in-process pipeline and its health hook, and read back with ``rlstream.fleet.read.read_latest``.

Expectations come from the authors' own conclusions:

- tinker cookbook cog_rl (FINDINGS.md, the logbook README, each experiment's README):
  experiment 1 reward-hacked (117 of 120 trained completions are constant emits such as
  ``emit 1``); experiments 2-8 learned for real (0 constants). With the trained
  programs as transcripts, experiment 1 must be ``critical`` with
  ``degenerate_outputs`` (its length collapse is genuine too); 2-8 must stay quiet
  (2-4 ``finished``; 5-8, whose programs are not published, are metrics only and
  ``insufficient``: too few rules can judge them). From the reward curves alone, every
  experiment (1 included) looks like learning, nothing above info fires (the hack is
  in the outputs only), and the run is ``insufficient``, not called healthy.
- astOwOlfo reward hacking (big_run_reward_hacking_by_epoch.csv): per environment, the
  classifier's hacking counts. Hand-built runs from those figures: OmitDescriptionEnv
  hacks from the first epoch (30 of 64) to nearly all, AEEnv from 5 of 64 to 59 of 64;
  with the hacking rollouts sharing one exploit text both must be ``critical`` with
  ``degenerate_outputs``. BashCodeforcesEnv (at most 7 of 64 hacking, reward 0.66 to
  0.87 with one dip that every environment shows at epochs 576-640) and SyntheticEnv
  (slow real gains) are healthy: nothing above info, including across the recovery
  from the dip; from curves alone they are ``insufficient``, not ``finished``.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from rlstream.fleet.read import read_latest
from rlstream.pipeline.local import analyze_local

from .build import cog_run, curve_run, realruns_dir

REAL = realruns_dir()
pytestmark = pytest.mark.skipif(
    REAL is None, reason="../shared/realruns is not beside the repository (real logs absent)"
)
COG = "tinker_cookbook_cog_rl"
HACK_CSV = Path("astOwOlfo_tinker_reward_hacking") / "big_run_reward_hacking_by_epoch.csv"
QUIET = {"info"}  # severities allowed on runs expected to be healthy


def _latest(out: Path) -> dict[str, dict]:
    return {r["run_id"]: r for r in read_latest(str(out))}


def _loud(row: dict) -> set[str]:
    """Codes firing at warning or critical."""
    return {
        f["code"]
        for f in row["findings"] or []
        if f["state"] == "firing" and f["severity"] not in QUIET
    }


@pytest.fixture(scope="module")
def analysed(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict]:
    assert REAL is not None
    tmp = tmp_path_factory.mktemp("realruns")
    full, curves = tmp / "full", tmp / "curves"
    full.mkdir()
    curves.mkdir()
    for n in range(1, 9):
        exp = REAL / COG / f"experiment_{n}"
        cog_run(exp, full)
        cog_run(exp, curves, with_rollouts=False)
    csv_path = REAL / HACK_CSV
    for env in ("OmitDescriptionEnv", "AEEnv"):
        curve_run(csv_path, env, full, with_rollouts=True)
    for env in ("BashCodeforcesEnv", "SyntheticEnv", "OmitDescriptionEnv"):
        curve_run(csv_path, env, curves)
    out = {}
    for name, root in (("full", full), ("curves", curves)):
        analyze_local([str(root)], str(tmp / f"out-{name}"))
        out.update({f"{name}:{k}": v for k, v in _latest(tmp / f"out-{name}").items()})
    return out


def test_every_run_was_analysed(analysed):
    assert len(analysed) == 8 + 2 + 8 + 3
    for row in analysed.values():
        assert row["last_step"] is not None and row["last_step"] >= 29


def test_cog_experiment_1_reward_hack_is_critical_from_transcripts(analysed):
    row = analysed["full:cog-experiment_1"]
    assert row["status"] == "critical", row["findings"]
    assert "degenerate_outputs" in _loud(row)
    assert _loud(row) <= {"degenerate_outputs", "length_collapse"}, row["findings"]


def _not_judged(row: dict) -> None:
    """Metrics only: too few rules can speak, so the run is not called healthy, and
    it says why."""
    assert row["status"] == "insufficient" and row["judged"] == "insufficient", row
    assert row["finished"] is True
    assert re.match(r"\d+ of 21 rules evaluable on its files, at least 13 needed", row["missing"])


@pytest.mark.parametrize("n", range(2, 9))
def test_cog_real_learning_stays_healthy(analysed, n):
    row = analysed[f"full:cog-experiment_{n}"]
    assert _loud(row) == set()
    if n <= 4:  # transcripts built from the trained programs: judged
        assert row["status"] == "finished", row["findings"]
        assert row["judged"] == "judged"
    else:  # no programs published: metrics only
        _not_judged(row)


@pytest.mark.parametrize("n", range(1, 9))
def test_cog_reward_curves_alone_look_like_learning(analysed, n):
    # Real timestamps are months old; the runs finished, so they are never stalled.
    row = analysed[f"curves:cog-experiment_{n}"]
    assert _loud(row) == set()
    _not_judged(row)


@pytest.mark.parametrize("env", ["OmitDescriptionEnv", "AEEnv"])
def test_hacking_environments_are_critical_from_transcripts(analysed, env):
    row = analysed[f"full:hack-{env}-rollouts"]
    assert row["status"] == "critical", row["findings"]
    assert "degenerate_outputs" in _loud(row)


@pytest.mark.parametrize("env", ["BashCodeforcesEnv", "SyntheticEnv"])
def test_published_reward_curves_do_not_raise_alarms(analysed, env):
    # Curves only: Bash and Synthetic learn honestly.
    row = analysed[f"curves:hack-{env}"]
    assert _loud(row) == set()
    _not_judged(row)


def test_a_hack_whose_reward_holds_keeps_its_finding_to_the_end(analysed):
    # OmitDescription's rollouts are hacks by the study's own labels (64 of 64 at the
    # end); its curve jumps back from a dip to 0.99 above its earlier best and stays
    # there: reward_too_fast fires and is still firing when the run ends, so the run
    # does not end green, and tasks_mastered's "stop or move on" is not given beside it.
    row = analysed["curves:hack-OmitDescriptionEnv"]
    firing = [f for f in row["findings"] if f["state"] == "firing"]
    assert [f["code"] for f in firing] == ["reward_too_fast"], row["findings"]
    assert row["status"] == "warning"
