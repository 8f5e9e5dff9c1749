"""What a `watch --notify` message tells, and its body (`fleet.notify` delivers it).

`told(alerts)`: the finding transitions a message tells of (see its docstring).
`render(transitions, cfg, out, message_id)`: the body.

Formats: `json` (`{"id", "source", "out", "transitions": [{run_id, name, code,
severity, from_state, to_state, step, time, evidence, advice, url}]}`; `name`: the
run's folder, as the pages name it) and `slack` (an incoming webhook payload:
`{"text": ...}` with one line per transition, the run by name and id, run strings escaped
for Slack's markup; a severity rise reads `escalated`). `url` links to the run's page
when `watch --ui-port` serves it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any
from urllib.parse import quote

import orjson

from rlstream.fleet.advice import advice

if TYPE_CHECKING:
    from rlstream.fleet.notify import NotifyConfig

NOTIFIED_STATES = ("firing", "resolved")


def _ms(v: Any) -> int | None:
    if v is None:
        return None
    return int(v.timestamp() * 1000) if hasattr(v, "timestamp") else int(v)


_RANK = {"critical": 0, "warning": 1, "info": 2}


def told(alerts: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The transitions a message tells of: each to `firing` from another state, each to
    `resolved`, and a `firing -> firing` severity change only when it rises above every
    severity already told in that firing stretch (a burst flapping between warning and
    critical at every step is told once at critical, not at every step). A function of
    the alerts rows alone, so a restart picks the same ones."""
    out = []
    top: dict[tuple[str, str], int] = {}
    for a in sorted(alerts, key=lambda a: (a.get("step") or 0, _ms(a.get("time")) or 0)):
        k, to, rank = (a["run_id"], a["code"]), a.get("to_state"), _RANK.get(a["severity"], 9)
        if to == "firing" and a.get("from_state") == "firing":
            if k in top and rank >= top[k]:
                continue
            top[k] = rank
        elif to == "firing":
            top[k] = rank
        elif to in ("resolved", "inactive"):
            top.pop(k, None)
        if to in NOTIFIED_STATES:
            out.append(a)
    return out


def _slack_escape(s: Any) -> str:
    return str(s).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def render(
    transitions: list[dict[str, Any]],
    cfg: NotifyConfig,
    out: str,
    message_id: str,
    names: dict[str, str] | None = None,
) -> bytes:
    """The message body for these transitions (see the module docstring); `names`:
    each run's name (its folder, as the pages call it), else its id."""
    items = []
    for t in transitions:
        url = None
        if cfg.base_url:
            url = f"{cfg.base_url.rstrip('/')}/run?id={quote(str(t['run_id']), safe='')}"
        items.append(
            {
                "run_id": t["run_id"],
                "name": (names or {}).get(t["run_id"]) or t["run_id"],
                "code": t["code"],
                "severity": t["severity"],
                "from_state": t.get("from_state"),
                "to_state": t["to_state"],
                "step": t.get("step"),
                "time": _ms(t.get("time")),
                "evidence": t.get("message"),
                "advice": advice(t["code"]),
                "url": url,
            }
        )
    if cfg.format == "json":
        doc = {"id": message_id, "source": "rlstream", "out": out, "transitions": items}
        return orjson.dumps(doc)
    n_fire = sum(i["to_state"] == "firing" for i in items)
    lines = [f"rlstream: {n_fire} firing, {len(items) - n_fire} resolved ({_slack_escape(out)})"]
    for i in items:
        mark = ":red_circle:" if i["to_state"] == "firing" else ":white_check_mark:"
        rise = i["from_state"] == i["to_state"] == "firing"
        state = "escalated" if rise else i["to_state"]
        link = f" <{i['url']}|run page>" if i["url"] else ""
        ident = f"`{_slack_escape(i['name'])}`"
        if i["name"] != i["run_id"]:
            ident += f" ({_slack_escape(i['run_id'])})"
        lines.append(
            f"{mark} *{state}* `{_slack_escape(i['code'])}` ({i['severity']}) on "
            f"{ident} at step {i['step']}: "
            f"{_slack_escape(i['evidence'] or '')} _{_slack_escape(i['advice'])}_{link}"
        )
    return orjson.dumps({"text": "\n".join(lines)})
