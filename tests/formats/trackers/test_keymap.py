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


# One logged row per trainer, keys as each trainer's source writes them (docs/formats.md
# cites the files), and the canonical keys docs/formats.md says they become.
TRAINER_ROWS = [
    (
        "openrlhf",  # openrlhf/utils/logging_utils.py: "train/%s", global_step
        {"train/rollout/reward_mean": 0.3, "train/rollout/response_length_mean": 410.0,
         "train/rollout/truncated_rate": 0.05, "train/vllm_kl": 0.002,
         "train/policy_loss": 0.1, "train/global_step": 17.0},
        {"reward/mean_with_unusable": 0.3, "completion/len_mean": 410.0,
         "completion/truncated_frac": 0.05, "train/mismatch_kl": 0.002,
         "train/policy_loss": 0.1},
        17,
    ),
    (
        "nemo-rl",  # nemo_rl/algorithms/grpo.py, loss_functions.py; logger prefix "train"
        {"train/reward": 0.4, "train/gen_kl_error": 0.001, "train/approx_entropy": 0.7,
         "train/mean_gen_tokens_per_sample": 300.0, "train/baseline_reward/pct_0": 20.0},
        {"reward/mean_with_unusable": 0.4, "train/mismatch_kl": 0.001,
         "sampling/entropy_estimate": 0.7, "completion/len_mean": 300.0,
         "train/baseline_reward/pct_0": 20.0},
        5,
    ),
    (
        "slime",  # slime/observability/rollout_metrics.py: "rollout/" keys, rollout/step
        {"rollout/raw_reward": 0.6, "rollout/response_len/mean": 512.0,
         "rollout/truncated_ratio": 0.1, "rollout/step": 9.0, "rollout/zero_std/count_0": 3.0},
        {"reward/mean_with_unusable": 0.6, "completion/len_mean": 512.0,
         "completion/truncated_frac": 0.1, "rollout/zero_std/count_0": 3.0},
        9,
    ),
    (
        "skyrl",  # skyrl/train/trainer.py, skyrl/train/generators/utils.py
        {"reward/avg_raw_reward": 0.2, "generate/avg_num_tokens": 220.0,
         "policy/policy_entropy": 0.9},
        {"reward/mean_with_unusable": 0.2, "completion/len_mean": 220.0,
         "sampling/entropy_estimate": 0.9},
        5,
    ),
    (
        "areal",  # areal/trainer/ppo/actor.py, scope "ppo_actor", stats "<key>/avg"
        {"ppo_actor/task_reward/avg": 0.5, "ppo_actor/no_eos_ratios/avg": 0.02,
         "ppo_actor/update/entropy/avg": 0.8, "ppo_actor/update/behave_approx_kl/avg": 0.01},
        {"reward/mean_with_unusable": 0.5, "completion/truncated_frac": 0.02,
         "sampling/entropy_estimate": 0.8, "train/mismatch_kl": 0.01},
        5,
    ),
    (
        "roll",  # roll/utils/metrics/metrics_manager.py: prefixes "critic", "token"
        {"critic/score/mean": 0.7, "token/response_length/mean": 350.0,
         "critic/entropy/mean": 0.6},
        {"reward/mean_with_unusable": 0.7, "completion/len_mean": 350.0,
         "sampling/entropy_estimate": 0.6},
        5,
    ),
    (
        "prime-rl",  # as its metrics.jsonl (formats/prime_rl.py)
        {"mismatch_kl/all/mean": 0.003, "entropy/all/mean": 0.5,
         "train/agg/all/math/reward/mean": 0.45},
        {"train/mismatch_kl": 0.003, "sampling/entropy_estimate": 0.5,
         "reward/mean_with_unusable": 0.45},
        5,
    ),
]  # fmt: skip


@pytest.mark.parametrize(("trainer", "row", "want", "step"), TRAINER_ROWS)
def test_each_trainer_is_recognised_and_its_keys_mapped(trainer, row, want, step):
    assert recognise(set(row)) == trainer
    got = canonical({"step": 5, "time": 1.0, **row}, trainer)
    assert got == {"step": step, "time": 1.0, **want}


def test_verl_and_roll_share_a_reward_key_but_not_their_markers():
    assert recognise({"critic/score/mean", "actor/entropy"}) == "verl"
    assert recognise({"critic/score/mean", "critic/entropy/mean"}) == "roll"
    assert recognise({"loss", "lr"}) is None
