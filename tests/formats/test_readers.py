"""Each reader gives the step rows its trainer's files imply.

The files are written the way each trainer writes them (tests/formats/trainer_runs.py);
every expected value is recomputed here from those files with plain Python/numpy,
following docs/formats.md (which key maps to which column, how groups are formed),
never taken from the pipeline.
"""

from __future__ import annotations

import math
from collections import defaultdict
from pathlib import Path

import numpy as np
import pytest

from rlstream.pipeline.local import analyze_local
from tests.formats.trainer_runs import jsonl, sim_runs, table, trainer_run


@pytest.fixture(scope="module")
def sim(tmp_path_factory) -> Path:
    return sim_runs(tmp_path_factory.mktemp("sim") / "runs", steps=5)


def _analyze(tmp_path: Path, sim: Path, fmt: str) -> tuple[Path, list[dict]]:
    run = trainer_run(sim, tmp_path / "runs" / "r1", fmt)
    out = tmp_path / "out"
    states = analyze_local([str(tmp_path / "runs")], str(out))
    assert [s.format for s in states] == [fmt]
    return run, table(out, "steps", "order by step")


def _groups(recs: list[tuple[str, float]]) -> dict[str, list[float]]:
    g: dict[str, list[float]] = defaultdict(list)
    for k, r in recs:
        g[k].append(r)
    return g


def _trained_mean(groups: dict[str, list[float]]) -> float | None:
    vals = [r for g in groups.values() if len(g) > 1 and len(set(g)) > 1 for r in g]
    return sum(vals) / len(vals) if vals else None


def test_tinker_rows(tmp_path, sim):
    run, rows = _analyze(tmp_path, sim, "tinker")
    lines = jsonl(run / "metrics.jsonl")
    capture = jsonl(run / "capture" / "sample.jsonl")
    assert [r["step"] for r in rows] == [m["step"] for m in lines] == [0, 1, 2, 3, 4]
    assert any("test/env/all/reward/total" in m for m in lines), "the run logs evaluations"
    for row, m in zip(rows, lines, strict=True):
        assert row["reported_reward_mean_with_unusable"] == m["env/all/reward/total"]
        assert row["reported_mismatch_kl"] == m["optim/kl_sample_train_v2"]
        assert row["reported_entropy_estimate"] == m["optim/entropy"]
        assert row["reported_completion_len_mean"] == m["env/all/ac_tokens_per_turn"]
        assert row["reported_no_variance_frac"] == pytest.approx(
            m["env/all/by_group/frac_all_good"] + m["env/all/by_group/frac_all_bad"]
        )
        other = dict(row["reported_other"])
        assert other["optim/kl_sample_train_v1"] == m["optim/kl_sample_train_v1"]
        test = m.get("test/env/all/reward/total")
        assert dict(row["reported_eval"]) == ({} if test is None else {"test": test})
        assert row["truncated_frac"] is None and row["reported_truncated_frac"] is None
        trajs = jsonl(run / f"iteration_{row['step']:06d}" / "train_rollout_summaries.jsonl")
        groups = _groups([(f"{t['group_idx']}", t["total_reward"]) for t in trajs])
        assert row["reward_mean"] == pytest.approx(_trained_mean(groups))
        assert row["reward_mean_with_unusable"] == pytest.approx(
            np.mean([t["total_reward"] for t in trajs])
        )
        assert row["groups_no_variance"] == sum(
            1 for g in groups.values() if len(g) > 1 and len(set(g)) == 1
        )
        lens = [s["ac_len"] for t in trajs for s in t["steps"]]
        assert row["completion_len_mean"] == pytest.approx(np.mean(lens))
        assert row["trace"] == "samples" and row["mismatch_kl"] is None
        calls = [c for c in capture if c["scope"]["iteration"] == row["step"]]
        ls = [x for c in calls for smp in c["samples"] for x in smp["logprobs"] if x is not None]
        assert calls and row["entropy_estimate"] == pytest.approx(-np.mean(ls), rel=1e-12)


