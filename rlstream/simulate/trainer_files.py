"""Per-trainer writers of simulated runs: what each trainer appends and rewrites.

Each `WRITERS[fmt](run, Write)` returns one list of `Write`s per step (and a last
list for the run's end), field for field from the trainer's writer:

- tinker: thinking-machines-lab/tinker-cookbook `tinker_cookbook/stores/
  training_store.py` (`write_metrics`, `write_config`, `write_rollouts`),
  `tinker_cookbook/rl/rollout_logging.py` (`serialize_rollout_summaries`),
  `tinker_cookbook/rl/metric_util.py` and `rl/metrics.py` (the metric keys);
- verl: volcengine/verl `verl/utils/tracking.py` (`FileLogger`),
  `verl/trainer/ppo/ray_trainer.py` (`_dump_generations`), `verl/trainer/ppo/
  metric_utils.py` and `rollout_corr_helper.py` (the metric keys);
- prime-rl: PrimeIntellect-ai/prime-rl `src/prime_rl/monitors/file.py`,
  `src/prime_rl/trainer/rl/token_export.py`, `src/prime_rl/orchestrator/
  orchestrator.py` and `metrics.py` (the metric keys), `trainer/rl/train.py` (five
  trainer lines per step); episodes as PrimeIntellect-ai/verifiers
  `verifiers/v1/episode.py` `Episode.to_record` dumps them. The simulator keeps no
  token's full distribution here, so an exported token's `entropy` is its sampled
  surprise `-ls` (null where the token was not sampled), whose mean over the trained
  tokens is the trainer line's `entropy/all/mean`;
- trl: huggingface/trl `trl/trainer/grpo_trainer.py` (`log`, the completions
  parquet) and transformers' `TrainerState.save_to_json`.
"""

from __future__ import annotations

import io
import json
from collections import defaultdict
from typing import Any

import numpy as np
import orjson

from rlstream.simulate.trainer_episodes import capture_samples, episode, logtree

SAVE_EVERY = 2
"""TRL's save_steps in simulated runs: trainer_state.json snapshots every 2 steps."""


def _mean(xs: list[float]) -> float | None:
    return float(np.mean(xs)) if xs else None


def _some(d: dict[str, Any]) -> dict[str, Any]:
    """A trainer logs no key for a figure of an empty set."""
    return {k: v for k, v in d.items() if v is not None}


def _figures(sd: Any, trained_only: bool = False) -> dict[str, float | None]:
    """Step figures a trainer computes from its batch: tokens of every attempt (of the
    trained ones with `trained_only`), rewards of every attempt (a failed rollout
    scores 0: trainers always have a number). None for a figure of an empty set."""
    ls, lt = sd.tokens(trained_only)
    ok = ~(np.isnan(ls) | np.isnan(lt))
    d = (lt - ls)[ok]
    w = np.exp(d)
    gens = [g for a in sd.attempts for g in a.gens]
    rewards = [a.reward or 0.0 for a in sd.attempts]
    trained = [a.reward or 0.0 for a in sd.attempts if a.trained]
    groups: dict[str, list[float]] = defaultdict(list)
    for a in sd.attempts:
        groups[a.group_id].append(a.reward if a.reward is not None else 0.0)
    n_groups = max(len(groups), 1)
    same = [g for g in groups.values() if len(set(g)) == 1]
    return {
        "reward_all": _mean(rewards),
        "reward_trained": _mean(trained),
        "reward_std": float(np.std(rewards)) if rewards else None,
        "frac_all_good": sum(1 for g in same if g[0] >= 0.5) / n_groups,
        "frac_all_bad": sum(1 for g in same if g[0] < 0.5) / n_groups,
        "frac_mixed": (len(groups) - len(same)) / n_groups,
        "len_mean": _mean([g["length"] for g in gens]),
        "len_max": float(max(g["length"] for g in gens)) if gens else None,
        "truncated": _mean([float(g["truncated"]) for g in gens]),
        "entropy": float(-np.nanmean(ls)) if np.isfinite(ls).any() else None,
        "k1": float(np.mean(-d)) if d.size else None,
        "k2": float(0.5 * np.mean(d * d)) if d.size else None,
        "k3": float(np.mean(w - 1.0 - d)) if d.size else None,
        "ess": float(np.mean(w) ** 2 / np.mean(w * w)) if d.size else None,
        "turns": _mean([float(a.turns) for a in sd.attempts]),
        "episode_len": _mean(
            [float(sum(g["length"] for g in a.gens)) for a in sd.attempts if a.trained and a.gens]
        ),
        "episodes": float(len(sd.attempts)),
        "lag": _mean(
            [float(sd.step - a.policy_version) for a in sd.attempts if a.policy_version is not None]
        ),
    }


def _line(obj: dict[str, Any]) -> bytes:
    return (json.dumps(obj) + "\n").encode()


