"""Sharpening is not collapse: metric-only runs through the pipeline and the engine.

Healthy GRPO runs of small models commonly see entropy fall to a third of its start
while reward and the held-out score rise and outputs stay as long and diverse. These
runs carry only steps.jsonl (no rollouts, no transcripts): `reward/mean`,
`sampling/entropy_estimate`, completion length and n-gram diversity as `rollout/`
metrics, and `eval/heldout` every 10 steps. On them nothing warning-or-worse may fire.
The same runs with entropy falling toward zero, or with entropy at a third while
outputs shorten and lose diversity and nothing is learned, must raise
`entropy_collapse`.
"""

from __future__ import annotations

import json
import math
import random
from collections import defaultdict
from pathlib import Path

from rlstream.health import DEFAULT_RULES, RunContext, fold_step, new_state
from rlstream.pipeline.local import analyze_local

STEPS = 200
CONFIG = {
    "training": {"max_steps": STEPS, "group_size": 8, "groups_per_step": 8, "mode": "sync"},
    "sampling": {"max_tokens": 1024},
}
NO_CAP = {"training": CONFIG["training"]}


def write_metric_run(root: Path, name: str, seed: int, variant: str) -> None:
    """variant: "sharpening" (healthy), "to_zero" (entropy toward 0, same learning),
    "degenerate" (entropy to a third, length and diversity falling, reward flat),
    "longer" (no max_tokens; length triples while learning), "longer_flat" (the same
    without learning)."""
    rng = random.Random(seed)
    d = root / name
    d.mkdir(parents=True)
    config = NO_CAP if variant.startswith("longer") else CONFIG
    (d / "run.json").write_text(
        json.dumps({"run_id": name, "created_at": 1000.0, "config": config, "finished_at": 9e9})
    )
    e0 = rng.uniform(0.8, 1.2)
    floor = {"to_zero": 0.03, "longer": 1.0, "longer_flat": 1.0}.get(variant, 1 / 3)
    learns = variant not in ("degenerate", "longer_flat")
    lines = []
    for i in range(STEPS):
        gain = 1.0 - math.exp(-i / 60.0) if learns else 0.0
        reward = min(max(0.25 + 0.45 * gain + rng.gauss(0, 0.03), 0.0), 1.0)
        decay = math.exp(-i / 40.0)
        entropy = e0 * (floor + (1 - floor) * decay) * math.exp(rng.gauss(0, 0.03))
        shrink = 1.0 if variant != "degenerate" else 0.45 + 0.55 * decay
        late = 1.0 - math.exp(-max(i - 20, 0) / 30.0)  # after the baseline
        grow = 1.0 + 2.0 * late if variant.startswith("longer") else 1.0
        rec = {
            "step": i,
            "time": 1000.0 + 60.0 * i,
            "reward/mean": reward,
            "reward/mean_with_unusable": reward,
            "reward/std": 0.4,
            "reward/group_std_mean": 0.35 + rng.gauss(0, 0.02),
            "discard/groups/no_variance": int(rng.random() < 0.3),
            "discard/groups/group_too_small": 0,
            "sampling/entropy_estimate": entropy,
            "rollout/completion_len": 300.0 * shrink * grow * math.exp(rng.gauss(0, 0.05)),
            "rollout/ngram_diversity": 0.85 * shrink + rng.gauss(0, 0.01),
        }
        if i % 10 == 0:
            rec["eval/heldout"] = 0.15 + 0.4 * gain + rng.gauss(0, 0.02)
        lines.append(json.dumps(rec))
    (d / "steps.jsonl").write_text("\n".join(lines) + "\n")


def loud_firings(tmp_path: Path) -> dict[str, list[tuple[str, str, int]]]:
    """run -> (code, severity, step) of every firing transition over the whole run."""
    rows: dict[str, list] = defaultdict(list)

    def hook(state, new, now):
        rows[state.run_id].extend(new)
        return []

    analyze_local([str(tmp_path / "runs")], str(tmp_path / "out"), health=hook)
    out = {}
    for run_id, rs in rows.items():
        ctx = RunContext(run_id, NO_CAP if run_id.startswith("longer") else CONFIG, True)
        state, fired = new_state(DEFAULT_RULES, run_id), []
        for row in sorted(rs, key=lambda r: r["step"]):
            state, trs = fold_step(state, row, ctx, DEFAULT_RULES)
            fired += [(t.code, t.severity, t.step) for t in trs if t.to_state == "firing"]
        out[run_id] = fired
    return out


