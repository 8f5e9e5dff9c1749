"""prime-rl's episodes: `rollouts/step_N/train/all/traces.jsonl`, one `verifiers`
`Episode.to_record()` line per arriving episode (docs/formats.md, prime-rl).

`episodes(data, name, step)` turns a step's file into, per trace of a trainable agent,
a rollout record (group = `group.id` and the agent's name; task = the episode's
`task.key`, verifiers' stable task identity (its content hash unless the task set
names one), else `task.hash`, else the step's group id; reward = the sum of
`score * weight` over its rewards, policy version = `run.work.policy.start`; not `ok`:
`rollout_failed/<error type>`; then `no_variance` / `group_too_small` by group) and,
where its nodes carry text or sampled tokens, a text transcript (trace "text"):

- what each call returned: the `message.content` of each `sampled` node (its
  `tool_calls` after it, where it made some);
- what each call was sent: the messages of the non-sampled nodes since the previous
  call (the task's prompt, tool results), rendered as `[role]` blocks;
- its completion for the distinct-answer and n-gram kernels: the sampled nodes'
  `token_ids` under `mask` (words of the text where no ids are recorded), only for an
  attempt that is not trained: a trained one's tokens come from the token exports, and
  counting them twice would halve the distinct share. So a policy whose groups all
  answer alike (nothing trained, no exports) is still seen.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from rlstream.formats.records import (
    BadRecord,
    Transcript,
    TranscriptText,
    finite_number,
    group_discards,
    is_int,
    jsonl_records,
    word_ids,
)
from rlstream.formats.text import render_messages

TRUNCATING_STOPS = frozenset(
    {"max_turns", "max_input_tokens", "max_output_tokens", "max_total_tokens", "context_length"}
)
"""verifiers' `Trace.is_truncated`: stop conditions that are framework limits."""

TEXT = "_text"
"""The private key a parsed rollout carries its trace's text under until `episodes`
has settled its group's discards (trained or not)."""


def episodes(data: bytes, name: str, step: int) -> list[Any]:
    """A step's episodes file: rollout records, each followed by its text transcript."""
    out: list[Any] = []
    for r in group_discards(jsonl_records(data, lambda obj: _episode(obj, step))):
        if not isinstance(r, dict) or TEXT not in r:
            out.append(r)
            continue
        r = dict(r)
        sent, returned, ids, stop = r.pop(TEXT)
        out.append(r)
        trains = bool(r["trained"])
        tx = None
        if any(returned):  # no text recorded: nothing to scan or keep
            tx = TranscriptText(
                tuple(sent), tuple(returned), r["reward"], r["group_id"], r["policy_version"],
                stop, name,
            )  # fmt: skip
        arr = np.asarray(ids, dtype=np.int64) if ids else word_ids("\n".join(returned))
        toks = [] if trains or not arr.size else [arr]
        if tx is None and not toks:
            continue
        t = Transcript(
            r["attempt_id"], r["task_id"], step, trains, "text", [], [], [], [], toks, None, None, tx
        )  # fmt: skip
        out.append(t)
    return out


def _text(nodes: list[dict[str, Any]]) -> tuple[list[str], list[str], list[int]]:
    """(sent, returned, sampled token ids under mask) of a trace's nodes."""
    sent: list[str] = []
    returned: list[str] = []
    ids: list[int] = []
    pending: list[Any] = []
    for n in nodes:
        msg = n.get("message")
        if n.get("sampled") is not True:
            if isinstance(msg, dict):
                pending.append(msg)
            continue
        sent.append(render_messages(pending) if pending else "")
        pending = []
        content = msg.get("content") if isinstance(msg, dict) else None
        if isinstance(content, list):
            content = "\n".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
        calls = msg.get("tool_calls") if isinstance(msg, dict) else None
        extra = f"\n{calls}" if calls else ""  # the tool calls it made, as render_messages
        returned.append((content if isinstance(content, str) else "") + extra)
        toks, mask = n.get("token_ids"), n.get("mask")
        if isinstance(toks, list) and isinstance(mask, list) and len(toks) == len(mask):
            ids.extend(int(t) for t, m in zip(toks, mask, strict=True) if m is True and is_int(t))
    return sent, returned, ids


def _task_id(obj: dict[str, Any], gid: str) -> str:
    """The episode's task: `task.key` (verifiers' `Task.key`, the same at every step
    the task comes back), else `task.hash`, else `gid` (one step's group)."""
    task = obj.get("task")
    if isinstance(task, dict):
        for k in ("key", "hash"):
            v = task.get(k)
            if isinstance(v, str) and v:
                return v
    return gid


