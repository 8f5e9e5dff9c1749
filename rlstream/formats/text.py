"""What a transcript's model calls were sent and returned (display text, not tokens).

`text_of(doc, generations, name)` reads the optional display fields of a Loops
transcript (docs/run-format.md): each generation's `text` (what the call returned),
`prompt` or `messages` (what it was sent, tool results included), and the attempt's
optional `reward`; `render_messages` renders chat messages as text. Pure functions
over decoded JSON (dicts, or simdjson proxies); text fields of the wrong type count as
absent, since they are for display only and must never reject a transcript.
"""

from __future__ import annotations

import math
from typing import Any

from rlstream.formats.records import TranscriptText, _is_int, _is_num


def _plain(v: Any) -> Any:
    return v.as_list() if hasattr(v, "as_list") else v.as_dict() if hasattr(v, "as_dict") else v


def render_messages(messages: Any) -> str:
    """Chat messages as text, one `[role]` header a message (tool results included);
    content that is a list of parts keeps its text parts."""
    out: list[str] = []
    for m in _plain(messages) if messages is not None else ():
        if not isinstance(m, dict):
            continue
        content = m.get("content")
        if isinstance(content, list):
            content = "\n".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
        role = m.get("role") if isinstance(m.get("role"), str) else "?"
        calls = m.get("tool_calls")
        extra = f"\n{calls}" if calls else ""
        out.append(f"[{role}]\n{content if isinstance(content, str) else ''}{extra}")
    return "\n".join(out)


def _keys(obj: Any) -> Any:
    """What `in` tests a key against: a dict itself; a simdjson proxy's keys as a set
    (its `get` of a missing key raises and catches an exception: several times the
    cost of the set)."""
    return obj if isinstance(obj, dict) else set(obj.keys())


def text_of(doc: Any, gens: Any, name: str) -> TranscriptText | None:
    """What each call was sent (`prompt`, else `messages`) and returned (`text`), with
    the optional `reward`, `group_id`; None when no generation records text. Text
    fields of the wrong type count as absent (they are for display only)."""
    sent: list[str] = []
    returned: list[str] = []
    any_text = False
    stop = None
    pv = None
    for g in gens:
        have = _keys(g)
        t = g["text"] if "text" in have else None
        p = g["prompt"] if "prompt" in have else None
        any_text = any_text or isinstance(t, str)
        returned.append(t if isinstance(t, str) else "")
        if isinstance(p, str):
            sent.append(p)
        else:
            m = g["messages"] if "messages" in have else None
            sent.append(render_messages(m) if m else "")
        s = g["stop_reason"] if "stop_reason" in have else None
        stop = s if isinstance(s, str) else stop
        v = g["policy_version"] if "policy_version" in have else None
        pv = v if _is_int(v) else pv
    if not any_text:
        return None
    have = _keys(doc)
    r = doc["reward"] if "reward" in have else None
    group = doc["group_id"] if "group_id" in have else None
    return TranscriptText(
        tuple(sent),
        tuple(returned),
        float(r) if _is_num(r) and math.isfinite(r) else None,
        group if isinstance(group, str) else "",
        pv,
        stop,
        f"transcripts/{name}.json",
    )
