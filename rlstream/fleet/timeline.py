"""The run page's findings timeline, from the run's `alerts` rows (every transition).

The latest run_health row lists a run's pending, firing and recently resolved
findings; a finding resolved more than `keep_resolved_steps` steps ago is gone from it,
and it says when a finding started, not when it ended. The `alerts` table keeps every
transition, so the timeline is built from it:

- `episodes(transitions, findings)`: each stretch during which a finding was active,
  per code, in the order they began: the step it went pending (None when it fired at
  once), the step it fired (None: it never fired), the step it ended (resolved, or
  back to inactive without firing; None: still active), its worst severity and (`now`)
  its latest, its state
  now (`pending`, `firing`, `resolved`, or `cleared`: ended without firing), and its
  evidence: for an open stretch the message of the run's current finding, else the
  message it fired (or went pending) with, and the message it ended with. A current
  finding with no transition (rows written before the alerts table) is an open
  stretch from its `since_step`.
- `timeline_html(eps, last_step)`: one chart row per code (a faint bar while pending,
  a solid one while firing, each ending where it ended, or at the last step while
  open) and the list: firing first (most severe first), then pending, then the ended
  ones, newest first, each with its steps, evidence and advice.

Pure functions: `fleet.web` reads the rows. Every run string goes through
`html.escape`.
"""

from __future__ import annotations

from html import escape
from typing import Any

from rlstream.fleet.advice import advice

SEVERITY_COLOR = {"critical": "#c0392b", "warning": "#d68910", "info": "#2e86c1"}
_SEVERITY = {"critical": 0, "warning": 1, "info": 2}
_STATE_ORDER = {"pending": 0, "firing": 1, "resolved": 2, "inactive": 2}
_LIST_ORDER = {"firing": 0, "pending": 1, "resolved": 2, "cleared": 3}


def _e(v: Any) -> str:
    return escape("" if v is None else str(v), quote=True)


def _ms(v: Any) -> float:
    if v is None:
        return 0.0
    return v.timestamp() * 1000 if hasattr(v, "timestamp") else float(v)


def episodes(
    transitions: list[dict[str, Any]], findings: list[dict[str, Any]] | None = None
) -> list[dict[str, Any]]:
    """The run's finding stretches (see the module docstring) from its `alerts` rows
    and its latest run_health `findings`."""
    out: list[dict[str, Any]] = []
    open_: dict[str, dict[str, Any]] = {}
    order = sorted(
        transitions,
        key=lambda t: (
            t.get("step") if t.get("step") is not None else -1,
            _ms(t.get("time")),
            _STATE_ORDER.get(t.get("to_state") or "", 3),
        ),
    )
    for t in order:
        code, to, step = t.get("code"), t.get("to_state"), t.get("step")
        ep = open_.get(code)
        if ep is None and to in ("pending", "firing"):
            ep = {
                "code": code,
                "severity": t.get("severity"),
                "pending": step if to == "pending" else None,
                "firing": None,
                "end": None,
                "state": to,
                "message": t.get("message"),
                "end_message": None,
                "now": t.get("severity"),
            }
            open_[code] = ep
            out.append(ep)
        if ep is None:
            continue
        if to == "firing":
            if ep["firing"] is None:
                ep["firing"], ep["message"] = step, t.get("message")
            ep["state"], ep["now"] = "firing", t.get("severity")
            if _SEVERITY.get(t.get("severity"), 9) < _SEVERITY.get(ep["severity"], 9):
                ep["severity"] = t.get("severity")
        elif to in ("resolved", "inactive"):
            ep["end"], ep["end_message"] = step, t.get("message")
            ep["state"] = "resolved" if ep["firing"] is not None else "cleared"
            del open_[code]
    for f in findings or []:
        if f.get("state") not in ("pending", "firing"):
            continue
        ep = open_.get(f.get("code"))
        if ep is not None:
            ep["message"] = f.get("message") or ep["message"]
            ep["now"] = f.get("severity") or ep["now"]
            continue
        since = f.get("since_step")
        out.append(
            {
                "code": f.get("code"),
                "severity": f.get("severity"),
                "pending": since if f["state"] == "pending" else None,
                "firing": since if f["state"] == "firing" else None,
                "end": None,
                "state": f["state"],
                "message": f.get("message"),
                "end_message": None,
                "now": f.get("severity"),
            }
        )
    return out


