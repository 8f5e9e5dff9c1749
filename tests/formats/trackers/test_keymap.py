"""Trainer recognition and key mapping on the tracker fixtures (verl keys in the W&B
and TensorBoard-tensor runs, transformers-style keys in the Trackio run)."""

from __future__ import annotations

import pytest

from rlstream.formats.trackers.keymap import canonical, recognise
from rlstream.formats.trackers.sqlite_stores import connect, read_trackio
from rlstream.formats.trackers.wandb import read_wandb
from tests.formats.trackers.helpers import FIXTURES, expected


def test_verl_keys_in_a_wandb_run_map_and_unknown_keys_stay():
    rows = read_wandb((FIXTURES / expected("wandb")["file"]).read_bytes()).rows
    keys = {k for r in rows for k in r}
    assert recognise(keys) == "verl"
    row = canonical(rows[3], "verl")
    assert row["step"] == 3
    assert row["reward/mean_with_unusable"] == pytest.approx(0.1 + 0.002 * 3)
    assert row["sampling/entropy_estimate"] == pytest.approx(1.0 - 0.001 * 3)
    assert row["completion/len_mean"] == 203.0
    assert row["actor/pg_loss"] == 0.5  # unknown to the map: kept
    assert "critic/score/mean" not in row


def test_transformers_prefixes_and_global_step():
    row = {
        "step": 12,
        "time": 1.0,
        "train/reward": 0.4,
        "train/frac_reward_zero_std": 0.25,
        "train/global_step": 30.0,
        "eval_gsm8k": 0.5,
        "train/loss": 0.1,
    }
    assert recognise(set(row)) == "trl"
    assert canonical(row, "trl") == {
        "step": 30,
        "time": 1.0,
        "reward/mean_with_unusable": 0.4,
        "reward/no_variance_frac": 0.25,
        "eval/gsm8k": 0.5,
        "train/loss": 0.1,
    }
    mlflow_raw = {"step": 3, "time": 2.0, "reward": 0.2, "completions/clipped_ratio": 0.1}
    assert recognise(set(mlflow_raw)) == "trl"
    assert canonical(mlflow_raw, "trl")["completion/truncated_frac"] == 0.1


def test_a_run_of_no_known_trainer_is_kept_as_is():
    rows = read_trackio(connect(FIXTURES / "trackio" / "rl-fixture.db"), "grpo-b").rows
    assert recognise({k for r in rows for k in r}) is None
    assert canonical(rows[0], None) == rows[0]
