"""A probe task's output at two steps, side by side with a word diff (OUT/samples).

Pure functions, no I/O: `word_diff(a, b)` returns both texts as escaped HTML, words
only in `a` inside `<del>`, words only in `b` inside `<ins>` (difflib over the first
`DIFF_WORDS` words of each); `probe_pick(rows, task, a, b)` chooses the task and the
two steps (default: the run's first probe task, i.e. the one kept earliest, then by
id, among those kept at two steps or more; its earliest and newest kept steps);
`probe_diff_html(...)` renders the pair. The report's Samples section
(`fleet.report_samples`) and the run page (`fleet.sample_view`) both use them. Every
string from run data goes through `html.escape`.
"""

from __future__ import annotations

import difflib
from html import escape
from typing import Any

DIFF_WORDS = 600
"""Words of each side compared (the rest is cut)."""

_PRE = "white-space:pre-wrap;max-height:16em;overflow:auto;background:#f6f6f6;padding:4px"


def _e(v: Any) -> str:
    return escape("" if v is None else str(v), quote=True)


def word_diff(a: str | None, b: str | None, inline: bool = False) -> tuple[str, str]:
    """Both texts as escaped HTML, words only in `a` struck out, only in `b` marked
    (`inline`: with a style attribute each, for the static report; the live pages'
    CSP allows no inline style)."""
    dl = ' style="background:#fde0dc"' if inline else ""
    il = ' style="background:#dcf5dc"' if inline else ""
    wa, wb = (a or "").split()[:DIFF_WORDS], (b or "").split()[:DIFF_WORDS]
    left: list[str] = []
    right: list[str] = []
    for op, i1, i2, j1, j2 in difflib.SequenceMatcher(None, wa, wb, autojunk=False).get_opcodes():
        x, y = _e(" ".join(wa[i1:i2])), _e(" ".join(wb[j1:j2]))
        if op == "equal":
            left.append(x)
            right.append(y)
            continue
        if x:
            left.append(f"<del{dl}>{x}</del>")
        if y:
            right.append(f"<ins{il}>{y}</ins>")
    return " ".join(left), " ".join(right)


def probe_steps(rows: list[dict[str, Any]]) -> dict[str, list[int]]:
    """Each probe task's kept steps, ascending (rows: a run's OUT/samples rows, at
    least their step, task_id and kept)."""
    out: dict[str, set[int]] = {}
    for r in rows:
        if "probe" in (r.get("kept") or []) and r.get("task_id"):
            out.setdefault(r["task_id"], set()).add(r["step"])
    return {t: sorted(s) for t, s in out.items()}


def probe_pick(
    steps: dict[str, list[int]], task: str | None = None, a: int | None = None, b: int | None = None
) -> tuple[str, int, int] | None:
    """(task, step a, step b) to compare, or None when no probe task qualifies. An
    asked task or step that was not kept falls back to the default."""
    if task not in steps:
        two = [t for t, s in steps.items() if len(s) >= 2]
        if not two:
            return None
        task = min(two, key=lambda t: (steps[t][0], t))
    kept = steps[task]
    sa = a if a in kept else kept[0]
    sb = b if b in kept else kept[-1]
    return task, sa, sb


def probe_diff_html(task: str, ra: dict[str, Any], rb: dict[str, Any], inline: bool = False) -> str:
    """Two kept rows of one probe task (their step, reward, returned) side by side."""
    left, right = word_diff(ra.get("returned"), rb.get("returned"), inline)
    cell = f' style="vertical-align:top;width:50%;{_PRE}"' if inline else ""
    table = ' style="width:100%;table-layout:fixed"' if inline else ""

    def head(r: dict[str, Any]) -> str:
        rw = r.get("reward")
        return f"step {_e(r['step'])} · reward {_e('-' if rw is None else f'{rw:.3f}')}"

    return (
        f"<h4>Probe task {_e(task)}: step {_e(ra['step'])} and step {_e(rb['step'])}</h4>"
        f'<table class="probe"{table}><tr>'
        f"<th>{head(ra)}</th><th>{head(rb)}</th></tr>"
        f'<tr><td class="probe-a"{cell}>{left}</td>'
        f'<td class="probe-b"{cell}>{right}</td></tr></table>'
    )


NO_PROBE = '<p class="sub">No probe task appeared at two steps yet.</p>'


def probe_section(
    rows: list[dict[str, Any]],
    task: str | None = None,
    a: int | None = None,
    b: int | None = None,
    inline: bool = False,
) -> str:
    """The probe diff from a run's kept rows (with returned), defaulting as `probe_pick`."""
    pick = probe_pick(probe_steps(rows), task, a, b)
    if pick is None:
        return NO_PROBE
    task, sa, sb = pick
    mine = [r for r in rows if r.get("task_id") == task and "probe" in (r.get("kept") or [])]
    ra = min((r for r in mine if r["step"] == sa), key=lambda r: r["attempt_id"])
    rb = min((r for r in mine if r["step"] == sb), key=lambda r: r["attempt_id"])
    return probe_diff_html(task, ra, rb, inline)
