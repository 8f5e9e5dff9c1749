"""A probe task is followed across steps in verl and TRL runs too (issue 28).

verl's `rollout_data_dir` dumps and TRL's completion tables name no task: the task is
the prompt (docs/formats.md), so the same prompt at two steps is one task, while a
group stays one step's samples of a prompt. The probe panel (docs/schema.md,
`samples`: the `probes` tasks of the first step, kept at every step they appear in)
then shows one prompt's outputs step after step. The task ids are recomputed here
from the docs: blake2b-64 (hex) of verl's `input`, of `repr` of TRL's `prompt`.
"""

from __future__ import annotations

import hashlib
import io
import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from rlstream.config import PipelineConfig
from rlstream.metrics.scanners import samples_config
from rlstream.pipeline.local import analyze_local
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
