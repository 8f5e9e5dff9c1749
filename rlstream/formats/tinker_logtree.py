"""tinker-cookbook's `iteration_NNNNNN/train_logtree.json`: the logged attempts' text.

Writer (thinking-machines-lab/tinker-cookbook, docs/formats.md): `rl/train.py`
`_get_logtree_scope` hands `utils/logtree.py` `Trace.to_dict()` (`title`,
`started_at`, `path`, `root`: a tree of nodes `tag`, `attrs`, `children` (nodes, or
escaped HTML strings), optional `data`) to `stores/training_store.py` `write_logtree`
once the iteration's sampling ends. Only the first `num_groups_to_log` groups log.
A `scope_header(title)` is a `section` node whose children are an `h<N>` node holding
the title and a `div` body. Each group is a "Group Rollout" section; in it
`rl/problem_env.py` logs, per attempt, a "Prompt" and a "Policy Response" section
each holding a node whose `data` is `{"type": "conversation", "messages": [...]}`,
then a "Reward" section (a key/value table, `reward` formatted `%.3f`); after the
attempts, `rl/rollouts.py` logs "Trajectory Details" with one "Trajectory k Episode"
section per trajectory, in `traj_idx` order, whose last table has `total_return`.

`logtree(data, name, step)` returns one text transcript (trace "text") per logged
attempt: what the call was sent (the Prompt messages, rendered as `[role]` blocks),
what it returned (the Policy Response messages' content, tool calls after it), its
reward, and the words of what it returned as its completion (the rollout summaries
carry lengths only, so nothing is counted twice). Its task is the group's prompt
(`_task`), so one problem is one task at every step it is logged. Matching (docs/formats.md): the
k-th logged group is summaries' `group_idx` k (the sync loop logs and exports groups
in builder order); attempts are logged as their `env.step` finishes, not in
`traj_idx` order, so an attempt takes the lowest unused `traj_idx` whose
`total_return` equals its reward (exact when that reward is unique in the group)
and is `<step>-<group>-log<i>` when none does. An attempt is trained when its group's
rewards are not all equal (as the summaries' `group_discards`). A document that is
not JSON (offset: where decoding failed) or not a trace, and an attempt whose
conversation is malformed (offset None, the reason names the node), are `BadLine`s;
the pipeline refuses a file over `max_file_bytes` before it reaches here.
"""

from __future__ import annotations

import hashlib
import html
import re
from typing import Any

import orjson

from rlstream.formats.records import (
    BadLine,
    BadRecord,
    Transcript,
    TranscriptText,
    parse_json,
    word_ids,
)
from rlstream.formats.text import render_messages

LOGTREE = "train_logtree.json"
GROUP = "Group Rollout"
EPISODE = re.compile(r"Trajectory (\d+) Episode")
HEADER = re.compile(r"h\d")


def logtree(data: bytes, name: str, step: int) -> list[Any]:
    """A step's logtree document: a text transcript per logged attempt (or BadLines)."""
    try:
        doc = orjson.loads(data)
    except orjson.JSONDecodeError as e:
        try:
            parse_json(data)  # the shared reason (malformed_json, non_finite_value, ...)
            reason = "malformed_json"
        except BadRecord as b:
            reason = str(b)
        pos = len(data.decode("utf-8", "replace")[: e.pos].encode())  # e.pos counts chars
        return [BadLine(pos, reason, data[max(0, pos - 100) : pos + 100])]
    root = doc.get("root") if isinstance(doc, dict) else None
    if not isinstance(root, dict):
        why = "missing_field:root" if root is None else "invalid_field:root"
        return [BadLine(None, why, data[:200])]
    out: list[Any] = []
    for gi, body in enumerate(_find_sections(root, GROUP)):
        out.extend(_group(body, gi, step, name))
    return out


def _section(node: Any) -> tuple[str, dict[str, Any]] | None:
    """(title, body) of a `scope_header` section node, else None."""
    if not isinstance(node, dict) or node.get("tag") != "section":
        return None
    kids = node.get("children")
    if not isinstance(kids, list) or len(kids) < 2:
        return None
    h, body = kids[0], kids[1]
    if not isinstance(h, dict) or not HEADER.fullmatch(str(h.get("tag"))):
        return None
    title = h.get("children")
    if not isinstance(title, list) or not all(isinstance(t, str) for t in title):
        return None
    return html.unescape("".join(title)), body if isinstance(body, dict) else {}


def _kids(node: dict[str, Any]) -> list[Any]:
    kids = node.get("children")
    return kids if isinstance(kids, list) else []


def _find_sections(root: dict[str, Any], title: str) -> list[dict[str, Any]]:
    """Bodies of the sections titled `title`, in document order (none inside another)."""
    out: list[dict[str, Any]] = []
    stack: list[Any] = [root]
    while stack:
        node = stack.pop()
        sec = _section(node)
        if sec is not None and sec[0] == title:
            out.append(sec[1])
            continue
        if isinstance(node, dict):
            stack.extend(reversed(_kids(node)))
    return out


LOGGED = frozenset({"Prompt", "Policy Response", "Reward", "Trajectory Details"})