# -- tinker-cookbook ------------------------------------------------------------------


def tinker(run: Any, Write: Any) -> list[list[Any]]:
    cfg = {
        "model_name": (run.config.get("model") or {}).get("name", "sim"),
        "max_tokens": (run.config.get("sampling") or {}).get("max_tokens", 0),
        "learning_rate": (run.config.get("training") or {}).get("learning_rate", 0.0),
        "log_path": run.name,
        "loss_fn": "importance_sampling",
        "remove_constant_reward_groups": False,
    }
    training = run.config.get("training") or {}
    if training.get("mode") == "async" and training.get("max_steps_off_policy") is not None:
        # rl/train.py Config.async_config (AsyncConfig): set for async training only.
        cfg["async_config"] = {
            "max_steps_off_policy": training["max_steps_off_policy"],
            "groups_per_batch": training.get("groups_per_step", 1),
        }
    out = [[Write("config.json", json.dumps(cfg, indent=2).encode())]]
    for sd in run.steps:
        f = _figures(sd)
        gens = sum(len(a.gens) for a in sd.attempts) or 1
        m = {
            "step": sd.step,
            "progress/batch": sd.step,
            "optim/lr": cfg["learning_rate"],
            "progress/done_frac": (sd.step + 1) / len(run.steps),
            "env/all/ac_tokens_per_turn": f["len_mean"],
            "env/all/turns_per_episode": f["turns"],
            "env/all/total_episodes": len(sd.attempts),
            "env/all/total_turns": gens,
            "env/all/reward/total": f["reward_all"],
            "env/all/by_group/frac_mixed": f["frac_mixed"],
            "env/all/by_group/frac_all_good": f["frac_all_good"],
            "env/all/by_group/frac_all_bad": f["frac_all_bad"],
            "optim/kl_sample_train_v1": f["k1"],
            "optim/kl_sample_train_v2": f["k2"],
            "optim/entropy": f["entropy"],
            "time/total": 1.0,
            # RLTestSetEvaluator(name="test") every eval_every iterations, same line
            "test/env/all/reward/total": sd.reported.get("eval/heldout"),
        }
        m = _some(m)
        recs = []
        by_group: dict[str, list[Any]] = defaultdict(list)
        for a in sd.attempts:
            by_group[a.group_id].append(a)
        for gi, members in enumerate(by_group.values()):
            for ti, a in enumerate(members):
                r = a.reward if a.reward is not None else 0.0
                steps = [
                    {
                        "step_idx": i, "ob_len": g["prompt_len"], "ac_len": g["length"],
                        "reward": r if i == len(a.gens) - 1 else 0.0,
                        "episode_done": i == len(a.gens) - 1, "metrics": {}, "logs": {},
                    }
                    for i, g in enumerate(a.gens)
                ]  # fmt: skip
                recs.append(
                    {
                        "schema_version": 1, "split": "train", "iteration": sd.step,
                        "group_idx": gi, "traj_idx": ti, "tags": [],
                        "sampling_client_step": a.policy_version, "total_reward": r,
                        "final_reward": r, "trajectory_metrics": {}, "steps": steps,
                        "final_ob_len": sum(g["prompt_len"] + g["length"] for g in a.gens),
                    }
                )  # fmt: skip
        summaries = ("\n".join(json.dumps(r) for r in recs) + "\n").encode() if recs else b""
        capture, tree = capture_samples(sd, by_group), logtree(sd, by_group)
        out.append(
            [
                *([Write("capture/sample.jsonl", capture, append=True)] if capture else []),
                Write(f"iteration_{sd.step:06d}/train_logtree.json", tree),
                Write(f"iteration_{sd.step:06d}/train_rollout_summaries.jsonl", summaries),
                Write("metrics.jsonl", _line(m), append=True),
            ]
        )
    return out


# -- verl -----------------------------------------------------------------------------


def verl(run: Any, Write: Any) -> list[list[Any]]:
    out: list[list[Any]] = [[]]
    for sd in run.steps:
        f = _figures(sd)
        step = sd.step + 1  # verl's global_steps start at 1
        data = {
            "critic/score/mean": f["reward_all"],
            "critic/rewards/mean": f["reward_all"],
            "response_length/mean": f["len_mean"],
            "response_length/max": f["len_max"],
            "response_length/clip_ratio": f["truncated"],
            "actor/entropy": f["entropy"],
            "rollout_corr/kl": f["k1"],
            "rollout_corr/k3_kl": f["k3"],
            "rollout_corr/rollout_is_eff_sample_size": f["ess"],
            "training/global_step": step,
            # _val_metrics_update at test_freq: the core variable's mean@n_max
            "val-core/sim/heldout/reward/mean@1": sd.reported.get("eval/heldout"),
        }
        data = _some(data)
        lines = [
            json.dumps(
                {
                    "input": f"task {a.task_id}",
                    "output": a.text(),
                    "gts": None,
                    "score": a.reward if a.reward is not None else 0.0,
                    "step": step,
                },
                ensure_ascii=False,
            )
            for a in sd.attempts
        ]  # fmt: skip
        batch = [Write("metrics.jsonl", orjson.dumps({"step": step, "data": data}) + b"\n", True)]
        if lines:
            batch.insert(0, Write(f"rollout_data/{step}.jsonl", ("\n".join(lines) + "\n").encode()))
        out.append(batch)
    return out


