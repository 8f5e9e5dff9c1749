"""The pages of `rlstream serve` (and `watch --ui-port`): fleet, run, compare, as HTML.

Pure rendering: each function takes what `fleet.web` read from OUT and returns the
page's `<main>` content (`*_main`), which `document(...)` wraps with the controls, the
stylesheet and the script (`/static/live.css`, `/static/live.js`, shipped in the
package). The live script replaces `<main>` with a fresh `?fragment=1` render when
the server's version changes, so the two must be the same markup.

- fleet: counts by status, when the newest run_health row was written, the runs worst
  first (name, status, cohort, format, step, age, reward, trend, the window medians
  the rules judge, quarantined lines, findings), each row carrying
  `data-status`/`data-cohort`/`data-format`/`data-text` for the filters, and the
  rejected run folders; fits 1,400 px. Ages carry `data-epoch` (unix seconds), from
  which the live script counts them on.
- run: header (folder, id, format, cohort, quarantined lines by reason), the charts of
  `fleet.charts` (a cohort band with at least 3 peers, otherwise the siblings' own
  curves; on the reward chart, bars where scanners flagged the high-reward attempts), the findings as a timeline of the run's transitions (`fleet.timeline`)
  with evidence (the message) and advice, the
  cohort's siblings, and the samples panel of `fleet.sample_view`.
- compare: the first step each run parts from the reference, figure by figure (the
  figures of `rlstream compare`).

Safety: every run-controlled string goes through `html.escape`; no run data is put
inside a script or a style; links carry ids URL-encoded.
"""

from __future__ import annotations

from html import escape
from typing import Any
from urllib.parse import quote

from rlstream.fleet.charts import UNUSABLE_NOTE, run_charts
from rlstream.fleet.report import run_name
from rlstream.fleet.report_samples import FLAG_SHARE
from rlstream.fleet.run_lines import judged_line, not_evaluable_line, replaced_note, reward_text
from rlstream.fleet.status import (
    STATUS_LABEL,
    STATUS_ORDER,
    counts,
    fmt_age,
    fmt_num,
    headline_reward,
    trend_arrow,
)
from rlstream.fleet.svg import line_chart
from rlstream.fleet.timeline import episodes, timeline_html
from rlstream.metrics.downsample import RunPoints
from rlstream.pipeline.outcome import plural


def _e(v: Any) -> str:
    return escape("" if v is None else str(v), quote=True)


def run_href(run_id: str) -> str:
    return "/run?id=" + quote(run_id, safe="")


def badge(status: str | None, text: str | None = None) -> str:
    """A status badge; `text`: the words shown (the row's `verdict`), else the status."""
    s = status if status in STATUS_ORDER else "unknown"
    return f'<span class="badge s-{s}">{_e(text or status or "?")}</span>'


def _num(v: Any, text: str) -> str:
    return f'<td class="n" data-v="{"" if v is None else _e(v)}">{_e(text)}</td>'


def _epoch(t: Any) -> str:
    return "" if t is None else f' data-epoch="{float(t):.3f}"'


def _age_cell(seconds: Any, epoch: Any) -> str:
    """An age: its text counts on in the browser from `data-epoch` (the live script),
    since a page is rendered once per version and an idle fleet has no new version."""
    v = "" if seconds is None else _e(seconds)
    return f'<td class="n age" data-v="{v}"{_epoch(epoch)}>{_e(fmt_age(seconds))}</td>'


def freshness(rows: list[dict[str, Any]]) -> str:
    """When a watch last wrote a run_health row (a row is written when it changes)."""
    latest = max((r for r in rows if r.get("as_of") is not None), key=lambda r: r["as_of"],
                 default=None)  # fmt: skip
    if latest is None:
        return ""
    return (
        f'<p class="sub" id="freshness">newest run_health row written '
        f'<span class="age"{_epoch(latest["as_of"])}>'
        f"{_e(fmt_age(latest['seconds_since_commit']))}</span> ago (a watch writes a run's "
        "row when it changes; ages count on in this page)</p>"
    )


def count_badges(rows: list[dict[str, Any]], rejected: int) -> str:
    c = counts(rows)
    out = [
        f'<span class="s-{s}" data-count="{s}">{n} {_e(STATUS_LABEL.get(s, s))}</span>'
        for s, n in c.items()
        if n or s in STATUS_ORDER
    ]
    if rejected:
        out.append(f'<span class="s-rejected">{rejected} rejected</span>')
    return f'<div class="counts">{"".join(out)}</div>'


FLEET_HEADS = (
    ("run", "s"),
    ("status", "n"),
    ("cohort", "s"),
    ("format", "s"),
    ("step", "n"),
    ("updated", "n"),
    ("reward", "n"),
    ("trend/100", "n"),
    ("KL*", "n"),
    ("ESS*", "n"),
    ("entropy*", "n"),
    ("trunc*", "n"),
    ("quar.", "n"),
    ("findings", "s"),
)