def _attempt_sections(body: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """The sections of `LOGGED` titles below a group's body, in document order (a
    rollout strategy's own scopes between them are looked through)."""
    out: list[tuple[str, dict[str, Any]]] = []
    stack = list(reversed(_kids(body)))
    while stack:
        node = stack.pop()
        sec = _section(node)
        if sec is not None and sec[0] in LOGGED:
            out.append(sec)
        elif isinstance(node, dict):
            stack.extend(reversed(_kids(node)))
    return out


def _walk(node: dict[str, Any]) -> list[dict[str, Any]]:
    """Every node below `node`, in document order."""
    out: list[dict[str, Any]] = []
    stack = list(reversed(_kids(node)))
    while stack:
        n = stack.pop()
        if isinstance(n, dict):
            out.append(n)
            stack.extend(reversed(_kids(n)))
    return out


def _conversation(body: dict[str, Any]) -> list[Any] | None:
    """The messages of the first conversation node below `body`; None: none logged."""
    for n in _walk(body):
        d = n.get("data")
        if isinstance(d, dict) and d.get("type") == "conversation":
            msgs = d.get("messages")
            if not isinstance(msgs, list) or not all(isinstance(m, dict) for m in msgs):
                raise BadRecord("invalid_field:data.messages")
            return msgs
    return None


def _table(body: dict[str, Any]) -> dict[str, str]:
    """Key/value rows of the tables below `body` (`table_from_dict`), later rows win."""
    out: dict[str, str] = {}
    for n in _walk(body):
        if n.get("tag") != "tr":
            continue
        cells = [c for c in _kids(n) if isinstance(c, dict) and c.get("tag") == "td"]
        if len(cells) == 2:
            k, v = ("".join(s for s in _kids(c) if isinstance(s, str)) for c in cells)
            out[html.unescape(k)] = html.unescape(v)
    return out


def _number(s: str | None) -> float | None:
    try:
        return float(s) if s is not None else None
    except ValueError:
        return None


def _returned(msgs: list[Any]) -> str:
    """What the policy returned: its messages' text content, tool calls after it."""
    parts = []
    for m in msgs:
        c = m.get("content")
        if isinstance(c, list):
            c = "\n".join(
                p["text"] for p in c if isinstance(p, dict) and isinstance(p.get("text"), str)
            )
        calls = m.get("tool_calls")
        parts.append((c if isinstance(c, str) else "") + (f"\n{calls}" if calls else ""))
    return "\n".join(parts)


def _task(attempts: list[dict[str, Any]], gid: str) -> str:
    """A group's task: its prompt (blake2b-64 of the first logged Prompt's messages,
    the same at every step the problem comes back, as verl's and TRL's tasks), else
    `gid` (one step's group) when no Prompt was logged."""
    for a in attempts:
        if a.get("sent"):
            return hashlib.blake2b(render_messages(a["sent"]).encode(), digest_size=8).hexdigest()
    return gid


def _group(body: dict[str, Any], gi: int, step: int, name: str) -> list[Any]:
    """One logged group's attempts as text transcripts."""
    attempts: list[dict[str, Any]] = []
    returns: dict[int, float] = {}
    bad: list[Any] = []
    for title, sbody in _attempt_sections(body):
        if title == "Trajectory Details":
            for k in _kids(sbody):
                ep = _section(k)
                m = EPISODE.fullmatch(ep[0]) if ep else None
                r = _number(_table(ep[1]).get("total_return")) if ep and m else None
                if m and r is not None:
                    returns[int(m.group(1))] = r
            continue
        if title == "Prompt" or not attempts or ("returned" in attempts[-1] and title != "Reward"):
            attempts.append({"i": len(attempts)})
        a = attempts[-1]
        if title == "Reward":
            a["reward"] = _number(_table(sbody).get("reward"))
            continue
        try:
            msgs = _conversation(sbody)
        except BadRecord as e:
            a["bad"] = f"{e}:group[{gi}].attempt[{a['i']}].{title.lower().replace(' ', '_')}"
            continue
        a["sent" if title == "Prompt" else "returned"] = msgs or []
    rewards = list(returns.values()) or [
        a["reward"] for a in attempts if a.get("reward") is not None
    ]
    trains = len(rewards) > 1 and len(set(rewards)) > 1
    free = dict(sorted(returns.items()))
    out: list[Any] = []
    gid = f"{step}-{gi}"
    task = _task(attempts, gid)
    for a in attempts:
        if "bad" in a:
            bad.append(BadLine(None, a["bad"], orjson.dumps(body)[:200]))
            continue
        if "returned" not in a:
            continue  # a prompt whose response was not logged: nothing returned to read
        r = a.get("reward")
        t = next((k for k, v in free.items() if r is not None and round(v, 3) == round(r, 3)), None)
        if t is not None:
            r = free.pop(t)
        aid = f"{gid}-{t}" if t is not None else f"{gid}-log{a['i']}"
        returned = _returned(a["returned"])
        sent = render_messages(a.get("sent") or [])
        tx = TranscriptText((sent,), (returned,), r, gid, None, None, name)
        arr = word_ids(returned)
        toks = [arr] if arr.size else []
        t_ = Transcript(aid, task, step, trains, "text", [], [], [], [], toks, None, None, tx)
        out.append(t_)
    return bad + out