def test_verl_rows(tmp_path, sim):
    run, rows = _analyze(tmp_path, sim, "verl")
    lines = jsonl(run / "metrics.jsonl")
    assert [r["step"] for r in rows] == [m["step"] for m in lines] == [1, 2, 3, 4, 5]
    assert any("val-core/sim/heldout/reward/mean@1" in m["data"] for m in lines)
    for row, m in zip(rows, lines, strict=True):
        d = m["data"]
        assert row["reported_reward_mean_with_unusable"] == d["critic/score/mean"]
        assert row["reported_truncated_frac"] == d["response_length/clip_ratio"]
        assert row["reported_completion_len_mean"] == d["response_length/mean"]
        assert row["reported_mismatch_kl"] == d["rollout_corr/k3_kl"]
        assert row["reported_mismatch_ess"] == d["rollout_corr/rollout_is_eff_sample_size"]
        assert row["reported_entropy_estimate"] == d["actor/entropy"]
        assert dict(row["reported_other"])["rollout_corr/kl"] == d["rollout_corr/kl"]
        val = {
            k.removeprefix("val-core/").rsplit("/", 2)[0]: v
            for k, v in d.items()
            if k.startswith("val-core/") and k.rsplit("/", 1)[1].startswith("mean@")
        }
        assert dict(row["reported_eval"]) == val
        dump = jsonl(run / "rollout_data" / f"{row['step']}.jsonl")
        groups = _groups([(s["input"], s["score"]) for s in dump])
        assert row["attempts"] == len(dump)
        assert row["reward_mean_with_unusable"] == pytest.approx(
            np.mean([s["score"] for s in dump])
        )
        assert row["reward_mean"] == pytest.approx(_trained_mean(groups))
        assert row["completion_len_mean"] is None and row["mismatch_kl"] is None
        _assert_text_figures(row, [s["output"] for s in dump], [s["input"] for s in dump])


def _assert_text_figures(row: dict, texts: list[str], tasks: list[str]) -> None:
    """Text-only completions, as docs/formats.md says: whitespace-separated words as
    tokens; distinct answers and the largest share of tasks giving one answer."""
    words = [tuple(t.split()) for t in texts]
    assert row["completions"] == len(texts)
    assert row["distinct_completions"] == pytest.approx(len(set(words)) / len(words))
    by_answer: dict[tuple, set] = defaultdict(set)
    for w, task in zip(words, tasks, strict=True):
        by_answer[w].add(task)
    share = max(len(t) for t in by_answer.values()) / len(set(tasks))
    assert row["top_completion_task_share"] == pytest.approx(share)
    reps = []
    for w in words:
        grams = [w[i : i + 4] for i in range(len(w) - 3)]
        if grams:
            reps.append(1 - len(set(grams)) / len(grams))
    assert row["repetition"] == (pytest.approx(np.mean(reps)) if reps else None)
    assert row["truncated_frac"] is None and row["completion_len_max"] is None


def _k3_set(exports: list[dict]) -> tuple[float, float, float]:
    """mismatch k3, entropy estimate and mean completion length from token exports,
    as docs/formats.md says: tokens under loss_mask, one completion per packed sample."""
    terms, ls_all, lens = [], [], []
    for e in exports:
        pos = e["position_ids"]
        starts = [i for i, p in enumerate(pos) if p == 0] or [0]
        for j, a in enumerate(starts):
            b = starts[j + 1] if j + 1 < len(starts) else len(pos)
            idx = [i for i in range(a, b) if e["loss_mask"][i]]
            if not idx:
                continue
            lens.append(len(idx))
            for i in idx:
                s, t = e["inference_logprobs"][i], e["trainer_logprobs"][i]
                if s is not None:
                    ls_all.append(s)
                if s is not None and t is not None:
                    d = t - s
                    terms.append(math.exp(d) - 1 - d)
    return float(np.mean(terms)), -float(np.mean(ls_all)), float(np.mean(lens))


