"""Per-sample records of simulated trainer runs: tinker-cookbook's captured sampling
calls and logtree, and prime-rl's episodes (the `verifiers` library's records).

- `capture_samples(step, by_group)`: thinking-machines-lab/tinker-cookbook
  `tinker_cookbook/capture/instrument.py` (`sample` records) written by
  `capture/exporter.py` `JsonlFileSink` to `capture/sample.jsonl`;
- `logtree(step, by_group)`: tinker-cookbook's `iteration_NNNNNN/train_logtree.json`
  (`utils/logtree.py` `Trace.to_dict`, as `rl/problem_env.py` and `rl/rollouts.py`
  log a group);
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


NUM_GROUPS_TO_LOG = 4
"""tinker-cookbook `rl/train.py` `Config.num_groups_to_log` default."""


def _sec(level: int, title: str, body: list[Any]) -> dict[str, Any]:
    """A `logtree.scope_header(title)` section as `Node.to_dict` writes it."""
    h = {"tag": f"h{level}", "attrs": {"class": f"lt-h{level}"}, "children": [title]}
    div = {"tag": "div", "attrs": {"class": "lt-section-body"}, "children": body}
    return {"tag": "section", "attrs": {"class": "lt-section"}, "children": [h, div]}


def _convo(messages: list[dict[str, Any]]) -> dict[str, Any]:
    """`log_formatter(ConversationFormatter(messages))`: the HTML child is dropped
    from the JSON because `data` is present."""
    data = {"type": "conversation", "messages": messages}
    return {"tag": "div", "attrs": {}, "children": [], "data": data}


def _kv(rows: dict[str, Any], caption: str) -> list[dict[str, Any]]:
    """`logtree.table_from_dict(rows, caption=...)`: a caption div and a table."""
    cell = lambda tag, v: {"tag": tag, "attrs": {}, "children": [str(v)]}  # noqa: E731
    head = {"tag": "tr", "attrs": {}, "children": [cell("th", "key"), cell("th", "value")]}
    body = [{"tag": "tr", "attrs": {}, "children": [cell("td", k), cell("td", v)]}
            for k, v in rows.items()]  # fmt: skip
    table = {"tag": "table", "attrs": {"class": "lt-table"}, "children": [
        {"tag": "thead", "attrs": {}, "children": [head]},
        {"tag": "tbody", "attrs": {}, "children": body}]}  # fmt: skip
    return [{"tag": "div", "attrs": {"class": "lt-table-caption"}, "children": [caption]}, table]


def _prompt_messages(p: str) -> list[dict[str, Any]]:
    """The simulated prompt (`[system]` and `[user]` blocks) as chat messages."""
    if p.startswith("[system]\n") and "\n[user]\n" in p:
        system, user = p[len("[system]\n") :].split("\n[user]\n", 1)
        return [{"role": "system", "content": system}, {"role": "user", "content": user}]
    return [{"role": "user", "content": p}]


def logtree(sd: Any, by_group: dict[str, list[Any]]) -> bytes:
    """The step's `iteration_NNNNNN/train_logtree.json` as tinker-cookbook writes it
    (`utils/logtree.py` `Trace.to_dict`, `json.dumps(indent=2)`): the first
    `NUM_GROUPS_TO_LOG` groups, each a "Group Rollout" section in which
    `rl/problem_env.py` logs per attempt its Prompt, Policy Response (the Loops
    transcript's text, a shortcut or repeated answer included) and Reward, then
    `rl/rollouts.py` its "Trajectory Details" in traj_idx order."""
    groups = []
    for members in list(by_group.values())[:NUM_GROUPS_TO_LOG]:
        body: list[Any] = []
        episodes = []
        for ti, a in enumerate(members):
            r = a.reward if a.reward is not None else 0.0
            p = next((g.get("prompt") for g in a.gens if g.get("prompt")), None) or "q"
            said = [{"role": "assistant", "content": g.get("text") or ""} for g in a.gens]
            body += [
                _sec(3, "Prompt", [_convo(_prompt_messages(p))]),
                _sec(3, "Policy Response", [_convo(said)]),
                _sec(3, "Reward", _kv({"format_valid": True, "correct": r > 0.5,
                                       "format_coef": 0.1, "reward": f"{r:.3f}"},
                                      "Reward components")),
            ]  # fmt: skip
            turns = [
                _sec(5, f"Turn {i}", _kv({"ob_len": g["prompt_len"], "ac_len": g["length"],
                                          "step_reward": f"{r if i == len(a.gens) else 0.0:.3f}"},
                                         "Step stats"))
                for i, g in enumerate(a.gens, start=1)
            ]  # fmt: skip
            final = {"num_turns": len(a.gens), "final_ob_len": 0,
                     "sum_step_rewards": f"{r:.3f}", "final_group_reward": "0.000",
                     "total_return": f"{r:.3f}"}  # fmt: skip
            episodes.append(
                _sec(4, f"Trajectory {ti} Episode",
                     [_sec(5, "Episode Details", turns + _kv(final, "Episode totals"))])
            )  # fmt: skip
        body.append(_sec(3, "Trajectory Details", episodes))
        groups.append(_sec(2, "Group Rollout", body))
    title = f"RL Iteration {sd.step}"
    root = {"tag": "body", "attrs": {"class": "lt-root"}, "children": [
        {"tag": "h1", "attrs": {"class": "lt-title"}, "children": [title]}, *groups]}  # fmt: skip
    doc = {"title": title, "started_at": "2026-01-01T00:00:00", "path": None, "root": root}
    return json.dumps(doc, indent=2).encode()
