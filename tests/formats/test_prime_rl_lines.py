"""prime-rl's real line shapes: several trainer lines per step, exact per-token entropy.

The fixture is written here, by hand, as prime-rl's writers lay it out
(`src/prime_rl/monitors/file.py`: one `{"step", "time", **metrics}` line per
`FileMonitor.log` call; `trainer/rl/train.py`: five calls per step, perf, optim, the
tensor statistics, time and checkpoint disk; the orchestrator one line a step ahead of
the trainer; `trainer/rl/token_export.py`: micro-sequences with `entropy`, null where
not finite). The expected figures are recomputed below from the fixture's own values
as docs/schema.md defines them, not through rlstream's kernels.
"""

from __future__ import annotations

import json
import math
import random
from pathlib import Path

import pytest

from rlstream.pipeline.local import analyze_local
from tests.formats.trainer_runs import table

STEPS = 3
PROMPT = 3


def _trainer_lines(step: int, t: float, entropy_mean: float, loss: float) -> list[dict]:
    tensors = {
        "entropy/all/mean": entropy_mean,
        "entropy/all/std": 0.2,
        "entropy/all/max": 3.0,
        "mismatch_kl/all/mean": 1e-3,
        "mismatch_kl/all/max": 4e-3,
        "loss/mean": loss,
        "loss/median": loss,
        "kl_ent_ratio/mean": 1e-3 / entropy_mean,
    }
    metrics = (
        {"perf/throughput": 5e3, "perf/throughput_per_gpu": 1.25e3, "perf/mfu": 31.0,
         "perf/peak_memory": 61.2, "step": step},
        {"optim/lr": 1e-6, "optim/grad_norm": 0.41, "step": step},
        {**tensors, "step": step},
        {"time/step": 12.5, "time/wait_for_batch": 0.4, "time/load_data": 0.1,
         "time/broadcast_weights": 0.9, "time/save_ckpt": 0, "time/forward_backward": 9.8,
         "step": step},
        {"system/ckpt_disk_free_gib": 812.0, "system/ckpt_disk_used_gib": 100.0,
         "system/ckpt_disk_total_gib": 912.0, "system/ckpt_disk_free_ratio": 0.89,
         "step": step},
    )  # fmt: skip
    return [{"step": step, "time": t + 1e-3 * i, **m} for i, m in enumerate(metrics)]


def _orchestrator_line(step: int, t: float) -> dict:
    return {
        "step": step,
        "time": t,
        "train/agg/all/default/reward/mean": 0.4 + 0.1 * step,
        "train/agg/effective/default/reward/mean": 0.45 + 0.1 * step,
        "train/agg/effective/default/is_truncated/mean": 0.0,
        "train/agg/effective/num_output_tokens/mean": 6.0,
        "progress/rollouts": 4,
        "off_policy/mean": 0.5,
        "time/orchestrator": 3.0,
    }


def _sequences(step: int, rng: random.Random, drop_entropy: bool) -> list[dict]:
    """Two micro-sequences per rank, each packing two samples (position ids restart)."""
    out = []
    for idx in range(2):
        toks, pos, mask, inf, trn, ent = [], [], [], [], [], []
        for _sample in range(2):
            n = rng.randint(4, 7)
            for i in range(PROMPT + n):
                toks.append(rng.randrange(32000))
                pos.append(i)
                done = i >= PROMPT
                mask.append(done)
                lp = -rng.uniform(0.05, 3.0) if done else None
                inf.append(lp)
                trn.append(None if lp is None else lp + rng.gauss(0, 0.01))
                # The exact entropy of the token's distribution: not -ls (a sample of it).
                e = rng.uniform(0.2, 2.5)
                ent.append(None if done and rng.random() < 0.2 else e)
        rec = {
            "schema_version": 1, "step": step, "rank": 0, "micro_step": idx,
            "micro_sequence_idx": idx, "export_sequence_idx": idx, "env_name": "math",
            "token_ids": toks, "position_ids": pos, "loss_mask": mask,
            "advantages": [0.1] * len(toks), "inference_logprobs": inf,
            "trainer_logprobs": trn, "entropy": ent,
            "mismatch_kl": [None] * len(toks),
        }  # fmt: skip
        if drop_entropy and idx == 1:
            del rec["entropy"]  # an export without the field: sampler estimate only
        out.append(rec)
    return out


