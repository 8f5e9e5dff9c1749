"""A small independent reader of simulated runs, used by the tests to recompute metrics.

Deliberately written from docs/run-format.md, not from the simulator's own code.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np
import orjson


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    return [orjson.loads(line) for line in path.read_bytes().splitlines() if line]


def steps(run: Path) -> list[dict[str, Any]]:
    return [r for r in read_jsonl(run / "steps.jsonl") if "step" in r]


def series(run: Path, key: str) -> np.ndarray:
    """Per-step values of `key` (NaN where absent), indexed by step."""
    recs = steps(run)
    out = np.full(max((r["step"] for r in recs), default=-1) + 1, np.nan)
    for r in recs:
        if key in r:
            out[r["step"]] = r[key]
    return out


def transcripts(run: Path) -> dict[str, dict[str, Any]]:
    return {
        p.name[: -len(".json")]: orjson.loads(p.read_bytes())
        for p in sorted((run / "transcripts").iterdir())
        if p.name.endswith(".json")
    }


def recompute(run: Path) -> dict[int, dict[str, float]]:
    """reward/mean, group_std_mean, mean_with_unusable, mismatch_kl, mismatch_ess and
    entropy_estimate per step, from rollouts.jsonl and the transcripts."""
    by_step: dict[int, list[dict]] = defaultdict(list)
    for r in read_jsonl(run / "rollouts.jsonl"):
        by_step[r["step"]].append(r)
    tr = transcripts(run)
    out: dict[int, dict[str, float]] = {}
    for step, recs in by_step.items():
        m: dict[str, float] = {}
        trained = [r["reward"] for r in recs if r["trained"]]
        if trained:
            m["reward/mean"] = float(np.mean(trained))
        # The guide: group_std_mean is the spread within each *trained* group;
        # mean_with_unusable adds the attempts of the groups the run rejected.
        trained_groups: dict[str, list[float]] = defaultdict(list)
        rejected: dict[str, list[float]] = defaultdict(list)
        for r in recs:
            if r["trained"] and r["reward"] is not None:
                trained_groups[r["group_id"]].append(r["reward"])
        for r in recs:
            if r["group_id"] not in trained_groups and r["reward"] is not None:
                rejected[r["group_id"]].append(r["reward"])
        if trained_groups:
            m["reward/group_std_mean"] = float(
                np.mean([np.std(v) for v in trained_groups.values()])
            )
        usable = trained + [x for v in rejected.values() for x in v]
        if usable:
            m["reward/mean_with_unusable"] = float(np.mean(usable))
        ds, ls_all = [], []
        for r in recs:
            t = tr[r["attempt_id"]]
            for g in t["generations"]:
                ls = np.array(g["sampler_logprobs"], dtype=float)
                ls_all.append(ls[~np.isnan(ls)])
                if t["trains"]:
                    lt = np.array(g["trainer_logprobs"], dtype=float)
                    ok = ~np.isnan(ls) & ~np.isnan(lt)
                    ds.append(np.clip(lt[ok] - ls[ok], -20, 20))
        if ds and sum(d.size for d in ds):
            d = np.concatenate(ds)
            w = np.exp(d)
            m["train/mismatch_kl"] = float(np.mean(w - 1 - d))
            m["train/mismatch_ess"] = float(w.sum() ** 2 / (d.size * (w**2).sum()))
        m["sampling/entropy_estimate"] = float(-np.concatenate(ls_all).mean())
        out[step] = m
    return out