def test_healthy_sharpening_raises_nothing_but_collapse_still_fires(tmp_path):
    """Also: length growing while learning, without a known cap, is not an explosion."""
    runs = tmp_path / "runs"
    for i in range(4):
        write_metric_run(runs, f"sharp-{i}", 10 + i, "sharpening")
    write_metric_run(runs, "to-zero", 20, "to_zero")
    write_metric_run(runs, "degenerate", 21, "degenerate")
    write_metric_run(runs, "longer", 22, "longer")
    write_metric_run(runs, "longer_flat", 23, "longer_flat")
    fired = loud_firings(tmp_path)
    assert len(fired) == 8
    for i in range(4):
        loud = [f for f in fired[f"sharp-{i}"] if f[1] != "info"]
        assert loud == [], loud
    # Entropy alone, falling toward zero: collapse, whatever the reward does.
    assert "entropy_collapse" in {c for c, _, _ in fired["to-zero"]}
    # A third of its start with shorter, less diverse outputs and no learning.
    assert "entropy_collapse" in {c for c, _, _ in fired["degenerate"]}
    # Without a cap to run into, responses tripling while the policy learns is what
    # reasoning RL does; tripling with nothing learned is a runaway.
    assert [f for f in fired["longer"] if f[1] != "info"] == []
    assert "length_explosion" in {c for c, _, _ in fired["longer_flat"]}


def write_sharpening_run(root: Path, name: str, seed: int, heldout_end: float, div_end: float):
    """Shaped like real GRPO/RLOO runs of 1.5B-scale models that learned: entropy
    1.05 -> 0.32 nats/token, the trainer's n-gram diversity 0.88 -> ``div_end`` with it,
    lengths flat, the held-out score 0.27 -> ``heldout_end`` (evals every 10 steps)."""
    rng = random.Random(seed)
    d = root / name
    d.mkdir(parents=True)
    (d / "run.json").write_text(
        json.dumps({"run_id": name, "created_at": 1000.0, "config": CONFIG, "finished_at": 9e9})
    )
    e0, e1 = 1.05 * rng.uniform(0.95, 1.05), 0.32 * rng.uniform(0.95, 1.05)
    lines = []
    for i in range(STEPS):
        decay = math.exp(-max(i - 10, 0) / 40.0)  # after the baseline
        gain = 1.0 - math.exp(-i / 50.0)
        reward = min(max(0.3 + 0.5 * gain + rng.gauss(0, 0.03), 0.0), 1.0)
        rec = {
            "step": i,
            "time": 1000.0 + 60.0 * i,
            "reward/mean": reward,
            "reward/mean_with_unusable": reward,
            "reward/std": 0.4,
            "reward/group_std_mean": 0.35 + rng.gauss(0, 0.02),
            "discard/groups/no_variance": int(rng.random() < 0.3),
            "discard/groups/group_too_small": 0,
            "sampling/entropy_estimate": (e1 + (e0 - e1) * decay) * math.exp(rng.gauss(0, 0.03)),
            "rollout/completion_len": 300.0 * math.exp(rng.gauss(0, 0.05)),
            "rollout/ngram_diversity": div_end + (0.88 - div_end) * decay + rng.gauss(0, 0.01),
        }
        if i % 10 == 0:
            rec["eval/heldout"] = 0.27 + (heldout_end - 0.27) * gain + rng.gauss(0, 0.02)
        lines.append(json.dumps(rec))
    (d / "steps.jsonl").write_text("\n".join(lines) + "\n")


def test_sharpening_with_diversity_following_entropy_is_not_collapse(tmp_path):
    """Eight runs sharpening as real learning runs do (diversity 0.88 -> 0.69 beside
    entropy 1.05 -> 0.32, held-out 0.27 -> 0.8): no finding warning or worse. The same
    curves with the held-out score flat, or with diversity collapsing to half while
    the held-out score rises, are collapse."""
    runs = tmp_path / "runs"
    for i in range(8):
        write_sharpening_run(runs, f"sharp-{i}", 40 + i, heldout_end=0.8, div_end=0.69)
    write_sharpening_run(runs, "flat-heldout", 50, heldout_end=0.27, div_end=0.69)
    write_sharpening_run(runs, "diversity-gone", 51, heldout_end=0.8, div_end=0.4)
    fired = loud_firings(tmp_path)
    assert len(fired) == 10
    for i in range(8):
        loud = [f for f in fired[f"sharp-{i}"] if f[1] != "info"]
        assert loud == [], (i, loud)
    assert "entropy_collapse" in {c for c, _, _ in fired["flat-heldout"]}
    assert "entropy_collapse" in {c for c, _, _ in fired["diversity-gone"]}
