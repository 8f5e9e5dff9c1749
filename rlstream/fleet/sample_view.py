"""The run page's samples panel: the kept samples and their controls (step, kept
filter, text search, probe diff).

Each sample shows its step, why it was kept, reward, flags and task, then its whole
stored `returned` excerpt (up to 8 KiB, in a scroll box: what a scanner flagged is
often past the first lines), what it was `sent` (folded), its attempt and transcript
file; the search text is marked in both.

Everything is server-side, from the run page's query parameters (no script; the page
stays under `default-src 'none'`):

- `step=N`: that step's kept samples (default: the newest steps, up to `SHOWN`
  rows); the picker lists the run's steps in OUT/samples, newest first;
- `kept=top|bottom|flagged`: only the samples kept as the step's highest or lowest
  reward, or flagged by a transcript scanner;
- `q=TEXT`: only the samples whose sent or returned excerpt contains TEXT
  (case-insensitive), searched in the rows of at most `SEARCH_STEPS` steps (from the
  picked step, or the newest, down);
- `probe=TASK&a=STEP&b=STEP`: a probe task's output at two steps with a word diff
  (`fleet.sample_diff`; default: the run's first probe task, its earliest and newest
  kept steps).

Reads are bounded: one read of the run's small columns (step, task_id, kept, flags),
then the text of at most `SEARCH_STEPS` steps, then the two probe rows. Every string
from run data or the query is escaped.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from html import escape
from typing import Any
from urllib.parse import urlencode

from rlstream.fleet.sample_diff import NO_PROBE, probe_diff_html, probe_pick, probe_steps

SEARCH_STEPS = 8
"""Steps whose sent/returned text one page reads at most."""
QUERY_CHARS = 200
"""Longest search text kept from the query."""
KEPT_FILTERS = ("top", "bottom", "flagged")

_SMALL = ("step", "task_id", "kept", "flags")
SHOWN = 20
"""Rows the panel shows at most."""
READ_COLUMNS = (
    *("run_id", "attempt_id", "step", "kept", "reward", "flags", "task_id"),
    *("sent", "sent_bytes", "returned", "returned_bytes", "transcript"),
)
"""What the panel reads of a kept sample (docs/schema.md, `samples`)."""


def _e(v: Any) -> str:
    return escape("" if v is None else str(v), quote=True)


def _int(q: dict[str, list[str]], key: str) -> int | None:
    v = (q.get(key) or [""])[0].strip()
    return int(v) if v.lstrip("-").isdigit() and len(v) < 19 else None


@dataclass(frozen=True)
class SampleQuery:
    """What the run page's samples panel was asked for (see the module docstring)."""

    step: int | None = None
    kept: str = ""
    text: str = ""
    probe: str | None = None
    a: int | None = None
    b: int | None = None

    @classmethod
    def parse(cls, q: dict[str, list[str]]) -> SampleQuery:
        kept = (q.get("kept") or [""])[0]
        return cls(
            step=_int(q, "step"),
            kept=kept if kept in KEPT_FILTERS else "",
            text=(q.get("q") or [""])[0].strip()[:QUERY_CHARS],
            probe=(q.get("probe") or [None])[0] or None,
            a=_int(q, "a"),
            b=_int(q, "b"),
        )


def keeps(row: dict[str, Any], kept: str) -> bool:
    """Whether a row passes the kept filter ("" passes all)."""
    if not kept:
        return True
    if kept == "flagged":
        return bool(row.get("flags")) or "flagged" in (row.get("kept") or [])
    return kept in (row.get("kept") or [])


def _needle(text: str) -> re.Pattern[str]:
    return re.compile(re.escape(text), re.IGNORECASE)


def matches(row: dict[str, Any], text: str) -> bool:
    """Whether the row's sent or returned excerpt contains `text` (any case)."""
    if not text:
        return True
    needle = _needle(text)
    return any(needle.search(row.get(c) or "") for c in ("sent", "returned"))


def marked(text: str | None, query: str) -> str:
    """`text` escaped, each occurrence of `query` (any case, as `matches`) in `<mark>`."""
    text = text or ""
    if not query:
        return _e(text)
    out, at = [], 0
    for m in _needle(query).finditer(text):
        out.append(f"{_e(text[at : m.start()])}<mark>{_e(m.group())}</mark>")
        at = m.end()
    return "".join(out) + _e(text[at:])