def _start(ep: dict[str, Any]) -> int | None:
    return ep["pending"] if ep["pending"] is not None else ep["firing"]


def timeline_svg(eps: list[dict[str, Any]], last_step: int | None, width: int = 900) -> str:
    """One row per code, its stretches as bars on the run's step axis."""
    placed = [e for e in eps if _start(e) is not None]
    if not placed:
        return ""
    codes = list(dict.fromkeys(e["code"] for e in placed))
    ends = [int(e["end"]) for e in placed if e["end"] is not None]
    end = max([int(last_step or 0), *(int(_start(e) or 0) for e in placed), *ends]) or 1
    left, right, row = 150, 10, 16
    pw = width - left - right

    def x(step: int) -> float:
        return left + step / end * pw

    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="timeline-chart" width="{width}" '
        f'height="{row * len(codes) + 18}" role="img">'
    ]
    for i, code in enumerate(codes):
        parts.append(f'<text x="{left - 6}" y="{i * row + 14}" class="yt">{_e(code)}</text>')
    for e in placed:
        y = codes.index(e["code"]) * row + 4
        color = SEVERITY_COLOR.get(str(e["severity"]), "#888")
        stop = end if e["end"] is None else int(e["end"])
        spans = []
        if e["pending"] is not None:
            p_end = e["firing"] if e["firing"] is not None else stop
            spans.append(("pending", int(e["pending"]), int(p_end), ' opacity="0.3"'))
        if e["firing"] is not None:
            spans.append(("firing", int(e["firing"]), stop, ""))
        for what, a, b, faint in spans:
            x0 = x(a)
            now = e["end"] is None and (what == "firing" or e["firing"] is None)
            to = f"now (step {b})" if now else f"step {b}"
            parts.append(
                f'<rect x="{x0:.1f}" y="{y}" width="{max(x(b) - x0, 2):.1f}" height="11" '
                f'fill="{color}"{faint} data-span="{what}"><title>{_e(e["code"])}: {what} '
                f"from step {a} to {to}</title></rect>"
            )
    y = row * len(codes) + 14
    parts.append(f'<text x="{left}" y="{y}" class="xt">step 0</text>')
    parts.append(f'<text x="{left + pw}" y="{y}" class="xt">{end}</text></svg>')
    return "".join(parts)


def _steps(e: dict[str, Any]) -> str:
    fired, pend, end = e["firing"], e["pending"], e["end"]
    if e["state"] == "cleared":
        return f"steps {pend}-{end}, pending, ended without firing"
    if e["state"] == "pending":
        return f"pending since step {pend}"
    began = f"step {fired}" + (f" (pending from {pend})" if pend is not None else "")
    if end is None:
        return f"firing since {began}"
    return f"fired at {began}, resolved at step {end}"


def _severity(e: dict[str, Any]) -> str:
    """The stretch's severity: its worst, and what it is now when an open one fell."""
    worst, now = e["severity"], e.get("now")
    if e["end"] is None and now and now != worst:
        return f"{now} now, {worst} at worst"
    return str(worst)


def _list_key(e: dict[str, Any]) -> tuple[Any, ...]:
    rank = _LIST_ORDER.get(e["state"], 9)
    if rank <= 1:
        return (rank, _SEVERITY.get(e["severity"], 9), -(_start(e) or 0), str(e["code"]))
    return (rank, 0, -(e["end"] or 0), str(e["code"]))


def timeline_html(eps: list[dict[str, Any]], last_step: int | None) -> str:
    """The chart and the list of the run's finding stretches."""
    if not eps:
        return '<p class="sub">No finding.</p>'
    items = []
    for e in sorted(eps, key=_list_key):
        ended = (
            f'<div class="evidence ended">when it resolved: {_e(e["end_message"])}</div>'
            if e["end_message"] and e["state"] == "resolved"
            else ""
        )
        items.append(
            f'<li class="finding sev-{_e(e["severity"])} st-{_e(e["state"])}">'
            f'<span class="step">{_e(_steps(e))}</span> <b>{_e(e["code"])}</b> '
            f"[{_e(_severity(e))}, {_e(e['state'])}]"
            f'<div class="evidence">{_e(e["message"])}</div>{ended}'
            f'<div class="advice">{_e(advice(e["code"]))}</div></li>'
        )
    return timeline_svg(eps, last_step) + f'<ol class="timeline">{"".join(items)}</ol>'
