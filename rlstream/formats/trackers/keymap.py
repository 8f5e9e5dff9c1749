"""Tracker keys onto rlstream's canonical keys, per trainer (sources in docs/formats.md).

`recognise(keys)` names the trainer from a run's keys (`TRAINERS`, tried in order: a
trainer's `markers` are keys only it logs), or None; `canonical(row, trainer)` returns
the row under canonical names, unknown keys kept as they are, with the trainer's own
step where the row holds it (`step_keys`; else the tracker's step, which is the
trainer's when it passes one: verl, NeMo-RL, SkyRL, ROLL, prime-rl, AReaL).

transformers' callbacks (`integration_utils.rewrite_logs`: W&B, TensorBoard, Trackio,
SwanLab) prefix training keys with `train/` and turn `eval_<name>` into
`eval/<name>`, and log `train/global_step` (the training step: Trackio's and W&B's own
counters differ from it); MLflow gets the raw keys (`loss`, `reward`). OpenRLHF's
loggers (`openrlhf/utils/logging_utils.py`) prefix `train/` and `eval/` and log
`train/global_step` too. slime logs its step under `rollout/step`, `train/step` or
`eval/step` (`slime/observability/logging_utils.py`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from rlstream.formats.prime_rl import AGENT_KEYS as PRIME_PATTERNS
from rlstream.formats.prime_rl import KEYS as PRIME_KEYS
from rlstream.formats.records import KeyPattern, map_keys
from rlstream.formats.trl import KEYS as TRL_KEYS
from rlstream.formats.verl import EVAL_KEYS as VERL_PATTERNS
from rlstream.formats.verl import KEYS as VERL_KEYS


@dataclass(frozen=True, slots=True)
class Trainer:
    name: str
    markers: frozenset[str]
    keys: dict[str, str]
    patterns: tuple[KeyPattern, ...] = ()
    step_keys: tuple[str, ...] = ()
    marker_re: re.Pattern[str] | None = None


REWARD = "reward/mean_with_unusable"
LEN = "completion/len_mean"
TRUNC = "completion/truncated_frac"
ENTROPY = "sampling/entropy_estimate"
KL = "train/mismatch_kl"

TRAINERS: tuple[Trainer, ...] = (
    Trainer(  # roll/utils/metrics/metrics_manager.py (prefixes "token", "critic")
        "roll",
        frozenset({"token/response_length/mean", "critic/entropy/mean", "critic/correct/mean"}),
        {
            "critic/score/mean": REWARD,
            "token/response_length/mean": LEN,
            "critic/entropy/mean": ENTROPY,
        },
    ),
    Trainer("verl", frozenset(VERL_KEYS), VERL_KEYS, VERL_PATTERNS),
    Trainer(  # nemo_rl/algorithms/grpo.py, nemo_rl/algorithms/loss/loss_functions.py
        "nemo-rl",
        frozenset(
            {
                "train/gen_kl_error",
                "train/approx_entropy",
                "train/baseline_reward/pct_0",
                "train/mean_gen_tokens_per_sample",
            }
        ),
        {
            "train/reward": REWARD,
            "train/gen_kl_error": KL,
            "train/approx_entropy": ENTROPY,
            "train/mean_gen_tokens_per_sample": LEN,
        },
        ((re.compile(r"validation/accuracy"), "eval/accuracy"),),
    ),
    Trainer(  # openrlhf/trainer/ppo_trainer.py, openrlhf/trainer/ray/ppo_actor.py
        "openrlhf",
        frozenset(
            {
                "train/rollout/reward_mean",
                "train/vllm_kl",
                "train/rollout/truncated_rate",
                "train/ppo_clip_ratio",
            }
        ),
        {
            "train/rollout/reward_mean": REWARD,
            "train/rollout/response_length_mean": LEN,
            "train/rollout/truncated_rate": TRUNC,
            "train/vllm_kl": KL,
        },
        ((re.compile(r"eval/eval_(.+)_pass1"), r"eval/\1"),),
        ("train/global_step", "eval/global_step"),
    ),
    Trainer(  # slime/observability/rollout_metrics.py, train_metric_utils.py
        "slime",
        frozenset(
            {
                "rollout/raw_reward",
                "rollout/step",
                "train/train_rollout_logprob_abs_diff",
                "rollout/truncated_ratio",
            }
        ),
        {
            "rollout/raw_reward": REWARD,
            "rollout/response_len/mean": LEN,
            "rollout/truncated_ratio": TRUNC,
            "train/entropy_loss": ENTROPY,
        },
        (),
        ("rollout/step", "train/step", "eval/step"),
    ),
    Trainer(  # skyrl/train/trainer.py, skyrl/train/generators/utils.py
        "skyrl",
        frozenset({"reward/avg_raw_reward", "generate/avg_num_tokens", "policy/policy_entropy"}),
        {
            "reward/avg_raw_reward": REWARD,
            "generate/avg_num_tokens": LEN,
            "policy/policy_entropy": ENTROPY,
        },
    ),
    Trainer(  # areal/trainer/ppo/actor.py (scope "ppo_actor"; stats_tracker "<key>/avg")
        "areal",
        frozenset({"ppo_actor/task_reward/avg", "ppo_actor/no_eos_ratios/avg"}),
        {
            "ppo_actor/task_reward/avg": REWARD,
            "ppo_actor/no_eos_ratios/avg": TRUNC,
            "ppo_actor/update/entropy/avg": ENTROPY,
            "ppo_actor/update/behave_approx_kl/avg": KL,
        },
    ),
    Trainer(
        "prime-rl",
        frozenset(PRIME_KEYS),
        PRIME_KEYS,
        PRIME_PATTERNS,
        marker_re=re.compile(r"train/agg/(all|effective)/.+"),
    ),
)
BY_NAME = {t.name: t for t in TRAINERS}

_TRL_MARKERS = {"frac_reward_zero_std", "completions/clipped_ratio", "completions/mean_length"}
_TRL_STEP = "train/global_step"


def _trl_key(key: str) -> str:
    """A TRL key without transformers' tracker prefix."""
    return key[6:] if key.startswith("train/") else key


def recognise(keys: set[str]) -> str | None:
    for t in TRAINERS:
        if keys & t.markers or (t.marker_re and any(t.marker_re.fullmatch(k) for k in keys)):
            return t.name
    if {_trl_key(k) for k in keys} & _TRL_MARKERS or _TRL_STEP in keys:
        return "trl"
    return None


def canonical(row: dict[str, Any], trainer: str | None) -> dict[str, Any]:
    out: dict[str, Any] = {"step": row["step"], "time": row.get("time")}
    values = {k: v for k, v in row.items() if k not in ("step", "time")}
    if trainer == "trl":
        for key, value in values.items():
            if key == _TRL_STEP:
                out["step"] = int(value)
            elif key.startswith("eval/") or key.startswith("eval_"):
                out["eval/" + key[5:]] = value
            else:
                out[TRL_KEYS.get(_trl_key(key), key)] = value
        return out
    t = BY_NAME.get(trainer or "")
    if t is None:
        out.update(values)
        return out
    for key in t.step_keys:
        v = values.get(key)
        if isinstance(v, int | float) and v == v and abs(v) != float("inf"):
            out["step"] = int(v)
            break
    for key in t.step_keys:
        values.pop(key, None)
    out.update(map_keys(values, t.keys, t.patterns))
    return out
