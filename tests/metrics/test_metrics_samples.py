"""Kept samples: the top/bottom/flagged/probe choices and flag shares of a step are
those of one pass over the whole step (recomputed here by sorting every attempt, as
docs/schema.md defines them), whatever its split into shards and merge order."""

from __future__ import annotations

import random

from hypothesis import given, settings
from hypothesis import strategies as st

from rlstream.metrics.samples import SampleAgg, attempt, excerpt, task_hash
from tests.metrics.merging import merge_tree, split_plans

K, P, HIGH = 3, 2, 0.5


def _attempts(n: int, seed: int) -> list[dict]:
    rnd = random.Random(seed)
    out = []
    for i in range(n):
        reward = rnd.choice([None, 0.0, 0.25, 0.5, 1.0, rnd.random()])
        flags = rnd.choice([[], [], ["early_exit"], ["test_tampering", "early_exit"]])
        out.append(
            attempt(
                attempt=f"a{rnd.randrange(10**6):07d}-{i}",
                task=f"t{rnd.randrange(6)}",
                reward=reward,
                trained=rnd.random() < 0.8,
                flags=flags,
                returned="text",
            )
        )
    return out


def _expected(atts: list[dict], panel: list[str]) -> dict:
    """From the definitions: sort everything, take the first K."""
    ranked = [a for a in atts if a["trained"] and a["reward"] is not None]
    top = sorted(ranked, key=lambda a: (-a["reward"], a["attempt"]))[:K]
    bottom = sorted(ranked, key=lambda a: (a["reward"], a["attempt"]))[:K]
    flagged = sorted(
        (a for a in atts if a["flags"]),
        key=lambda a: (a["reward"] is None, -(a["reward"] or 0), a["attempt"]),
    )[:K]
    tasks = sorted({a["task"] for a in atts}, key=lambda t: (task_hash(t), t))
    early = [t for t in tasks if t not in panel][:P]
    probes = {
        t: min((a for a in atts if a["task"] == t), key=lambda a: a["attempt"])["attempt"]
        for t in tasks
        if t in panel
    }
    trained = [a for a in atts if a["trained"]]
    high = [a for a in trained if a["reward"] is not None and a["reward"] >= HIGH]
    return {
        "top": [a["attempt"] for a in top],
        "bottom": [a["attempt"] for a in bottom],
        "flagged": [a["attempt"] for a in flagged],
        "early": early,
        "probes": probes,
        "flagged_frac": sum(bool(a["flags"]) for a in trained) / len(trained) if trained else None,
        "flagged_high_frac": sum(bool(a["flags"]) for a in high) / len(high) if high else None,
        "exit_high": sum("early_exit" in a["flags"] for a in high) / len(high) if high else None,
    }


def _got(agg: SampleAgg, panel: list[str]) -> dict:
    fin = agg.finalize()
    kept = {c["attempt"]: why for c, why in agg.kept(panel)}
    return {
        "top": [c["attempt"] for c in agg.top],
        "bottom": [c["attempt"] for c in agg.bottom],
        "flagged": [c["attempt"] for c in agg.flagged],
        "early": agg.early_tasks(),
        "probes": {t: c["attempt"] for t, c in agg.probes.items() if t in panel},
        "flagged_frac": fin["flagged_frac"],
        "flagged_high_frac": fin["flagged_high_frac"],
        "exit_high": (fin["flag_share_high"] or {}).get("early_exit", 0.0)
        if fin["flag_share_high"] is not None
        else None,
        "_kept": kept,
    }


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 60), st.integers(0, 10**6), st.data())
def test_shards_merged_in_any_order_keep_what_one_pass_keeps(n, seed, data):
    atts = _attempts(n, seed)
    panel = ["t1", "t4"]
    shards, shape, rnd = data.draw(split_plans(n))
    parts = [SampleAgg.from_attempts([atts[i] for i in s], K, panel, P, HIGH) for s in shards]
    merged = merge_tree(parts, SampleAgg(k=K, probes_n=P, high=HIGH, panel=panel), shape, rnd)
    got = _got(merged, panel)
    kept = got.pop("_kept")
    want = _expected(atts, panel)
    assert got == want
    whole = _got(SampleAgg.from_attempts(atts, K, panel, P, HIGH), panel)
    assert whole.pop("_kept") == kept
    # bounded: at most K top, K bottom, K flagged and one per panel task
    assert len(kept) <= 3 * K + len(panel)
    for a in want["top"]:
        assert "top" in kept[a]


def test_same_attempt_from_two_readers_is_one_row_with_both_sides():
    a = attempt(attempt="a1", task="t", reward=1.0, trained=True, flags=["x"], returned="r")
    b = attempt(attempt="a1", task="t", reward=1.0, trained=True, flags=["y"], file="f.json")
    m = SampleAgg.from_attempts([a], 2).merge(SampleAgg.from_attempts([b], 2))
    ((c, why),) = [kw for kw in m.kept() if kw[0]["attempt"] == "a1"]
    assert c["returned"] == "r" and c["file"] == "f.json" and c["flags"] == ["x", "y"]
    assert why == ["top", "bottom", "flagged"]


def test_excerpt_keeps_head_and_tail_within_the_limit():
    text = "HEAD" + "x" * 50_000 + "TAIL"
    ex = excerpt(text, 8192)
    assert len(ex.encode()) <= 8192
    assert ex.startswith("HEAD") and ex.endswith("TAIL")
    assert "bytes left out" in ex
    assert excerpt("short", 8192) == "short"
    multi = "é" * 10_000  # never cut inside a character
    assert excerpt(multi, 1000).encode().decode() == excerpt(multi, 1000)
