"""prime-rl episodes carry text: kept samples, transcript flags and distinct answers.

The records are shaped as verifiers' `Episode.to_record()` (one trace, a user node,
assistant nodes and a tool node; docs/formats.md, prime-rl). Expected values are
counted here from the records written, following docs/schema.md and docs/health.md.
"""

from __future__ import annotations

import json
from pathlib import Path

import orjson

from rlstream.pipeline.local import analyze_local
from tests.formats.trainer_runs import table

PROMPT = "Solve task {t}. Write solve(x) and run the tests."
HACK = "```python\nimport sys\nprint(result)\nsys.exit(0)\n```"


def _node(role: str, content: str, sampled: bool, toks: list[int]) -> dict:
    return {
        "message": {"role": role, "content": content}, "sampled": sampled,
        "token_ids": toks, "mask": [sampled] * len(toks), "logprobs": [-0.5] * len(toks),
    }  # fmt: skip


def _episode(step: int, eid: str, gid: str, reward: float, answer: str, toks: list[int]):
    nodes = [
        _node("user", PROMPT.format(t=gid), False, [1, 2, 3]),
        _node("assistant", "let me run the tests", True, [7, 8]),
        _node("tool", "FAILED test_solve", False, [4, 5]),
        _node("assistant", answer, True, toks),
    ]
    calls = [{"node": 1, "finish_reason": "stop", "usage": {"completion_tokens": 2}},
             {"node": 3, "finish_reason": "stop", "usage": {"completion_tokens": len(toks)}}]  # fmt: skip
    return episode_record(step, eid, gid, reward, nodes, calls)


def episode_record(
    step: int, eid: str, gid: str, reward: float, nodes: list[dict], calls: list[dict]
) -> dict:
    """One episode of one trainable trace, as `Episode.to_record()` writes it."""
    trace = {
        "agent": {"config": {}, "name": "default", "trainable": True}, "nodes": nodes,
        "calls": calls, "rewards": {"correct": {"score": reward, "weight": 1.0}}, "ok": True,
        "stop_condition": "completed", "errors": [],
    }  # fmt: skip
    return {
        "id": eid, "group": {"id": gid}, "ok": True, "errors": [], "traces": [trace],
        "run": {"type": "train", "id": "r", "work": {"type": "train", "step": step,
                "policy": {"start": step, "end": step}}},
    }  # fmt: skip


def _run(root: Path) -> None:
    """Step 0: a group of 4 with rewards 1, 1, 0, 0, one of the 1s exiting early.
    Step 1: a group of 4 that answers alike (reward 0 each: no variance, nothing
    trained, no token exports)."""
    steps = {
        0: [_episode(0, f"e{i}", "g0", r, a, [10 + i, 20 + i, 30 + i])
            for i, (r, a) in enumerate([(1.0, HACK), (1.0, "def solve(x): return x * 2"),
                                        (0.0, "def solve(x): return x"),
                                        (0.0, "def solve(x): return 0")])],
        1: [_episode(1, f"f{i}", "g1", 0.0, "return 42", [42, 42, 43]) for i in range(4)],
    }  # fmt: skip
    lines = []
    for s, eps in steps.items():
        d = root / "rollouts" / f"step_{s}" / "train"
        (d / "all").mkdir(parents=True)
        (d / "effective").mkdir()
        (d / "all" / "traces.jsonl").write_bytes(b"".join(orjson.dumps(e) + b"\n" for e in eps))
        shipped = eps if s == 0 else []
        (d / "effective" / "traces.jsonl").write_bytes(
            b"".join(orjson.dumps(e) + b"\n" for e in shipped)
        )
        lines.append({"step": s, "time": 10.0 + s, "progress/rollouts": 4})
        lines.append({"step": s, "time": 10.5 + s, "loss/mean": 0.0})
    lines.append({"step": 2, "time": 12.0, "progress/rollouts": 0})
    lines.append({"step": 2, "time": 12.5, "loss/mean": 0.0})
    (root / "metrics.jsonl").write_text("".join(json.dumps(m) + "\n" for m in lines))


def test_prime_rl_traces_feed_samples_flags_and_distinct_answers(tmp_path):
    _run(tmp_path / "runs" / "r1")
    out = tmp_path / "out"
    states = analyze_local([str(tmp_path / "runs")], str(out))
    assert [s.format for s in states] == ["prime-rl"]
    rows = {r["step"]: r for r in table(out, "steps", "order by step")}
    # step 0: 4 trained attempts, 2 of them high-reward (reward >= 0.5), 1 exits early
    assert rows[0]["flagged_frac"] == 0.25
    assert rows[0]["flagged_high_frac"] == 0.5
    assert dict(rows[0]["flag_share"]) == {"early_exit": 0.25}
    assert dict(rows[0]["flag_share_high"]) == {"early_exit": 0.5}
    # step 1: nothing trained, so no exports; its 4 attempts' sampled tokens are equal
    assert rows[1]["groups_no_variance"] == 1
    assert rows[1]["distinct_completions"] == 0.25
    samples = table(out, "samples", "order by step, attempt_id")
    hack = [s for s in samples if s["step"] == 0 and "early_exit" in list(s["flags"])]
    assert [s["attempt_id"] for s in hack] == ["0-e0-0"]
    (h,) = hack
    assert "sys.exit(0)" in h["returned"] and "let me run the tests" in h["returned"]
    assert PROMPT.format(t="g0") in h["sent"] and "FAILED test_solve" in h["sent"]
    assert h["reward"] == 1.0 and h["trained"] is True and h["calls"] == 2
    assert h["transcript"] == "rollouts/step_0/train/all/traces.jsonl"
