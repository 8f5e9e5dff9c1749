"""A probe task is followed across steps in verl, TRL, prime-rl and tinker runs too
(issue 28).

verl's `rollout_data_dir` dumps, TRL's completion tables and tinker's logtree name no
task: the task is the prompt (docs/formats.md), so the same prompt at two steps is one
task, while a group stays one step's samples of a prompt. prime-rl's episodes carry
verifiers' stable task identity, `task.key` (else `task.hash`). The probe panel
(docs/schema.md, `samples`: the `probes` tasks of the first step, kept at every step
they appear in) then shows one prompt's outputs step after step. The task ids are
recomputed here from the docs: blake2b-64 (hex) of verl's `input`, of `repr` of TRL's
`prompt`, of tinker's rendered Prompt messages; prime-rl's `task.key` as written.
"""

from __future__ import annotations

import hashlib
import io
import json
from pathlib import Path

import orjson
import pyarrow as pa
import pyarrow.parquet as pq

from rlstream.config import PipelineConfig
from rlstream.formats.prime_rl_episodes import episodes
from rlstream.metrics.scanners import samples_config
from rlstream.pipeline.local import analyze_local
from tests.formats import test_tinker_text as tk
from tests.formats.test_prime_rl_text import _node, episode_record
from tests.formats.trainer_runs import table

PROMPTS = ("Solve task A.", "Solve task B.")
STEPS = (1, 2, 3)


def _task(text: str) -> str:
    return hashlib.blake2b(text.encode(), digest_size=8).hexdigest()


def _answer(p: int, step: int, i: int) -> str:
    return f"answer {i} to prompt {p} at step {step}"


def _probes(out: Path) -> dict[str, list[int]]:
    steps: dict[str, list[int]] = {}
    for r in table(out, "samples", "order by step"):
        if "probe" in r["kept"]:
            steps.setdefault(r["task_id"], []).append(r["step"])
    return steps


def _analyze(root: Path, out: Path) -> str:
    cfg = PipelineConfig(samples=samples_config({"probes": 2}))
    (state,) = analyze_local([str(root)], str(out), cfg)
    return state.format


def test_verl_prompt_is_one_task_across_steps(tmp_path):
    run = tmp_path / "runs" / "v1"
    (run / "rollout_data").mkdir(parents=True)
    lines = [{"step": s, "data": {"critic/score/mean": 0.5}} for s in STEPS]
    (run / "metrics.jsonl").write_text("".join(json.dumps(m) + "\n" for m in lines))
    for s in STEPS:
        dump = [
            {"input": PROMPTS[p], "output": _answer(p, s, i), "gts": "", "score": i % 2, "step": s}
            for p in (0, 1)
            for i in range(2)
        ]
        (run / "rollout_data" / f"{s}.jsonl").write_text(
            "".join(json.dumps(d) + "\n" for d in dump)
        )
    out = tmp_path / "out"
    assert _analyze(tmp_path / "runs", out) == "verl"
    assert _probes(out) == {_task(p): list(STEPS) for p in PROMPTS}
    # a group is still one step's samples of a prompt: 2 groups a step, none merged
    assert [r["groups"] for r in table(out, "steps", "order by step")] == [2, 2, 2]


def test_trl_prompt_is_one_task_across_steps(tmp_path):
    run = tmp_path / "runs" / "t1"
    (run / "completions").mkdir(parents=True)
    history = [{"step": s, "epoch": s / 3, "reward": 0.5, "loss": 0.1} for s in STEPS]
    state = {"global_step": 3, "max_steps": 3, "log_history": history}
    (run / "trainer_state.json").write_text(json.dumps(state, indent=2, sort_keys=True) + "\n")
    for s in STEPS:
        rows = [(p, i) for p in (0, 1) for i in range(2)]
        t = pa.table(
            {
                "step": [s] * len(rows),
                "prompt": [PROMPTS[p] for p, _ in rows],
                "completion": [_answer(p, s, i) for p, i in rows],
                "accuracy_reward": [float(i % 2) for _, i in rows],
                "advantage": [0.0] * len(rows),
            }
        )
        buf = io.BytesIO()
        pq.write_table(t, buf)
        (run / "completions" / f"completions_{s:05d}.parquet").write_bytes(buf.getvalue())
    out = tmp_path / "out"
    assert _analyze(tmp_path / "runs", out) == "trl"
    assert _probes(out) == {_task(repr(p)): list(STEPS) for p in PROMPTS}
    assert [r["groups"] for r in table(out, "steps", "order by step")] == [2, 2, 2]