def _trace_attempt(
    tr: Any, i: int, ep: dict[str, Any], gid: str, step: int, pv: int | None
) -> dict[str, Any]:
    """One trace of an episode as a rollout record (docs/formats.md, prime-rl)."""
    if not isinstance(tr, dict):
        raise BadRecord(f"invalid_field:traces[{i}]")
    agent = tr.get("agent") if isinstance(tr.get("agent"), dict) else {}
    name = agent.get("name") if isinstance(agent.get("name"), str) else "agent"
    rewards = tr.get("rewards", {})
    if not isinstance(rewards, dict):
        raise BadRecord(f"invalid_field:traces[{i}].rewards")
    reward = 0.0
    for k, r in rewards.items():
        if r is None:
            continue
        if not isinstance(r, dict) or "score" not in r:
            raise BadRecord(f"invalid_field:traces[{i}].rewards.{k}")
        reward += finite_number(r["score"], f"rewards.{k}.score") * finite_number(
            r.get("weight", 1.0), f"rewards.{k}.weight"
        )
    nodes, calls = tr.get("nodes", []), tr.get("calls", [])
    if not isinstance(nodes, list) or not all(isinstance(n, dict) for n in nodes):
        raise BadRecord(f"invalid_field:traces[{i}].nodes")
    if not isinstance(calls, list) or not all(isinstance(c, dict) for c in calls):
        raise BadRecord(f"invalid_field:traces[{i}].calls")
    sampled = [n for n in nodes if n.get("sampled") is True]
    usage = [c["usage"] for c in calls if isinstance(c.get("usage"), dict)]
    if usage:
        counts = [u.get("completion_tokens", 0) for u in usage]
        if not all(is_int(n) and n >= 0 for n in counts):
            raise BadRecord(f"invalid_field:traces[{i}].calls.usage.completion_tokens")
        out_tokens = sum(counts)
    else:
        out_tokens = sum(sum(1 for m in n.get("mask", ()) if m is True) for n in sampled)
    stop = tr.get("stop_condition")
    last = next((c for c in reversed(calls) if c.get("error") is None), None)
    truncated = stop in TRUNCATING_STOPS or bool(last and last.get("finish_reason") == "length")
    ok = ep.get("ok") is True and tr.get("ok") is True
    meta: dict[str, Any] = {
        "turns": len(sampled),
        "output_tokens": out_tokens,
        "truncated": truncated,
    }
    if isinstance(stop, str):
        meta["termination_reason"] = stop
    sent, returned, ids = _text(nodes)
    finish = last.get("finish_reason") if last else None
    return {
        "attempt_id": f"{step}-{ep['id']}-{i}",
        "group_id": f"{gid}/{name}",
        "task_id": _task_id(ep, gid),
        "step": step,
        "policy_version": pv,
        "reward": reward if ok else None,
        "trained": ok,
        "discard_reason": None if ok else f"rollout_failed/{_error_type(tr, ep)}",
        "metadata": meta,
        TEXT: (sent, returned, ids, finish if isinstance(finish, str) else None),
    }


def _error_type(*objs: dict[str, Any]) -> str:
    """The type of the last error recorded on the first of `objs` that has one."""
    for obj in objs:
        errs = obj.get("errors")
        if isinstance(errs, list) and errs and isinstance(errs[-1], dict):
            t = errs[-1].get("type")
            return t if isinstance(t, str) and t else "error"
    return "error"


def _episode(obj: Any, step: int) -> list[dict[str, Any]]:
    """One `Episode.to_record()` line: a rollout record per trace."""
    if not isinstance(obj, dict):
        raise BadRecord("not_an_object")
    ep_id = obj.get("id")
    if not isinstance(ep_id, str):
        raise BadRecord("missing_field:id" if ep_id is None else "invalid_field:id")
    group = obj.get("group")
    if not isinstance(group, dict) or not isinstance(group.get("id"), str):
        raise BadRecord("missing_field:group.id")
    work = (obj.get("run") or {}).get("work") if isinstance(obj.get("run"), dict) else None
    policy = work.get("policy") if isinstance(work, dict) else None
    pv = policy.get("start") if isinstance(policy, dict) else None
    if pv is not None and (not is_int(pv) or pv < 0):
        raise BadRecord("invalid_field:run.work.policy.start")
    traces = obj.get("traces", [])
    if not isinstance(traces, list):
        raise BadRecord("invalid_field:traces")
    gid = f"{step}-{group['id']}"
    if not traces:  # an episode that failed before any trace was produced
        return [
            {
                "attempt_id": f"{step}-{ep_id}",
                "group_id": f"{gid}/agent",
                "task_id": _task_id(obj, gid),
                "step": step,
                "policy_version": pv,
                "reward": None,
                "trained": False,
                "discard_reason": f"rollout_failed/{_error_type(obj)}",
                "metadata": {},
            }
        ]
    return [
        _trace_attempt(tr, i, obj, gid, step, pv)
        for i, tr in enumerate(traces)
        if not (isinstance(tr, dict) and _untrainable(tr))
    ]


def _untrainable(trace: dict[str, Any]) -> bool:
    """A trace of an agent the run does not train (`agent.trainable` false: an opponent,
    a judge) is not an attempt."""
    agent = trace.get("agent")
    return isinstance(agent, dict) and agent.get("trainable") is False