@dataclass(frozen=True)
class SampleView:
    """What the panel shows: the run's steps (newest first), the rows, the steps read,
    the probe tasks' kept steps and the picked probe pair's rows."""

    steps: list[int]
    rows: list[dict[str, Any]]
    read_steps: list[int]
    probes: dict[str, list[int]]
    pair: tuple[str, dict[str, Any], dict[str, Any]] | None


def read_view(ds: Any, rid: str, sq: SampleQuery) -> SampleView:
    """The panel's rows from the OUT/samples dataset `ds`, reads bounded as above."""
    import pyarrow.compute as pc

    names = ds.schema.names
    mine = pc.field("run_id") == rid
    small = ds.to_table(columns=[c for c in _SMALL if c in names], filter=mine).to_pylist()
    steps = sorted({r["step"] for r in small}, reverse=True)
    counts: dict[int, int] = {}
    for r in small:
        if keeps(r, sq.kept):
            counts[r["step"]] = counts.get(r["step"], 0) + 1
    if sq.step is not None:
        wanted = [sq.step] if sq.step in counts else []
    else:
        wanted, shown = [], 0
        for st in sorted(counts, reverse=True):
            wanted.append(st)
            shown += counts[st]
            if len(wanted) >= SEARCH_STEPS or (not sq.text and shown >= SHOWN):
                break
    rows: list[dict[str, Any]] = []
    if wanted:
        cols = [c for c in READ_COLUMNS if c in names]
        got = ds.to_table(columns=cols, filter=mine & pc.field("step").isin(wanted)).to_pylist()
        rows = [r for r in got if keeps(r, sq.kept) and matches(r, sq.text)]
    probes = probe_steps(small)
    pick = probe_pick(probes, sq.probe, sq.a, sq.b)
    pair = None
    if pick is not None and "returned" in names:
        task, sa, sb = pick
        two = ds.to_table(
            columns=[
                c
                for c in ("step", "task_id", "kept", "attempt_id", "reward", "returned")
                if c in names
            ],
            filter=mine & (pc.field("task_id") == task) & pc.field("step").isin([sa, sb]),
        ).to_pylist()
        two = sorted(
            (r for r in two if "probe" in (r["kept"] or [])), key=lambda r: r["attempt_id"]
        )
        ra = next((r for r in two if r["step"] == sa), None)
        rb = next((r for r in two if r["step"] == sb), None)
        if ra is not None and rb is not None:
            pair = (task, ra, rb)
    return SampleView(steps, rows, wanted, probes, pair)


def _href(rid: str, **params: Any) -> str:
    q = {"id": rid, **{k: v for k, v in params.items() if v not in (None, "")}}
    return "?" + urlencode(q)


def _select(name: str, options: list[tuple[str, str]], current: str) -> str:
    opts = "".join(
        f'<option value="{_e(v)}"{" selected" if v == current else ""}>{_e(label)}</option>'
        for v, label in options
    )
    return f'<select name="{name}" id="s-{name}">{opts}</select>'


def controls_html(rid: str, sq: SampleQuery, view: SampleView) -> str:
    """The form (step, kept, search) and the kept filter as links."""
    step = "" if sq.step is None else str(sq.step)
    steps = [("", "newest steps")] + [(str(s), f"step {s}") for s in view.steps]
    kinds = [("", "all kept"), *((k, k) for k in KEPT_FILTERS)]
    links = " ".join(
        f'<a class="kept-filter{" on" if k == sq.kept else ""}" '
        f'href="{_e(_href(rid, step=step, kept=k, q=sq.text))}">{_e(label)}</a>'
        for k, label in kinds
    )
    return (
        f'<form class="controls sample-controls" method="get" action="/run">'
        f'<input type="hidden" name="id" value="{_e(rid)}">'
        f"{_select('step', steps, step)}{_select('kept', kinds, sq.kept)}"
        f'<input type="search" name="q" id="s-q" value="{_e(sq.text)}" '
        f'placeholder="text in sent / returned" maxlength="{QUERY_CHARS}">'
        f'<button type="submit" id="s-go">show</button></form>'
        f'<div class="sub">only: {links}</div>'
    )


