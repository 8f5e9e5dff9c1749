"""The steps table against an independent recomputation from the raw files.

The oracle below reads transcripts and rollouts with the standard json module and
computes every figure with plain per-token Python, straight from the definitions in
docs/schema.md. The pipeline's columns must agree to 1e-9 relative.
"""

from __future__ import annotations

import json
import math
from collections import defaultdict
from pathlib import Path

import pytest

from rlstream.pipeline.local import analyze_local
from rlstream.simulate import SimConfig, simulate
from tests.outputs import out_con, out_sql


def _oracle(run: Path) -> dict[int, dict[str, float]]:
    per: dict[int, dict[str, list]] = defaultdict(lambda: defaultdict(list))
    for f in sorted((run / "transcripts").glob("*.json")):
        t = json.loads(f.read_text())
        acc = per[t["step"]]
        for g in t["generations"]:
            ls_all = g.get("sampler_logprobs") or []
            lt_all = g.get("trainer_logprobs") or [None] * len(ls_all)
            dsum, gen_has = 0.0, False
            for ls, lt in zip(ls_all, lt_all, strict=True):
                if ls is not None:
                    acc["neg_ls"].append(-ls)
                if t["trains"] and ls is not None and lt is not None:
                    d = min(20.0, max(-20.0, lt - ls))
                    acc["k3"].append(math.exp(d) - 1 - d)
                    acc["k1"].append(ls - lt)
                    acc["k2"].append((ls - lt) ** 2 / 2)
                    acc["w"].append(math.exp(d))
                    dsum += d
                    gen_has = True
            if gen_has:
                acc["logW"].append(dsum)
    for line in (run / "rollouts.jsonl").read_text().splitlines():
        r = json.loads(line)
        if r["trained"] and r["reward"] is not None:
            per[r["step"]]["trained_rewards"].append(r["reward"])
    out = {}
    for step, a in per.items():
        n = len(a["k3"])
        row = {"trained_tokens": n, "sampled_tokens": len(a["neg_ls"])}
        if n:
            w = a["w"]
            m = max(a["logW"])
            W = [math.exp(x - m) for x in a["logW"]]
            row |= {
                "mismatch_kl": math.fsum(a["k3"]) / n,
                "mismatch_k1": math.fsum(a["k1"]) / n,
                "mismatch_k2": math.fsum(a["k2"]) / n,
                "mismatch_kl_max": max(a["k3"]),
                "mismatch_ess": math.fsum(w) ** 2 / (n * math.fsum(x * x for x in w)),
                "mismatch_ess_seq": math.fsum(W) ** 2 / (len(W) * math.fsum(x * x for x in W)),
                "is_ratio_max": max(w),
                "is_frac_gt_2": sum(x > 2 for x in w) / n,
            }
        if a["neg_ls"]:
            row["entropy_estimate"] = math.fsum(a["neg_ls"]) / len(a["neg_ls"])
        if a["trained_rewards"]:
            row["reward_mean"] = math.fsum(a["trained_rewards"]) / len(a["trained_rewards"])
        out[step] = row
    return out


@pytest.mark.parametrize(
    "scenario", ["healthy", "mismatch_kl_rising", "low_ess", "entropy_collapse"]
)
def test_columns_match_an_independent_recomputation(tmp_path, scenario):
    labels = simulate(
        tmp_path / "runs", SimConfig(runs=1, steps=6, scenarios=(scenario,), seed=9, mode="async")
    )
    analyze_local([str(tmp_path / "runs")], str(tmp_path / "out"))
    want = _oracle(tmp_path / "runs" / labels[0].run)
    rel = out_con(f"{tmp_path}/out").sql("select * from steps order by step")
    rows = {r[1]: dict(zip(rel.columns, r, strict=True)) for r in rel.fetchall()}
    assert sorted(rows) == sorted(want) == list(range(6))
    checked = 0
    for step, exp in want.items():
        for k, v in exp.items():
            assert rows[step][k] == pytest.approx(v, rel=1e-9, abs=1e-300), (step, k)
            checked += 1
    assert checked >= 6 * 10


def test_samples_trace_gives_null_token_metrics_not_zeros(tmp_path):
    simulate(tmp_path / "runs", SimConfig(runs=1, steps=4, trace="samples", seed=2))
    analyze_local([str(tmp_path / "runs")], str(tmp_path / "out"))
    rows = out_sql(
        f"{tmp_path}/out",
        "select trace, trained_tokens, mismatch_kl, mismatch_ess, entropy_estimate, repetition, "
        "completion_len_mean, reported_mismatch_kl, reward_mean "
        "from steps order by step",
    )
    assert len(rows) == 4
    for trace, tt, kl, ess, ent, rep, clen, rkl, rew in rows:
        assert trace == "samples"
        assert (tt, kl, ess, ent, rep) == (None, None, None, None, None)
        assert clen is not None and clen > 0 and rkl is not None and rew is not None
    health = out_sql(f"{tmp_path}/out", "select token_metrics from latest")
    assert health == [("reported_only",)]