def _prime_episode(step: int, p: int, i: int, key: bool = True) -> dict:
    nodes = [
        _node("user", PROMPTS[p], False, [1, 2]),
        _node("assistant", _answer(p, step, i), True, [10 + i, 20 + step]),
    ]
    calls = [{"node": 1, "finish_reason": "stop", "usage": {"completion_tokens": 2}}]
    ep = episode_record(step, f"e{step}{p}{i}", f"g{step}-{p}", float(i % 2), nodes, calls)
    if key:
        ep["task"] = {"type": "T", "data": {"idx": p}, "key": f"key-{p}", "hash": f"h{p}"}
    return ep


def test_prime_rl_task_key_is_one_task_across_steps(tmp_path):
    run = tmp_path / "runs" / "p1"
    lines = []
    for s in STEPS:
        eps = [_prime_episode(s, p, i) for p in (0, 1) for i in range(2)]
        d = run / "rollouts" / f"step_{s}" / "train"
        (d / "all").mkdir(parents=True)
        (d / "effective").mkdir()
        for part in ("all", "effective"):
            (d / part / "traces.jsonl").write_bytes(b"".join(orjson.dumps(e) + b"\n" for e in eps))
        lines += [{"step": s, "time": 10.0 + s, "progress/rollouts": 4}]
    lines += [{"step": 4, "time": 20.0, "progress/rollouts": 0}]
    (run / "metrics.jsonl").write_text("".join(json.dumps(m) + "\n" for m in lines))
    out = tmp_path / "out"
    assert _analyze(tmp_path / "runs", out) == "prime-rl"
    assert _probes(out) == {f"key-{p}": list(STEPS) for p in (0, 1)}
    assert [r["groups"] for r in table(out, "steps", "where step in (1, 2, 3) order by step")] == [
        2,
        2,
        2,
    ]


def test_prime_rl_task_without_key_falls_back_to_hash_then_the_steps_group():
    ep = _prime_episode(3, 0, 1)
    del ep["task"]["key"]
    bare = _prime_episode(3, 1, 1, key=False)
    data = orjson.dumps(ep) + b"\n" + orjson.dumps(bare) + b"\n"
    tasks = [r["task_id"] for r in episodes(data, "traces.jsonl", 3) if isinstance(r, dict)]
    assert tasks == ["h0", "3-g3-1"]


def test_tinker_prompt_is_one_task_across_steps(tmp_path):
    run = tmp_path / "runs" / "k1"
    run.mkdir(parents=True)
    (run / "config.json").write_text(json.dumps({"model_name": "m", "max_tokens": 64}))
    rewards = [0.0, 1.0]
    for s in STEPS:
        groups = [
            tk._section(2, "Group Rollout", *[m for r in rewards for m in tk._attempt(t, "x", r)],
                        tk._details(rewards))
            for t in ("t0", "t1")
        ]  # fmt: skip
        d = run / f"iteration_{s:06d}"
        d.mkdir()
        (d / "train_rollout_summaries.jsonl").write_bytes(tk._summaries(s, [rewards, rewards]))
        (d / "train_logtree.json").write_bytes(tk._trace(s, groups))
    lines = [{"step": s, "env/all/reward/total": 0.5} for s in (*STEPS, 4)]
    (run / "metrics.jsonl").write_text("".join(json.dumps(m) + "\n" for m in lines))
    out = tmp_path / "out"
    assert _analyze(tmp_path / "runs", out) == "tinker"
    want = {}
    for t in ("t0", "t1"):
        prompt = f"[system]\n{tk.SYSTEM}\n[user]\n" + tk.QUESTION.format(t=t).replace("&amp;", "&")
        want[_task(prompt)] = list(STEPS)
    assert _probes(out) == want