# -- prime-rl -------------------------------------------------------------------------


def prime_rl(run: Any, Write: Any) -> list[list[Any]]:
    out: list[list[Any]] = [[]]
    pending: list[Any] = []
    for sd in run.steps:
        f = _figures(sd, trained_only=True)
        t = sd.time or 0.0
        kept, shipped = _prime_cohorts(sd.attempts)
        orch = {
            "step": sd.step, "time": t,
            # over trace records: a failed episode written without a trace has none
            "train/agg/all/default/reward/mean": _mean(
                [a.reward for a in kept if a.reward is not None]
            ),
            # The trainer's own figure (a buggy one's in scenario metric_disagreement).
            "train/agg/effective/default/reward/mean": sd.reported.get(
                "reward/mean", _mean([a.reward for a in shipped])
            ),
            "train/agg/effective/default/is_truncated/mean": f["truncated"],
            "train/agg/effective/num_output_tokens/mean": f["episode_len"],
            "progress/rollouts": len(kept),
            "off_policy/mean": _mean([float(sd.step - a.policy_version) for a in shipped
                                      if a.policy_version is not None]),
        }  # fmt: skip
        orch = _some(orch)
        heldout = sd.reported.get("eval/heldout")
        evals = []
        if heldout is not None:  # finalize_eval_batch: one row per eval env and step
            row = {
                "step": sd.step, "time": t, "eval/heldout/effective/default/avg@1": heldout,
                "eval/heldout/all/num_output_tokens/mean": f["episode_len"] or 0.0,
            }  # fmt: skip
            evals.append(Write("metrics.jsonl", _line(row), append=True))
        # One line per FileMonitor.log call of trainer/rl/train.py, in its order.
        # The trainer's own KL figure: k3 over the trained tokens, or what a buggy
        # trainer computed instead (scenario metric_disagreement: a sign-flipped k1).
        kl = sd.reported.get("train/mismatch_kl", f["k3"])
        tensors = {"entropy/all/mean": f["entropy"], "mismatch_kl/all/mean": kl,
                   "loss/mean": 0.0}  # fmt: skip
        trainer = [
            _some({"step": sd.step, "time": t + 0.5 + i * 1e-3, **m})
            for i, m in enumerate((
                {"perf/throughput": 1000.0, "perf/mfu": 30.0, "perf/peak_memory": 20.0},
                {"optim/lr": 1e-6, "optim/grad_norm": 0.5},
                tensors,
                {"time/step": 10.0, "time/forward_backward": 8.0},
                {"system/ckpt_disk_free_gib": 100.0, "system/ckpt_disk_free_ratio": 0.5},
            ))
        ]  # fmt: skip
        lines = []
        for i, a in enumerate(x for x in sd.attempts if x.trained and x.gens):
            p = a.gens[0]["prompt_len"] or 1
            toks = [1] * p + [int(x) for g in a.gens for x in g["tokens"]]
            inf = [0.0] * p + [None if np.isnan(x) else float(x) for g in a.gens for x in g["ls"]]
            trn = [-1.0] * p + [None if np.isnan(x) else float(x) for g in a.gens for x in g["lt"]]
            n = len(toks)
            rec = {
                "schema_version": 1, "step": sd.step, "rank": 0, "micro_step": 0,
                "micro_sequence_idx": i, "export_sequence_idx": i, "env_name": "sim",
                "token_ids": toks, "position_ids": list(range(n)),
                "loss_mask": [False] * p + [True] * (n - p),
                "advantages": [0.0] * n, "inference_logprobs": inf, "trainer_logprobs": trn,
                "entropy": [None] * p + [None if x is None else -x for x in inf[p:]],
            }  # fmt: skip
            lines.append(json.dumps(rec, separators=(",", ":"), allow_nan=False) + "\n")
        folder = f"token_exports/step_{sd.step}"
        eps = {a.attempt_id: episode(run, sd.step, a) for a in kept}
        traces = f"rollouts/step_{sd.step}/train"
        effective = b"".join(eps[a.attempt_id] for a in shipped)
        # The orchestrator runs a step ahead (async): its row for step s comes before
        # the trainer's row for step s - 1. Episodes land in `all` as they arrive, the
        # trained cohort in `effective` when the batch ships, before the step's row.
        out.append(
            [
                *evals,
                *(Write(f"{traces}/all/traces.jsonl", e, append=True) for e in eps.values()),
                Write(f"{traces}/effective/traces.jsonl", effective, append=True),
                Write("metrics.jsonl", _line(orch), append=True),
                *pending,
                *([Write(f"{folder}/rank_0.jsonl", "".join(lines).encode())] if lines else []),
                *([Write(f"{folder}/STABLE", b"")] if lines else []),
            ]
        )
        pending = [Write("metrics.jsonl", _line(m), append=True) for m in trainer]
    out.append(pending)
    return out


