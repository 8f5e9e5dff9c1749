"""tinker-cookbook RL runs (`log_path`): metrics.jsonl, config.json, per-iteration rollouts.

Writers (thinking-machines-lab/tinker-cookbook, cited in docs/formats.md):
`stores/training_store.py` `write_metrics` appends `{"step": i_batch, **metrics}` to
`metrics.jsonl` (one `json.dumps` line per iteration; a restarted run with the same
`log_path` appends to the same file); `write_config` writes `config.json` (indent 2);
`write_rollouts` writes `iteration_NNNNNN/train_rollout_summaries.jsonl` whole, one
record per trajectory (`rl/rollout_logging.py` `serialize_rollout_summaries`:
`schema_version`, `split`, `iteration`, `group_idx`, `traj_idx`, `tags`,
`sampling_client_step`, `total_reward`, `final_reward`, `trajectory_metrics`,
`steps` [{`step_idx`, `ob_len`, `ac_len`, `reward`, `episode_done`, `metrics`,
`logs`}], `final_ob_len`).

Mapping (canonical key <- tinker key): `reward/mean_with_unusable` (every
trajectory, constant groups included) <- `env/all/reward/total`;
`reward/no_variance_frac` <- `env/all/by_group/frac_all_good + frac_all_bad`;
`completion/len_mean` <- `env/all/ac_tokens_per_turn`; `sampling/entropy_estimate`
<- `optim/entropy`; `train/mismatch_kl` <- `optim/kl_sample_train_v2` (the k2
estimator 0.5·mean(d²), equal to k3 to second order); `eval/<name>` <-
`<name>/env/all/reward/total` (`rl/metric_util.py` `RLTestSetEvaluator`, name `test`
by default, logged in the same line every `eval_every` iterations). Rollout summaries become
rollout records (reward `total_reward`, lag from `sampling_client_step`, groups whose
rewards are all equal discarded as `no_variance`) and sample-only transcripts (one
generation per turn of `ac_len` tokens). Truncation is not written: null.
`iteration_NNNNNN/train_logtree.json` gives the logged groups' text
(`rlstream.formats.tinker_logtree`).

With capture enabled (`tinker_cookbook/capture/exporter.py` `JsonlFileSink`: batches of
`json.dumps(record)` lines appended to `capture/<kind>.jsonl`; `capture/instrument.py`
builds a `sample` record per sampling call: `kind`, `scope` (the caller's `capture(...)`
keys, `iteration` among them), `created_at`, `num_samples`, `prompt_length`, ...,
`samples` [{`tokens`, `logprobs`, `stop_reason`}], `status`), `capture/sample.jsonl`
is followed as a tail: each sample's logprobs become a sampler-only generation of step
`scope.iteration`, from which the entropy estimate is recomputed (the tokens and
lengths stay the summaries'). A record without `scope.iteration` is quarantined
(`missing_field:scope.iteration`: it cannot be put on a step); records of another
split (`scope.split` other than `train`), of `purpose` `eval`, or without samples
(`status` `error`) are skipped.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from rlstream.formats.base import NO_FAILURES, RunInfo, StepFiles, Stream, Tail, first_line
from rlstream.formats.records import (
    BadRecord,
    Heartbeat,
    KeyPattern,
    StepRecord,
    Transcript,
    finite_number,
    flatten,
    float_array,
    group_discards,
    is_int,
    json_object,
    jsonl_records,
    map_keys,
    split_values,
    step_of,
)
from rlstream.formats.tinker_logtree import LOGTREE, logtree

METRICS = "metrics.jsonl"
CONFIG = "config.json"
CAPTURE = "capture/sample.jsonl"
ITERATION = re.compile(r"iteration_(\d+)")
SUMMARY = "train_rollout_summaries.jsonl"
SUMMARIES = re.compile(r"train_rollout_summaries\.jsonl|train_logtree\.json")
"""A step's files: the rollout summaries and, where groups were logged, the logtree
(`rlstream.formats.tinker_logtree`). `rl/train.py` writes the logtree when the
iteration's sampling scope closes and the summaries after it, so the summaries mark
the folder complete (a poll between the two would otherwise read the logtree alone
and never come back for the summaries)."""

KEYS = {
    "env/all/reward/total": "reward/mean_with_unusable",
    "env/all/ac_tokens_per_turn": "completion/len_mean",
    "optim/entropy": "sampling/entropy_estimate",
    "optim/kl_sample_train_v2": "train/mismatch_kl",
}
EVAL_KEYS: tuple[KeyPattern, ...] = (
    (re.compile(r"(?!env/)([^/]+)/env/all/reward/total"), r"eval/\1"),
)
"""`RLTestSetEvaluator(name=...)` prefixes its metrics with its name (`test` unless
told otherwise): its mean reward is a held-out score."""


class TinkerFormat:
    """tinker-cookbook's `log_path` folders."""

    name = "tinker"
    run_files = (METRICS,)
    unavailable: frozenset[str] = NO_FAILURES | {"truncated_frac"}

    def detect(self, listing: frozenset[str], peek: Callable[[str], bytes | None]) -> bool:
        if METRICS not in listing:
            return False
        obj = json_object(first_line(peek(METRICS)))
        if obj is not None:
            if isinstance(obj.get("data"), dict) or "time" in obj:
                return False  # verl's file logger, prime-rl's monitor
            return "step" in obj and any(
                k.startswith(("env/", "optim/", "progress/", "time/")) for k in obj
            )
        return CONFIG in listing and any(ITERATION.fullmatch(n.rstrip("/")) for n in listing)

    def identity(
        self, name: str, listing: frozenset[str], read: Callable[[str], bytes | None]
    ) -> RunInfo:
        config: dict[str, Any] = {}
        if CONFIG in listing:
            data = read(CONFIG)
            obj = json_object(data)
            if obj is None:
                raise BadRecord("config.json is not a JSON object")
            config = {"tinker": obj}
            if is_int(obj.get("max_tokens")):
                config["sampling"] = {"max_tokens": obj["max_tokens"]}
            # rl/train.py: async training's staleness bound (AsyncConfig); recipes' CLI
            # configs carry it at the top level.
            asy = obj.get("async_config")
            off = (asy if isinstance(asy, dict) else {}).get("max_steps_off_policy")
            off = off if is_int(off) else obj.get("max_steps_off_policy")
            if is_int(off):
                config["training"] = {"max_steps_off_policy": off}
        return RunInfo(name, config)

    def streams(self, listing: frozenset[str]) -> tuple[Stream, ...]:
        return (
            Tail(METRICS, "steps"),
            StepFiles("", ITERATION, SUMMARIES, "both", marker=SUMMARY),
            Tail(CAPTURE, "generations", optional=True),
        )

    def parse_line(self, kind: str, obj: Any) -> StepRecord | Heartbeat | dict[str, Any]:
        if not isinstance(obj, dict):
            raise BadRecord("not_an_object")
        if kind == "generations":
            return _sample_call(obj)
        step = step_of(obj)
        metrics, text = split_values(flatten({k: v for k, v in obj.items() if k != "step"}))
        good = metrics.get("env/all/by_group/frac_all_good")
        bad = metrics.get("env/all/by_group/frac_all_bad")
        out = map_keys(metrics, KEYS, EVAL_KEYS)
        if good is not None and bad is not None:
            out["reward/no_variance_frac"] = good + bad
        return StepRecord(step, None, out, text)

    def parse_file(self, kind: str, data: bytes, name: str, step: int) -> list[Any]:
        if name.endswith(LOGTREE):
            return logtree(data, name, step)
        recs = jsonl_records(data, lambda obj: _trajectory(obj, step))
        return group_discards(recs)

    def parse_snapshot(self, data: bytes) -> list[StepRecord]:
        return []