def _expected_entropy(seqs: list[dict]) -> tuple[float, float, float]:
    """(entropy estimate, share exact, mean trainer entropy) over tokens under loss_mask:
    the exported entropy where not null, else -inference_logprob."""
    vals, exact, trainer = [], 0, []
    for s in seqs:
        ents = s.get("entropy") or [None] * len(s["token_ids"])
        for m, e, lp in zip(s["loss_mask"], ents, s["inference_logprobs"], strict=True):
            if not m:
                continue
            if e is not None:
                vals.append(e)
                exact += 1
                trainer.append(e)
            elif lp is not None:
                vals.append(-lp)
    return sum(vals) / len(vals), exact / len(vals), sum(trainer) / len(trainer)


def _write_run(root: Path) -> tuple[Path, dict[int, list[dict]], list[dict]]:
    run = root / "runs" / "prime"
    run.mkdir(parents=True)
    rng = random.Random(7)
    seqs = {s: _sequences(s, rng, drop_entropy=s == 1) for s in range(STEPS)}
    lines: list[dict] = []
    t0 = 1_780_000_000.0
    # Async: the orchestrator's line for step s comes before the trainer's for s - 1.
    for s in range(STEPS):
        lines.append(_orchestrator_line(s, t0 + 20 * s))
        if s:
            lines += _trainer_lines(s - 1, t0 + 20 * s + 5, _expected_entropy(seqs[s - 1])[2], 0.1)
    lines += _trainer_lines(STEPS - 1, t0 + 20 * STEPS, _expected_entropy(seqs[STEPS - 1])[2], 0.1)
    # A restarted trainer logs step 2's tensor statistics again: the later values win.
    again = _trainer_lines(STEPS - 1, t0 + 20 * STEPS + 30, 1.0, 0.25)[2]
    again["entropy/all/mean"] = _expected_entropy(seqs[STEPS - 1])[2]
    lines.append(again)
    (run / "metrics.jsonl").write_text("".join(json.dumps(m) + "\n" for m in lines))
    for s, recs in seqs.items():
        d = run / "token_exports" / f"step_{s}"
        d.mkdir(parents=True)
        (d / "rank_0.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
        (d / "STABLE").write_text("")
    return run, seqs, lines


def test_every_trainer_line_of_a_step_merges_and_exact_entropy_is_used(tmp_path):
    _run, seqs, lines = _write_run(tmp_path)
    states = analyze_local([str(tmp_path / "runs")], str(tmp_path / "out"))
    assert [s.format for s in states] == ["prime-rl"]
    rows = table(tmp_path / "out", "steps", "order by step")
    assert [r["step"] for r in rows] == list(range(STEPS))
    quarantine = table(tmp_path / "out", "quarantine")
    assert quarantine == []
    for row in rows:
        s = row["step"]
        mine = [m for m in lines if m["step"] == s]
        trainer = [m for m in mine if "train/agg/all/default/reward/mean" not in m]
        assert len(trainer) == (6 if s == STEPS - 1 else 5)
        last = {k: v for m in trainer for k, v in m.items()}  # later lines win
        other = dict(row["reported_other"])
        for k in ("perf/mfu", "perf/throughput", "optim/lr", "optim/grad_norm", "time/step",
                  "time/forward_backward", "system/ckpt_disk_free_ratio", "loss/mean",
                  "kl_ent_ratio/mean", "entropy/all/std"):  # fmt: skip
            assert other[k] == last[k], (s, k)
        assert other["loss/mean"] == (0.25 if s == STEPS - 1 else 0.1)
        assert row["reported_entropy_estimate"] == last["entropy/all/mean"]
        assert row["reported_mismatch_kl"] == 1e-3
        assert row["reported_reward_mean"] == pytest.approx(0.45 + 0.1 * s)
        assert row["time"] == max(m["time"] for m in mine)
        want, share, _ = _expected_entropy(seqs[s])
        assert row["entropy_estimate"] == pytest.approx(want, rel=1e-12)
        assert row["entropy_exact_frac"] == pytest.approx(share, rel=1e-12)
        if s != 1:
            # Some tokens' entropy is null (non-finite in the trainer): -ls stands in
            # there; the trainer's own mean is over the exact values.
            assert 0.5 < share < 1.0
            exact_only = [
                e
                for q in seqs[s]
                for e, m in zip(q["entropy"], q["loss_mask"], strict=True)
                if m and e is not None
            ]
            assert row["reported_entropy_estimate"] == pytest.approx(
                sum(exact_only) / len(exact_only)
            )
        else:
            assert share < 0.5  # one micro-sequence without the field: -ls there
    assert not math.isnan(rows[0]["entropy_estimate"])
