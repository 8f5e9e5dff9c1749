"""Tracker keys onto rlstream's canonical keys, for the trainers whose keys the folder
readers already map: verl and TRL/transformers (first cut; the other trainers of
issue 29 are not mapped yet).

`recognise(keys)` names the trainer from a run's keys ("verl", "trl" or None);
`canonical(row, trainer)` returns the row under canonical names (`formats.verl.KEYS`,
`formats.trl.KEYS`, the sources cited in docs/formats.md), unknown keys kept as they
are, and the trainer's step: transformers' callbacks (`WandbCallback`,
`TensorBoardCallback`, `TrackioCallback`, `integration_utils.rewrite_logs`) prefix
training keys with `train/` and turn `eval_<name>` into `eval/<name>`, and log
`train/global_step` (the training step: Trackio's and W&B's own step counters differ
from it); MLflow gets the raw keys (`loss`, `reward`). verl passes its step to every
tracker (`Tracking.log(data, step)`), so the tracker's step is the trainer's.
"""

from __future__ import annotations

from typing import Any

from rlstream.formats.trl import KEYS as TRL_KEYS
from rlstream.formats.verl import KEYS as VERL_KEYS

_TRL_MARKERS = {"frac_reward_zero_std", "completions/clipped_ratio", "completions/mean_length"}


def _trl_key(key: str) -> str:
    """A TRL key without transformers' tracker prefix."""
    return key[6:] if key.startswith("train/") else key


def recognise(keys: set[str]) -> str | None:
    if keys & set(VERL_KEYS):
        return "verl"
    if {_trl_key(k) for k in keys} & _TRL_MARKERS:
        return "trl"
    return None


def canonical(row: dict[str, Any], trainer: str | None) -> dict[str, Any]:
    out: dict[str, Any] = {"step": row["step"], "time": row.get("time")}
    for key, value in row.items():
        if key in ("step", "time"):
            continue
        if trainer == "verl":
            out[VERL_KEYS.get(key, key)] = value
        elif trainer == "trl":
            if key == "train/global_step":
                out["step"] = int(value)
            elif key.startswith("eval/") or key.startswith("eval_"):
                out["eval/" + key[5:]] = value
            else:
                bare = _trl_key(key)
                out[TRL_KEYS.get(bare, key)] = value
        else:
            out[key] = value
    return out