def fleet_row(r: dict[str, Any]) -> str:
    codes = [f["code"] for f in r["firing"]]
    name = run_name(r)
    text = " ".join([name, r["run_id"], *codes]).lower()
    kl, ess = r.get("mismatch_kl_recent"), r.get("mismatch_ess_recent")
    ent, trunc = r.get("entropy_recent"), r.get("truncated_recent")
    return (
        f'<tr data-status="{_e(r.get("status"))}" data-cohort="{_e(r.get("cohort") or "")}" '
        f'data-format="{_e(r.get("format"))}" data-text="{_e(text)}" '
        f'data-run="{_e(r["run_id"])}">'
        f'<td data-v="{_e(name)}"><input type="checkbox" class="pick" value="{_e(r["run_id"])}" '
        f'title="compare"> <a href="{_e(run_href(r["run_id"]))}">{_e(name)}</a>'
        f'<div class="id">{_e(r["run_id"])}</div></td>'
        f'<td data-v="{STATUS_ORDER.get(r.get("status") or "", 9)}">{badge(r.get("status"), r.get("verdict"))}</td>'
        f'<td data-v="{_e(r.get("cohort") or "")}">{_e(r.get("cohort") or "-")}</td>'
        f'<td data-v="{_e(r.get("format"))}">{_e(r.get("format"))}</td>'
        + _num(r.get("last_step"), fmt_num(r.get("last_step"), "d"))
        + _age_cell(r.get("seconds_since_update"), r.get("last_activity"))
        + _num(headline_reward(r)[0], reward_text(r))
        + _num(r.get("reward_trend"), trend_arrow(r.get("reward_trend")) or "-")
        + _num(kl, fmt_num(kl, ".2e"))
        + _num(ess, fmt_num(ess, ".3f"))
        + _num(ent, fmt_num(ent, ".3f"))
        + _num(trunc, fmt_num(trunc, ".2f"))
        + _num(r.get("quarantined"), fmt_num(r.get("quarantined"), "d"))
        + f'<td class="codes" data-v="{len(codes)}">{_e(", ".join(codes) or "-")}</td></tr>'
    )


def fleet_main(rows: list[dict[str, Any]], rejected: list[dict[str, Any]]) -> str:
    """The fleet page's content: counts, the runs table, the rejected runs."""
    heads = "".join(f'<th data-kind="{k}">{_e(h)}</th>' for h, k in FLEET_HEADS)
    body = "".join(fleet_row(r) for r in rows)
    table = (
        f'<table class="sortable" id="fleet"><thead><tr>{heads}</tr></thead>'
        f"<tbody>{body}</tbody></table>"
        if rows
        else '<p class="sub">No runs in run_health yet (a watch writes them at its first '
        "commit).</p>"
    )
    legend = (
        '<p class="sub">* median of each run\'s last final steps, the value the health '
        "rules judge (reward: last step); quar.: lines quarantined (file, offset, reason "
        "in OUT/quarantine). Click a column to sort; select runs to compare.</p>"
    )
    rej = ""
    if rejected:
        items = "".join(
            f'<tr class="rejected-run"><td>{_e(r["run_uri"])}</td><td>{_e(r["reason"])}</td>'
            f"<td>{_e(r.get('detail'))}</td></tr>"
            for r in rejected
        )
        rej = (
            f'<h2 id="rejected">{plural(len(rejected), "rejected run")}</h2>'
            '<p class="sub">Not analysed: their run.json or resume state could not be read, '
            "or another folder holds their run id.</p>"
            f"<table class='rejected'><tr><th>run folder</th><th>reason</th><th>detail</th></tr>{items}</table>"
        )
    return count_badges(rows, len(rejected)) + freshness(rows) + table + legend + rej


def _options(name: str, values: list[str]) -> str:
    opts = "".join(f'<option value="{_e(v)}">{_e(v)}</option>' for v in values)
    return f'<select id="f-{name}"><option value="">any {name}</option>{opts}</select>'


def fleet_controls(rows: list[dict[str, Any]]) -> str:
    """The filters (outside `<main>`, so a refresh keeps them)."""
    cohorts = sorted({r.get("cohort") or "" for r in rows} - {""})
    formats = sorted({r.get("format") or "" for r in rows} - {""})
    return (
        '<div class="controls">'
        + _options("status", list(STATUS_ORDER))
        + _options("cohort", cohorts)
        + _options("format", formats)
        + '<input id="f-text" type="search" placeholder="search names and finding codes">'
        + '<a id="compare-link" href="/compare">compare selected</a></div>'
    )


def _quarantine(by_reason: dict[str, int]) -> str:
    if not by_reason:
        return "no quarantined line"
    parts = ", ".join(f"{_e(k)}: {n}" for k, n in sorted(by_reason.items()))
    return f"{plural(sum(by_reason.values()), 'quarantined line')} ({parts})"


def _siblings(siblings: list[dict[str, Any]]) -> str:
    if not siblings:
        return '<p class="sub">No other run in this cohort.</p>'
    rows = "".join(
        f'<tr><td><a href="{_e(run_href(s["run_id"]))}">{_e(run_name(s))}</a></td>'
        f"<td>{badge(s.get('status'), s.get('verdict'))}</td><td class='n'>{_e(fmt_num(s.get('last_step'), 'd'))}</td>"
        f"<td class='n'>{_e(reward_text(s))}</td></tr>"
        for s in siblings
    )
    return f"<table><tr><th>run</th><th>status</th><th>step</th><th>reward</th></tr>{rows}</table>"


