"""A run written by an independent writer that follows the Loops guide's words.

The writer below is not the simulator: it computes its steps.jsonl the way the guide
defines each metric (`reward/group_std_mean` over trained groups, `reward/mean_with_unusable`
adding the attempts of rejected groups), rounds what it reports to float32 as a GPU
trainer would, and discards groups (no_variance, group_too_small) at most steps. On
such a run `metric_disagreement` must stay silent. A trainer that defines a metric
differently from the first step gets one `info`; one whose metric changes mid-run
gets a `warning` naming the metric, both values and the step.
"""

from __future__ import annotations

import json
import math
import random
from pathlib import Path

import numpy as np

from rlstream.fleet.read import read_latest
from rlstream.pipeline.local import analyze_local

STEPS, GROUPS, SIZE, TOKENS = 30, 6, 4, 4


def f32(x: float) -> float:
    return float(np.float32(x))


def _guide_metrics(recs: list[dict], toks: list[tuple[list, list, bool]]) -> dict:
    trained = [r for r in recs if r["trained"]]
    tr_groups = {r["group_id"] for r in trained}
    by_group: dict[str, list[float]] = {}
    for r in trained:
        by_group.setdefault(r["group_id"], []).append(r["reward"])
    rejected = [
        r["reward"] for r in recs if r["group_id"] not in tr_groups and r["reward"] is not None
    ]
    out: dict = {}
    if trained:
        rw = [r["reward"] for r in trained]
        out["reward/mean"] = sum(rw) / len(rw)
        out["reward/std"] = float(np.std(rw))
        out["reward/group_std_mean"] = float(np.mean([np.std(v) for v in by_group.values()]))
    usable = [r["reward"] for r in trained] + rejected
    if usable:
        out["reward/mean_with_unusable"] = sum(usable) / len(usable)
    out["discard/groups/no_variance"] = len(
        {r["group_id"] for r in recs if r["discard_reason"] == "no_variance"}
    )
    out["discard/groups/group_too_small"] = len(
        {r["group_id"] for r in recs if r["discard_reason"] == "group_too_small"}
    )
    d = [
        max(-20.0, min(20.0, b - a))
        for ls, lt, trains in toks
        if trains
        for a, b in zip(ls, lt, strict=True)
    ]
    if d:
        out["train/mismatch_kl"] = sum(math.exp(x) - 1 - x for x in d) / len(d)
    out["sampling/entropy_estimate"] = -sum(x for ls, _, _ in toks for x in ls) / sum(
        len(ls) for ls, _, _ in toks
    )
    return {k: f32(v) if isinstance(v, float) else v for k, v in out.items()}


def write_guide_run(root: Path, name: str, seed: int, variant: str = "guide") -> None:
    """``variant``: "guide" (the guide's words), "all_groups" (group_std_mean over every
    group from the start), "breaks" (switches to that at step 18)."""
    rng = random.Random(seed)
    run = root / name
    (run / "transcripts").mkdir(parents=True)
    meta = {
        "run_id": name,
        "created_at": 1767225600.0,
        "finished_at": 1767225600.0 + STEPS * 60,
        "config": {"training": {"max_steps": STEPS, "max_group_losses": 1}},
    }
    (run / "run.json").write_text(json.dumps(meta))
    n = 0
    with open(run / "steps.jsonl", "w") as sf, open(run / "rollouts.jsonl", "w") as rf:
        for s in range(STEPS):
            recs, toks = [], []
            for g in range(GROUPS):
                gid, p = f"s{s}g{g}", 0.2 + 0.1 * g
                rewards = [
                    None if rng.random() < 0.1 else float(rng.random() < p) for _ in range(SIZE)
                ]
                scored = [r for r in rewards if r is not None]
                if SIZE - len(scored) > 1:
                    verdict = "group_too_small"
                elif len(set(scored)) <= 1:
                    verdict = "no_variance"
                else:
                    verdict = None
                for reward in rewards:
                    aid = f"a{n:07d}"
                    n += 1
                    trains = verdict is None and reward is not None
                    reason = "rollout_failed/timeout" if reward is None else verdict
                    rec = {
                        "attempt_id": aid,
                        "group_id": gid,
                        "task_id": f"t{g}",
                        "step": s,
                        "policy_version": s,
                        "reward": reward,
                        "trained": trains,
                        "discard_reason": reason,
                        "metadata": {},
                        "time": 1767225600.0 + s * 60,
                    }
                    recs.append(rec)
                    rf.write(json.dumps(rec) + "\n")
                    ls = [-0.5 - 0.1 * rng.random() for _ in range(TOKENS)]
                    lt = [x + rng.gauss(0, 0.01) for x in ls]
                    toks.append((ls, lt, trains))
                    gen = {
                        "index": 0,
                        "policy_version": s,
                        "prompt_len": 3,
                        "completion_len": TOKENS,
                        "stop_reason": "stop",
                        "completion_tokens": [rng.randrange(50) for _ in range(TOKENS)],
                        "sampler_logprobs": ls,
                        "trainer_logprobs": lt if trains else None,
                    }
                    if not trains:
                        del gen["trainer_logprobs"]
                    doc = {
                        "attempt_id": aid,
                        "group_id": gid,
                        "task_id": f"t{g}",
                        "step": s,
                        "trains": trains,
                        "trace": "full",
                        "generations": [gen],
                    }
                    (run / "transcripts" / f"{aid}.json").write_text(json.dumps(doc))
            line = {"step": s, "time": 1767225600.0 + s * 60, **_guide_metrics(recs, toks)}
            if variant == "all_groups" or (variant == "breaks" and s >= 18):
                spread = {}
                for r in recs:
                    if r["reward"] is not None:
                        spread.setdefault(r["group_id"], []).append(r["reward"])
                line["reward/group_std_mean"] = f32(np.mean([np.std(v) for v in spread.values()]))
            sf.write(json.dumps(line) + "\n")


def _findings(out: Path) -> dict[str, dict]:
    return {
        r["run_id"]: {f["code"]: f for f in r["findings"] if f["state"] == "firing"}
        for r in read_latest(str(out))
    }


def test_a_trainer_that_follows_the_guide_raises_no_disagreement(tmp_path):
    for i in range(3):
        write_guide_run(tmp_path / "runs", f"guide-{i}", seed=100 + i)
    write_guide_run(tmp_path / "runs", "all-groups", seed=200, variant="all_groups")
    write_guide_run(tmp_path / "runs", "breaks", seed=300, variant="breaks")
    analyze_local([str(tmp_path / "runs")], str(tmp_path / "out"))
    found = _findings(tmp_path / "out")
    for i in range(3):
        assert "metric_disagreement" not in found[f"guide-{i}"], found[f"guide-{i}"]
        assert not any(f["severity"] != "info" for f in found[f"guide-{i}"].values())

    # A different definition from the first step: said once, as what it is.
    md = found["all-groups"]["metric_disagreement"]
    assert md["severity"] == "info"
    assert "reward_group_std_mean: reported" in md["message"]
    assert "defines this metric differently" in md["message"]

    # A change mid-run: a warning from the step it started, with both values.
    md = found["breaks"]["metric_disagreement"]
    assert md["severity"] == "warning"
    assert 18 <= md["since_step"] <= 20
    assert "reward_group_std_mean: reported" in md["message"]
    assert "vs recomputed" in md["message"]
