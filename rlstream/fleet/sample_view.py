"""The run page's samples panel controls: step, kept filter, text search, probe diff.

Everything is server-side, from the run page's query parameters (no script; the page
stays under `default-src 'none'`):

- `step=N`: that step's kept samples (default: the newest steps, up to
  `pages.SAMPLES_SHOWN` rows); the picker lists the run's steps in OUT/samples,
  newest first;
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

from dataclasses import dataclass
from html import escape
from typing import Any
from urllib.parse import urlencode

from rlstream.fleet import pages
from rlstream.fleet.sample_diff import NO_PROBE, probe_diff_html, probe_pick, probe_steps

SEARCH_STEPS = 8
"""Steps whose sent/returned text one page reads at most."""
QUERY_CHARS = 200
"""Longest search text kept from the query."""
KEPT_FILTERS = ("top", "bottom", "flagged")

_SMALL = ("step", "task_id", "kept", "flags")


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


def matches(row: dict[str, Any], text: str) -> bool:
    """Whether the row's sent or returned excerpt contains `text` (any case)."""
    t = text.casefold()
    return not t or any(t in (row.get(c) or "").casefold() for c in ("sent", "returned"))


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
            if len(wanted) >= SEARCH_STEPS or (not sq.text and shown >= pages.SAMPLES_SHOWN):
                break
    rows: list[dict[str, Any]] = []
    if wanted:
        cols = [c for c in ("run_id", "attempt_id", "sent", *pages.SAMPLE_COLUMNS) if c in names]
        got = ds.to_table(columns=cols, filter=mine & pc.field("step").isin(wanted)).to_pylist()
        rows = [r for r in got if keeps(r, sq.kept) and matches(r, sq.text)]
        for r in rows:
            r.pop("sent", None)
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
    more = f" (the first {pages.SAMPLES_SHOWN} shown)" if n > pages.SAMPLES_SHOWN else ""
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


def samples_html(rid: str, ds: Any | None, sq: SampleQuery) -> str:
    """The run page's samples panel with its controls (`ds`: OUT/samples, None when
    OUT has no such table)."""
    if ds is None or "run_id" not in ds.schema.names:
        return pages.samples_panel(None if ds is None else [])
    view = read_view(ds, rid, sq)
    if not view.steps:
        return pages.samples_panel([])
    table = (
        pages.samples_panel(view.rows) if view.rows else '<p class="sub">no kept sample matches</p>'
    )
    return controls_html(rid, sq, view) + _summary(sq, view) + table + _probe(rid, sq, view)
