"""The learning trainer (`rlstream simulate --learn`): presets do what they say because
of their configuration, the files follow the run format, and labels are observations.

Each preset trains one 150-step run (a few seconds). Figures come from labels.json's
`observed` block, which the trainer fills from what happened, and are cross-checked
against the files it wrote.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from rlstream.cli import main as cli_main
from rlstream.simulate.learn import policy as P
from rlstream.simulate.learn.presets import LearnConfig
from rlstream.simulate.learn.trainer import Trainer

STEPS = 150


def _train(tmp_path: Path, preset: str, seed: int = 5) -> tuple[Path, dict]:
    root = tmp_path / preset
    rc = cli_main(
        ["simulate", str(root), "--learn", "--preset", preset, "--steps", str(STEPS),
         "--seed", str(seed)]
    )  # fmt: skip
    assert rc == 0
    labels = json.loads((root / "labels.json").read_text())
    (lab,) = labels["runs"]
    return root / lab["run"], lab


def _lines(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_text().splitlines()]


def test_healthy_learns_and_sharpens_without_collapsing(tmp_path):
    run, lab = _train(tmp_path, "healthy")
    o = lab["observed"]
    assert lab["expected_codes"] == [] and lab["onset_step"] is None
    assert o["reward"][1] > o["reward"][0] + 0.25
    assert o["true_score"][1] > o["true_score"][0] + 0.25
    assert o["heldout_true_score"][1] > o["heldout_true_score"][0] + 0.2
    assert o["policy_entropy"][0] * 0.2 < o["policy_entropy"][1] < o["policy_entropy"][0]

    # The files: reward/mean is the trained attempts' mean, group_std_mean the guide's
    # (trained groups), trainer logprobs only on trained attempts, eval every 10 steps.
    steps = [s for s in _lines(run / "steps.jsonl") if "step" in s]
    rolls = _lines(run / "rollouts.jsonl")
    assert len(steps) == STEPS
    s = steps[40]
    rs = [r for r in rolls if r["step"] == 40]
    trained = [r for r in rs if r["trained"]]
    assert s["reward/mean"] == pytest.approx(np.mean([r["reward"] for r in trained]))
    by_g: dict[str, list[float]] = {}
    for r in trained:
        by_g.setdefault(r["group_id"], []).append(r["reward"])
    assert s["reward/group_std_mean"] == pytest.approx(np.mean([np.std(v) for v in by_g.values()]))
    assert ("eval/heldout" in s) and ("eval/heldout" not in steps[41])
    for r in rs:
        doc = json.loads((run / "transcripts" / f"{r['attempt_id']}.json").read_text())
        (gen,) = doc["generations"]
        assert ("trainer_logprobs" in gen) == r["trained"]
        assert len(gen["completion_tokens"]) == gen["completion_len"]
        assert all(0 <= t < P.VOCAB_SIZE for t in gen["completion_tokens"])
        assert r["policy_version"] == 40  # sync


def test_lr_too_high_collapses_entropy_and_repeats(tmp_path):
    _, lab = _train(tmp_path, "lr_too_high")
    o = lab["observed"]
    assert o["policy_entropy"][1] < 0.1 * o["policy_entropy"][0]
    assert o["distinct_completions"][1] <= 0.5  # completions repeat within groups
    assert lab["expected_codes"] == ["entropy_collapse"]
    assert 0 < lab["onset_step"] < STEPS


def test_loophole_reward_climbs_true_score_does_not(tmp_path):
    _, lab = _train(tmp_path, "loophole")
    o = lab["observed"]
    assert o["reward"][1] - o["reward"][0] >= 0.4
    assert o["true_score"][1] - o["true_score"][0] < 0.1
    assert o["heldout_true_score"][1] - o["heldout_true_score"][0] < 0.1
    assert o["loophole_use"][1] >= 0.5
    assert lab["expected_codes"] == ["heldout_gap"]


def test_too_hard_has_no_variance_from_the_start(tmp_path):
    run, lab = _train(tmp_path, "too_hard")
    o = lab["observed"]
    assert o["no_variance_share_first_20"] >= 0.9
    assert o["reward"][0] <= 0.05 and o["reward"][1] <= 0.1
    assert lab["expected_codes"] == ["tasks_too_hard"] and lab["onset_step"] == 0
    steps = [s for s in _lines(run / "steps.jsonl") if "step" in s]
    assert np.mean([s["discard/groups/no_variance"] for s in steps[:20]]) >= 3.5  # of 4


def test_stale_sampler_lags_further_and_kl_rises(tmp_path):
    run, lab = _train(tmp_path, "stale_sampler")
    o = lab["observed"]
    assert o["mismatch_kl"][1] >= 4 * o["mismatch_kl"][0]
    assert lab["expected_codes"] == ["mismatch_kl_rising"]
    steps = [s for s in _lines(run / "steps.jsonl") if "step" in s]
    early = np.mean([s.get("freshness/lag_mean", 0) for s in steps[:20]])
    late = np.mean([s.get("freshness/lag_mean", 0) for s in steps[-20:]])
    assert late > early + 8


def test_sampler_logprobs_come_from_the_sampler():
    """Sync, float16 sampler: its logprobs differ from the trainer's float64 ones only by
    rounding; a sampler 3 versions behind differs by more."""
    c = LearnConfig(learning_rate=3.0)
    tr = Trainer(c, 50, [1, 2])
    for t in range(30):
        if t == 27:
            behind = tr.params.copy()
        tr.step(t)
    rng = np.random.default_rng(0)
    prompts = tr.tasks[:64]
    comp = P.sample(tr.params, prompts, c.max_tokens, rng, "float16")
    lt, _ = P.score(tr.params, comp, c.answer_len)
    assert np.max(np.abs(lt - comp.ls_T)) < 0.02
    old = P.sample(behind, prompts, c.max_tokens, rng, "float16")
    lt_old, _ = P.score(tr.params, old, c.answer_len)
    assert np.mean(np.abs(lt_old - old.ls_T)) > 5 * np.mean(np.abs(lt - comp.ls_T))


def test_bad_preset_is_a_clear_error(tmp_path, capsys):
    assert cli_main(["simulate", str(tmp_path / "x"), "--learn", "--preset", "nope"]) == 2
    assert "unknown preset 'nope'" in capsys.readouterr().err


def test_a_healthy_configuration_whose_entropy_went_to_zero_is_labelled_a_collapse():
    from rlstream.simulate.learn.observe import label_run
    from rlstream.simulate.learn.trainer import Observed

    fields = Observed.__dataclass_fields__
    base = {k: 0.5 for k in fields}

    def run(ents):
        return [Observed(**{**base, "policy_entropy": e}) for e in ents]

    sharpening = [2.0] * 20 + [0.8] * 80  # to 0.4 of its start: healthy
    codes, onset, facts = label_run("healthy", run(sharpening), [None] * 100)
    assert codes == () and onset is None and facts["entropy_collapse_observed"] is False
    dip = [2.0] * 20 + [0.9] * 30 + [0.05] * 20 + [0.4] * 30  # near zero, then back
    codes, onset, facts = label_run("healthy", run(dip), [None] * 100)
    assert codes == ("entropy_collapse",) and facts["entropy_collapse_observed"] is True
    assert onset == 24  # first 5-step mean at or below half the start (2.0)


def test_loophole_label_gives_the_step_its_text_first_shows_the_shortcut(tmp_path):
    """labels.json's `also_expected` transcript_hack_flags onset is the first step at
    which more than 2 % of the trained attempts of reward >= 0.5 write the wildcard
    answer and say so: recounted here from the transcripts written."""
    run, lab = _train(tmp_path, "loophole")
    share: dict[int, list[bool]] = {}
    for p in (run / "transcripts").glob("*.json"):
        doc = json.loads(p.read_text())
        if doc["trains"] and doc["reward"] is not None and doc["reward"] >= 0.5:
            said = any("hard-coded digit" in (g.get("text") or "") for g in doc["generations"])
            share.setdefault(doc["step"], []).append(said)
    onset = min(s for s, v in share.items() if sum(v) / len(v) > 0.02)
    assert lab["also_expected"] == {"transcript_hack_flags": onset}
    assert lab["observed"]["transcript_hack_onset"] == onset
    _, honest = _train(tmp_path, "healthy")
    assert honest["also_expected"] == {} and honest["observed"]["transcript_hack_onset"] is None