def test_prime_rl_rows_merge_writers_and_recompute_tokens(tmp_path, sim):
    run, rows = _analyze(tmp_path, sim, "prime-rl")
    lines = jsonl(run / "metrics.jsonl")
    by_step: dict[int, list[dict]] = defaultdict(list)
    for m in lines:
        by_step[m["step"]].append(m)
    assert [r["step"] for r in rows] == sorted(by_step) == [0, 1, 2, 3, 4]
    assert any("eval/heldout/effective/default/avg@1" in m for m in lines)
    quarantined = table(run.parent.parent / "out", "quarantine")
    assert not [q for q in quarantined if q["reason"] == "duplicate_step"]
    for row in rows:
        orch = next(m for m in by_step[row["step"]] if "progress/rollouts" in m)
        # prime-rl's trainer writes five lines a step (perf, optim, tensor stats, time,
        # system): every one of their figures reaches the step's row.
        lines_t = [
            m
            for m in by_step[row["step"]]
            if m is not orch and not any(k.startswith("eval/") for k in m)
        ]
        families = [{k.split("/")[0] for k in m if k not in ("step", "time")} for m in lines_t]
        assert families == [{"perf"}, {"optim"}, {"entropy", "mismatch_kl", "loss"},
                            {"time"}, {"system"}]  # fmt: skip
        trainer = {k: v for m in lines_t for k, v in m.items()}
        assert row["reported_mismatch_kl"] == trainer["mismatch_kl/all/mean"]
        assert row["reported_entropy_estimate"] == trainer["entropy/all/mean"]
        assert row["reported_reward_mean"] == orch["train/agg/effective/default/reward/mean"]
        assert (
            row["reported_truncated_frac"] == orch["train/agg/effective/default/is_truncated/mean"]
        )
        assert row["reported_lag_mean"] == orch["off_policy/mean"]
        other = dict(row["reported_other"])
        assert other["loss/mean"] == trainer["loss/mean"]
        for k in (
            "perf/mfu",
            "optim/lr",
            "optim/grad_norm",
            "time/step",
            "system/ckpt_disk_free_gib",
        ):
            assert other[k] == trainer[k], k
        ev = [m for m in by_step[row["step"]] if any(k.startswith("eval/") for k in m)]
        assert dict(row["reported_eval"]) == {
            k.split("/")[1]: v for m in ev for k, v in m.items() if k.endswith("/avg@1")
        }
        for m in ev:
            assert (
                other["eval_stats/heldout/all/num_output_tokens/mean"]
                == (m["eval/heldout/all/num_output_tokens/mean"])
            )
        assert row["time"] == max(m["time"] for m in [orch, *lines_t])
        step_dir = run / "token_exports" / f"step_{row['step']}"
        assert (step_dir / "STABLE").exists()
        k3, ent, _ = _k3_set(jsonl(step_dir / "rank_0.jsonl"))
        assert row["mismatch_kl"] == pytest.approx(k3, rel=1e-9)
        assert row["entropy_estimate"] == pytest.approx(ent, rel=1e-9)
        assert row["entropy_exact_frac"] == 1.0  # the exports' `entropy` on every token
        traces = run / "rollouts" / f"step_{row['step']}" / "train" / "all" / "traces.jsonl"
        # every arriving attempt's completion (as for Loops): the exports' trained ones
        # and, from the episodes, the sampled tokens of the traces no export holds
        sampled = [sum(sum(n["mask"]) for n in t["nodes"] if n["sampled"])
                   for e in jsonl(traces) if e["ok"] for t in e["traces"] if t["ok"]]  # fmt: skip
        assert sampled
        assert row["completion_len_mean"] == pytest.approx(np.mean(sampled))
        assert row["truncated_frac"] is None and row["trace"] == "full"
        assert row["top_completion_task_share"] is None  # env_name is no task label
        _assert_prime_rl_episodes(row, jsonl(traces))


def _assert_prime_rl_episodes(row: dict, episodes: list[dict]) -> None:
    """Group figures from the orchestrator's `all` episodes, as docs/formats.md says:
    an attempt per trace, reward the weighted sum of its rewards, group `group.id`, a
    failed episode discarded as rollout_failed, lag from `run.work.policy.start`."""
    ok = [(e, t) for e in episodes if e["ok"] for t in e["traces"] if t["ok"]]
    failed = [e for e in episodes if not e["ok"]]
    assert ok and len(ok) + len(failed) == row["attempts"]
    groups = _groups(
        [(e["group"]["id"], sum(r["score"] * r["weight"] for r in t["rewards"].values()))
         for e, t in ok]
    )  # fmt: skip
    rewards = [r for g in groups.values() for r in g]
    assert row["reward_mean_with_unusable"] == pytest.approx(np.mean(rewards))
    assert row["reward_mean"] == pytest.approx(_trained_mean(groups))
    assert row["groups_no_variance"] == sum(
        1 for g in groups.values() if len(g) > 1 and len(set(g)) == 1
    )
    assert row["discard_rollout_failed"] == len(failed)
    trained_groups = [g for g in groups.values() if len(g) > 1 and len(set(g)) > 1]
    assert row["reward_group_std_mean"] == pytest.approx(
        np.mean([np.std(g) for g in trained_groups])
    )
    trained = {k for k, g in groups.items() if len(g) > 1 and len(set(g)) > 1}
    lags = [row["step"] - e["run"]["work"]["policy"]["start"] for e, _ in ok
            if e["group"]["id"] in trained and "policy" in e["run"]["work"]]  # fmt: skip
    assert row["lag_mean"] == (pytest.approx(np.mean(lags)) if lags else None)
    meta = dict(row["rollout_metadata"])
    outs = [sum(c["usage"]["completion_tokens"] for c in t["calls"]) for _, t in ok]
    assert meta["output_tokens"] == pytest.approx(np.mean(outs))
    truncated = [any(c["finish_reason"] == "length" for c in t["calls"][-1:]) for _, t in ok]
    assert meta["truncated"] == pytest.approx(np.mean(truncated))