def _prime_cohorts(attempts: list[Any]) -> tuple[list[Any], list[Any]]:
    """(episodes that arrive, the shipped cohort) of a step as prime-rl forms them: a
    group past `max_off_policy_steps` is cancelled in flight and never logged (the
    simulated run's stale or unversioned discards: not trained although rewarded in a
    group with reward spread); the shipped cohort is the rewarded attempts of groups
    whose rewards differ."""
    groups: dict[str, list[Any]] = defaultdict(list)
    for a in attempts:
        if a.reward is not None:
            groups[a.group_id].append(a)

    def spread(g: list[Any]) -> bool:
        return len(g) > 1 and len({a.reward for a in g}) > 1

    kept = [
        a for a in attempts
        if a.trained or a.reward is None or not spread(groups[a.group_id])
    ]  # fmt: skip
    live: dict[str, list[Any]] = defaultdict(list)
    for a in kept:
        if a.reward is not None:
            live[a.group_id].append(a)
    shipped = [a for g in live.values() if spread(g) for a in g]
    return kept, shipped


# -- TRL ------------------------------------------------------------------------------


def trl(run: Any, Write: Any) -> list[list[Any]]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    history: list[dict[str, Any]] = []
    max_steps = (run.config.get("training") or {}).get("max_steps") or len(run.steps)

    def state(gs: int) -> bytes:
        st = {
            "best_global_step": None, "best_metric": None, "best_model_checkpoint": None,
            "epoch": gs / max_steps, "eval_steps": 1, "global_step": gs,
            "is_hyper_param_search": False, "is_local_process_zero": True,
            "is_world_process_zero": True, "log_history": history, "logging_steps": 1,
            "max_steps": max_steps, "num_input_tokens_seen": 0, "num_train_epochs": 1,
            "save_steps": SAVE_EVERY, "stateful_callbacks": {}, "total_flos": 0.0,
            "train_batch_size": 8, "trial_name": None, "trial_params": None,
        }  # fmt: skip
        return (json.dumps(st, indent=2, sort_keys=True) + "\n").encode()

    out: list[list[Any]] = [[]]
    for sd in run.steps:
        f = _figures(sd)
        gs = sd.step + 1
        history.append(
            {
                "completions/clipped_ratio": f["truncated"], "completions/mean_length": f["len_mean"],
                "completions/max_length": f["len_max"], "entropy": f["entropy"],
                "epoch": gs / max_steps, "frac_reward_zero_std": f["frac_all_good"] + f["frac_all_bad"],
                "grad_norm": 0.1, "kl": 0.0, "learning_rate": 1e-6, "loss": 0.0,
                "reward": f["reward_all"], "reward_std": f["reward_std"],
                "rewards/accuracy_reward/mean": f["reward_all"], "step": gs,
            }
        )  # fmt: skip
        history[-1] = _some(history[-1])
        heldout = sd.reported.get("eval/heldout")
        if heldout is not None:
            history.append({"epoch": gs / max_steps, "eval_reward": heldout, "step": gs})
        table = pa.table(
            {
                "step": [gs] * len(sd.attempts),
                "prompt": [f"task {a.task_id}" for a in sd.attempts],
                "completion": [a.text() for a in sd.attempts],
                "accuracy_reward": [a.reward if a.reward is not None else 0.0 for a in sd.attempts],
                "advantage": [0.0] * len(sd.attempts),
            }
        )
        buf = io.BytesIO()
        pq.write_table(table, buf)
        batch = [Write(f"completions/completions_{gs:05d}.parquet", buf.getvalue())]
        if gs % SAVE_EVERY == 0:
            batch.append(Write(f"checkpoint-{gs}/trainer_state.json", state(gs)))
        out.append(batch)
    if run.finished:  # the end-of-training summary and top-level state
        history.append(
            {"epoch": 1.0, "step": max_steps, "total_flos": 0.0, "train_loss": 0.0,
             "train_runtime": 1.0, "train_samples_per_second": 1.0, "train_steps_per_second": 1.0}
        )  # fmt: skip
        out.append([Write("trainer_state.json", state(max_steps))])
    return out


WRITERS = {"tinker": tinker, "verl": verl, "prime-rl": prime_rl, "trl": trl}