def _sample_call(obj: dict[str, Any]) -> Transcript | Heartbeat:
    """A captured `sample` record: its samples' sampler logprobs (trace "sampler")."""
    scope = obj.get("scope")
    if not isinstance(scope, dict):
        raise BadRecord("missing_field:scope" if scope is None else "invalid_field:scope")
    if scope.get("split", "train") != "train" or scope.get("purpose") == "eval":
        return Heartbeat(None)
    samples = obj.get("samples")
    if samples is None and obj.get("status") != "ok":
        return Heartbeat(None)  # a failed call: nothing was sampled
    try:
        step = step_of(scope, "iteration")
    except BadRecord as e:
        raise BadRecord(str(e).replace(":", ":scope.", 1)) from None
    if not isinstance(samples, list):
        raise BadRecord("invalid_field:samples")
    ls = []
    for i, smp in enumerate(samples):
        lp = smp.get("logprobs") if isinstance(smp, dict) else None
        if lp is None:
            continue
        n = len(lp) if isinstance(lp, list) else -1
        ls.append(float_array(lp, n, f"samples[{i}].logprobs"))
    aid = f"{step}-capture-{obj.get('seq_id', '')}"
    return Transcript(aid, "", step, False, "sampler", [], [], ls, [], [], None, None)


def _trajectory(obj: Any, step: int) -> tuple[dict[str, Any], Transcript]:
    if not isinstance(obj, dict):
        raise BadRecord("not_an_object")
    if obj.get("split", "train") != "train":
        raise BadRecord("invalid_field:split")
    it = step_of(obj, "iteration")
    if it != step:
        raise BadRecord("iteration_mismatch")
    g, t = step_of(obj, "group_idx"), step_of(obj, "traj_idx")
    if "total_reward" not in obj:
        raise BadRecord("missing_field:total_reward")
    reward = finite_number(obj["total_reward"], "total_reward")
    pv = obj.get("sampling_client_step")
    if pv is not None and (not is_int(pv) or pv < 0):
        raise BadRecord("invalid_field:sampling_client_step")
    turns = obj.get("steps")
    if not isinstance(turns, list):
        raise BadRecord("invalid_field:steps")
    lens = []
    for i, s in enumerate(turns):
        n = s.get("ac_len") if isinstance(s, dict) else None
        if not is_int(n) or n < 0:
            raise BadRecord(f"invalid_field:steps[{i}].ac_len")
        lens.append(n)
    aid, gid = f"{step}-{g}-{t}", f"{step}-{g}"
    rollout = {
        "attempt_id": aid,
        "group_id": gid,
        "task_id": gid,
        "step": step,
        "policy_version": pv,
        "reward": reward,
        "trained": True,
        "discard_reason": None,
        "metadata": {"turns": len(turns)},
    }
    tr = Transcript(
        aid, gid, step, True, "samples", lens, [False] * len(lens), [], [], [], None, None
    )
    return rollout, tr


TINKER = TinkerFormat()