def test_trl_rows_once_each_with_eval_merged(tmp_path, sim):
    import json

    import pyarrow.parquet as pq

    run, rows = _analyze(tmp_path, sim, "trl")
    state = json.loads((run / "trainer_state.json").read_text())
    train = {e["step"]: e for e in state["log_history"] if "reward" in e}
    evals = {e["step"]: e for e in state["log_history"] if "eval_reward" in e}
    assert [r["step"] for r in rows] == sorted(train) == [1, 2, 3, 4, 5]
    for row in rows:
        e = train[row["step"]]
        assert row["reported_reward_mean_with_unusable"] == e["reward"]
        assert row["reported_no_variance_frac"] == e["frac_reward_zero_std"]
        assert row["reported_completion_len_mean"] == e["completions/mean_length"]
        assert row["reported_truncated_frac"] == e["completions/clipped_ratio"]
        assert row["reported_entropy_estimate"] == e["entropy"]
        assert dict(row["reported_other"])["reward_std"] == e["reward_std"]
        if row["step"] in evals:
            assert dict(row["reported_eval"]) == {"reward": evals[row["step"]]["eval_reward"]}
        t = pq.read_table(run / "completions" / f"completions_{row['step']:05d}.parquet")
        rewards = t.column("accuracy_reward").to_pylist()
        groups = _groups(list(zip(t.column("prompt").to_pylist(), rewards, strict=True)))
        assert row["reward_mean_with_unusable"] == pytest.approx(np.mean(rewards))
        assert row["reward_mean"] == pytest.approx(_trained_mean(groups))
        _assert_text_figures(
            row, t.column("completion").to_pylist(), t.column("prompt").to_pylist()
        )
    assert evals, "the simulated run logs held-out evaluations"


def test_prime_rl_episode_fields():
    """Field by field (verifiers' Episode.to_record): weighted rewards, a failed trace,
    an untrainable agent's trace, truncation by stop condition or by the last call."""
    import orjson

    from rlstream.formats.prime_rl import PRIME_RL

    def trace(name, rewards, ok=True, stop="completed", finish="stop", trainable=True):
        return {
            "agent": {"config": {}, "name": name, "trainable": trainable},
            "nodes": [{"sampled": True, "token_ids": [5, 6, 7], "mask": [True] * 3}],
            "calls": [{"node": 0, "finish_reason": finish}],
            "rewards": {k: {"score": s, "weight": w} for k, (s, w) in rewards.items()},
            "ok": ok,
            "stop_condition": stop,
            "errors": [] if ok else [{"type": "SandboxError", "message": "x"}],
        }

    ep = {
        "id": "e1",
        "group": {"id": "g"},
        "run": {"type": "train", "id": "r", "work": {"type": "train", "step": 3,
                "policy": {"start": 2, "end": 4}}},
        "ok": True,
        "traces": [
            trace("solver", {"a": (1.0, 0.5), "b": (0.5, 2.0)}, stop="max_turns"),
            trace("solver", {"a": (1.0, 1.0)}, ok=False, finish="length"),
            trace("judge", {"a": (1.0, 1.0)}, trainable=False),
            trace("solver", {"a": (0.0, 1.0)}, finish="length"),
        ],
    }  # fmt: skip
    ep["traces"][0]["rewards"]["c"] = None
    out = PRIME_RL.parse_file("rollouts", orjson.dumps(ep) + b"\n", "x", 5)
    recs = [r for r in out if isinstance(r, dict)]
    assert [(r["attempt_id"], r["group_id"], r["reward"], r["discard_reason"]) for r in recs] == [
        ("5-e1-0", "5-g/solver", 1.5, None),
        ("5-e1-1", "5-g/solver", None, "rollout_failed/SandboxError"),
        ("5-e1-3", "5-g/solver", 0.0, None),
    ]
    assert [r["metadata"]["truncated"] for r in recs] == [True, True, True]
    assert [r["policy_version"] for r in recs] == [2, 2, 2]
    assert recs[0]["metadata"] == {
        "turns": 1, "output_tokens": 3, "truncated": True, "termination_reason": "max_turns"
    }  # fmt: skip