def _summary(sq: SampleQuery, view: SampleView) -> str:
    what = f"step {sq.step}" if sq.step is not None else "the newest steps"
    read = ", ".join(map(str, view.read_steps)) or "none"
    n = len(view.rows)
    more = f" (the first {SHOWN} shown)" if n > SHOWN else ""
    bits = [f"{n} kept sample(s) of {what}{more}"]
    if sq.kept:
        bits.append(f"kept {sq.kept}")
    if sq.text:
        bits.append(f"containing “{sq.text}” (steps read: {read}; at most {SEARCH_STEPS})")
    return f'<p class="sub" id="samples-shown">{_e(" · ".join(bits))}</p>'


def _probe(rid: str, sq: SampleQuery, view: SampleView) -> str:
    if view.pair is None:
        return NO_PROBE
    task, ra, rb = view.pair
    tasks = [(t, t) for t in sorted(view.probes) if len(view.probes[t]) >= 2]
    kept = [(str(s), f"step {s}") for s in view.probes[task]]
    form = (
        f'<form class="controls probe-controls" method="get" action="/run">'
        f'<input type="hidden" name="id" value="{_e(rid)}">'
        f"{_select('probe', tasks, task)}{_select('a', kept, str(ra['step']))}"
        f"{_select('b', kept, str(rb['step']))}"
        f'<button type="submit" id="p-go">compare</button></form>'
    )
    return form + probe_diff_html(task, ra, rb)


NO_TABLE = '<p class="sub samples-none">no samples table in OUT</p>'
NO_ROWS = '<p class="sub">no kept transcript for this run yet</p>'


def _bytes(n: Any) -> str:
    return "" if n is None else f" ({_e(n)} bytes)"


def sample_row(r: dict[str, Any], query: str = "") -> str:
    """One kept sample: step, why kept, reward, flags, task, then its whole returned
    excerpt (a scroll box; `query` marked), what it was sent (folded), its attempt and
    transcript file. `data-keep` names the parts whose open or scrolled state the live
    script keeps across a refresh."""
    key = _e(f"{r.get('step')}/{r.get('attempt_id')}")
    small = (
        r.get("step"),
        ", ".join(r.get("kept") or []),
        r.get("reward"),
        ", ".join(r.get("flags") or []),
        r.get("task_id"),
    )
    cells = "".join(f"<td class='sample'>{_e(v)}</td>" for v in small)
    ret = r.get("returned")
    text = (
        f'<div class="excerpt" data-keep="r/{key}">{marked(ret, query)}</div>'
        if ret
        else '<span class="sub">no returned text</span>'
    )
    sent = (
        f'<details class="sent" data-keep="s/{key}"><summary>sent{_bytes(r.get("sent_bytes"))}'
        f'</summary><div class="excerpt">{marked(r.get("sent"), query)}</div></details>'
        if r.get("sent")
        else ""
    )
    meta = (
        f'<div class="id">attempt {_e(r.get("attempt_id"))} · returned'
        f"{_bytes(r.get('returned_bytes'))} · transcript {_e(r.get('transcript') or '-')}</div>"
    )
    return f"<tr>{cells}<td class='sample text'>{text}{sent}{meta}</td></tr>"


def samples_table(rows: list[dict[str, Any]], query: str = "") -> str:
    """The kept samples, flagged ones first, then by step and reward, at most `SHOWN`."""
    order = sorted(
        rows,
        key=lambda s: (not s.get("flags"), -(s.get("step") or 0), -(s.get("reward") or 0)),
    )
    head = "".join(f"<th>{c}</th>" for c in ("step", "kept", "reward", "flags", "task", "returned"))
    body = "".join(sample_row(r, query) for r in order[:SHOWN])
    return f'<table class="samples"><tr>{head}</tr>{body}</table>'


def samples_html(rid: str, ds: Any | None, sq: SampleQuery) -> str:
    """The run's samples panel with its controls (`ds`: OUT/samples, None when OUT
    has no such table)."""
    if ds is None:
        return NO_TABLE
    if "run_id" not in ds.schema.names:
        return NO_ROWS
    view = read_view(ds, rid, sq)
    if not view.steps:
        return NO_ROWS
    table = (
        samples_table(view.rows, sq.text)
        if view.rows
        else '<p class="sub">no kept sample matches</p>'
    )
    return controls_html(rid, sq, view) + _summary(sq, view) + table + _probe(rid, sq, view)
