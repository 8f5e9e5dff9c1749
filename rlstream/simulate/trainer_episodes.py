"""Per-sample records of simulated trainer runs: tinker-cookbook's captured sampling
calls and prime-rl's episodes (the `verifiers` library's records).

- `capture_samples(step, by_group)`: thinking-machines-lab/tinker-cookbook
  `tinker_cookbook/capture/instrument.py` (`sample` records) written by
  `capture/exporter.py` `JsonlFileSink` to `capture/sample.jsonl`;
- `episode(run, step, attempt)`: PrimeIntellect-ai/verifiers `verifiers/v1/episode.py`
  `Episode.to_record` as prime-rl's `src/prime_rl/monitors/file.py`
  `FileMonitor.log_episodes` appends it to `rollouts/step_N/train/{all,effective}/
  traces.jsonl`.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import orjson


def capture_samples(sd: Any, by_group: dict[str, list[Any]]) -> bytes:
    """The step's sampling calls as tinker-cookbook's capture writes them
    (`capture/instrument.py` `sample` records, `capture/exporter.py` `JsonlFileSink`:
    `json.dumps` lines appended to `capture/sample.jsonl`), one call per turn, scoped
    with `iteration`, `group_idx` and `traj_idx`."""
    lines = []
    for gi, members in enumerate(by_group.values()):
        for ti, a in enumerate(members):
            for g in a.gens:
                lp = [None if np.isnan(x) else float(x) for x in g["ls"]]
                rec = {
                    "kind": "sample", "created_at": sd.time or 0.0,
                    "scope": {"split": "train", "iteration": sd.step, "group_idx": gi,
                              "traj_idx": ti},
                    "num_samples": 1, "sampling_session_id": "sim", "seq_id": len(lines),
                    "prompt_length": g["prompt_len"],
                    "sampling_params": {"max_tokens": None, "temperature": 1.0, "top_p": 1.0,
                                        "top_k": -1, "seed": None},
                    "samples": [{"tokens": [int(x) for x in g["tokens"]], "logprobs": lp,
                                 "stop_reason": "length" if g["truncated"] else "stop"}],
                    "status": "ok", "latency_sec": 0.1,
                }  # fmt: skip
                lines.append(json.dumps(rec))
    return ("\n".join(lines) + "\n").encode() if lines else b""


def episode(run: Any, step: int, a: Any) -> bytes:
    """One attempt as the orchestrator's `FileMonitor.log_episodes` writes an episode:
    `orjson.dumps(Episode.to_record(), option=OPT_APPEND_NEWLINE)`, `exclude_none`, one
    trace of agent "default", a user node (the Loops transcript's prompt) and an
    assistant node (its text, a hacking attempt's shortcut included) per generation. A failed
    attempt (no reward) is an episode with an error and no trace."""
    task = {"type": "sim", "data": {"task_id": a.task_id}, "key": a.task_id}
    ok = a.reward is not None
    nodes: list[dict[str, Any]] = []
    calls: list[dict[str, Any]] = []
    for g in a.gens:
        p = g["prompt_len"] or 1
        nodes.append(
            {"message": {"role": "user", "content": g.get("prompt") or "q"},
             "sampled": False, "timestamp": 0.0, "token_ids": [1] * p, "mask": [False] * p, "is_content": [], "logprobs": []}
        )  # fmt: skip
        ls = [float(x) if np.isfinite(x) else 0.0 for x in g["ls"]]
        nodes.append(
            {"parent": len(nodes) - 1,
             "message": {"role": "assistant", "content": g.get("text") or ""}, "sampled": True, "timestamp": 0.0, "token_ids": [int(x) for x in g["tokens"]],
             "mask": [True] * len(ls), "is_content": [], "logprobs": ls}
        )  # fmt: skip
        calls.append(
            {"node": len(nodes) - 1, "finish_reason": "length" if g["truncated"] else "stop",
             "usage": {"prompt_tokens": p, "completion_tokens": int(g["length"])},
             "time": {"start": 0.0, "end": 0.0}}
        )  # fmt: skip
    trace = {
        "version": 1, "id": f"{a.attempt_id}-t", "verifiers": {"version": "0.3.1"},
        "task": task, "agent": {"config": {}, "name": "default", "trainable": True},
        "tools": [], "nodes": nodes, "calls": calls, "request_rewrites": [],
        "response_rewrites": [], "rewards": {"correct": {"score": a.reward, "weight": 1.0}},
        "metrics": {}, "info": {}, "extra_usage": [], "is_completed": True, "ok": True,
        "stop_condition": "max_turns" if a.termination == "max_turns" else "completed",
        "errors": [],
    }  # fmt: skip
    pv = a.policy_version
    episode = {
        "id": a.attempt_id, "env": {"id": "sim", "name": "sim"}, "task": task,
        "group": {"id": a.group_id},
        "run": {"type": "train", "id": run.run_id, "work": {
            "type": "train", "step": step,
            **({"policy": {"start": pv, "end": pv}} if pv is not None else {})}},
        "ok": ok,
        "errors": [] if ok else [{"type": "TimeoutError", "message": "rollout timed out"}],
        "traces": [trace] if ok else [],
    }  # fmt: skip
    return orjson.dumps(episode, option=orjson.OPT_APPEND_NEWLINE)