def run_main(
    row: dict[str, Any],
    latest: dict[str, Any],
    run_points: RunPoints,
    bands: dict[str, dict[str, list[Any]]] | None,
    siblings: list[dict[str, Any]],
    sibling_points: dict[str, RunPoints],
    quarantine: dict[str, int],
    heldout: dict[str, tuple[list[int], list[float | None]]] | None,
    samples_html: str,
    transitions: list[dict[str, Any]],
    flags: list[int] | None = None,
) -> str:
    """The run page's content (`samples_html`: the samples panel, `fleet.sample_view`;
    `transitions`: the run's `alerts` rows, for the findings timeline; `flags`: the
    steps where scanners flagged the high-reward attempts, marked on the reward chart
    as in the report)."""
    findings = list(latest.get("findings") or [])
    names = {s["run_id"]: run_name(s) for s in siblings}
    others = {names[k]: d for k, d in sibling_points.items() if k in names}
    charts = run_charts(run_points, findings, bands, others, heldout, flags, FLAG_SHARE)
    ne = row.get("not_evaluable") or []
    return (
        f'<h2 class="run-title">{_e(run_name(row))} {badge(row.get("status"), row.get("verdict"))}</h2>'
        f'<div class="sub">id {_e(row["run_id"])} · {_e(row.get("run_uri"))} · '
        f"{_e(row.get('format'))} format · cohort {_e(row.get('cohort') or '-')} · "
        f'last step <span id="last-step">{_e(row.get("last_step"))}</span> · '
        f'<span class="quarantine">{_quarantine(quarantine)}</span>{replaced_note(row)}</div>'
        + judged_line(row)
        + (not_evaluable_line(row) if ne else "")
        + f'<div class="charts">{"".join(f"<div class=fig>{line_chart(c)}</div>" for c in charts)}</div>'
        + f'<p class="sub">{_e(UNUSABLE_NOTE)}</p>'
        + "<h3>Findings</h3>"
        + timeline_html(episodes(transitions, findings), row.get("last_step"))
        + f"<h3>Cohort {_e(row.get('cohort') or '-')}: siblings</h3>"
        + _siblings(siblings)
        + "<h3>Samples</h3>"
        + samples_html
    )


def compare_main(
    ids: list[str], names: dict[str, str], divergences: list[dict[str, Any]], verdict: str = ""
) -> str:
    """The compare page's content: the verdict of `rlstream compare`, then one row per
    (run, figure) with its source and, for a figure that never parts, why not."""
    if len(ids) < 2:
        return '<p class="sub">Select at least two runs on the fleet page to compare.</p>'
    ref = ids[0]
    rows = "".join(
        f"<tr><td>{_e(names.get(d['run_id'], d['run_id']))}</td><td>{_e(d['figure'])}</td>"
        f"<td class='n'>{_e('never' if d['step'] is None else d['step'])}</td>"
        f"<td class='n'>{_e(fmt_num(d.get('value'), '.4g'))}</td>"
        f"<td class='n'>{_e(fmt_num(d.get('reference_value'), '.4g'))}</td>"
        f"<td class='n'>{_e(d.get('common_steps'))}</td><td>{_e(d.get('source') or '-')}</td>"
        f"<td class='why'>{_e(d.get('why') or '-')}</td></tr>"
        for d in divergences
    )
    links = " · ".join(f'<a href="{_e(run_href(i))}">{_e(names.get(i, i))}</a>' for i in ids)
    return (
        f"<h2>Compare with {_e(names.get(ref, ref))}</h2><div class='sub'>{links}</div>"
        + (f"<p class='verdict'>{_e(verdict)}</p>" if verdict else "")
        + "<table class='sortable' id='compare'><thead><tr><th>run</th><th>figure</th>"
        "<th>first divergent step</th><th>value</th><th>reference value</th>"
        "<th>common steps</th><th>source</th><th>why not</th></tr></thead>"
        f"<tbody>{rows}</tbody></table>"
        "<p class='sub'>The first of a sustained stretch of steps where the window means "
        "differ by more than k pooled deviations (docs/fleet.md, compare); value and "
        "reference value are the two runs' window means there.</p>"
    )


def document(title: str, main: str, etag: str, refresh: float, controls: str = "") -> str:
    """A whole page: the controls, `<main>`, the stylesheet and the live script."""
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>{_e(title)}</title>"
        '<link rel="icon" href="data:,"><link rel="stylesheet" href="/static/live.css"></head>'
        f'<body data-etag="{_e(etag)}" data-refresh="{refresh:g}">'
        f'<header><a href="/">rlstream</a> <span class="sub">· {_e(title)}</span>'
        ' <span id="live" class="sub">live</span></header>'
        f"{controls}<main>{main}</main>"
        '<script src="/static/live.js"></script></body></html>\n'
    )
