"""`rlstream report OUT -o report.html`: one self-contained HTML file, no network.

The page has a fleet overview (a badge per status, adding up to the runs, plus the
rejected runs; the status table, sortable by a small inline script, whose KL, ESS,
entropy and truncation are the window medians the health rules judge), the run
folders rejected for an unreadable run.json with their reason, and one section per
run, worst first: the charts of `fleet.charts` (reward, discards by reason, mismatch
KL and ESS, entropy, completion length, truncation and lag), each finding marked on
its chart at `since_step` with its message, its cohort (`OUT/cohorts`) under the figures that have one: the
cohort's median ± 2 robust deviations with at least 3 other runs, else the siblings'
own curves; the held-out evaluations on the reward chart; and, for degenerate_outputs and
entropy_collapse, example completions from the run's newest kept samples
(`OUT/samples`), and its Samples (`fleet.report_samples`: kept samples, flagged first,
and a probe task at two steps with a word diff).

Safety: every string from run data (ids, URIs, discard reasons, metadata labels,
messages, completion text) goes through `html.escape`; no run data is ever placed
inside a script. The page's Content-Security-Policy allows only the sorting script
(by its hash), so even markup that slipped through could not run.
"""

from __future__ import annotations

import base64
import datetime as dt
import hashlib
import logging
from concurrent.futures import ThreadPoolExecutor
from html import escape
from typing import Any

from rlstream.fleet.charts import UNUSABLE_NOTE, run_charts
from rlstream.fleet.outdir import read_rejected, rejected_folder
from rlstream.fleet.read import (
    example_completions,
    read_bands,
    read_heldout,
    read_latest,
    read_run_points,
)
from rlstream.fleet.report_samples import run_samples, samples_section
from rlstream.fleet.run_lines import judged_line, not_evaluable_line, replaced_note, reward_text
from rlstream.fleet.status import (
    STATUS_ORDER,
    count_parts,
    fmt_age,
    fmt_num,
    headline_reward,
    status_rows,
    trend_arrow,
)
from rlstream.fleet.svg import Chart, line_chart
from rlstream.metrics.downsample import RunPoints
from rlstream.pipeline.outcome import plural

__all__ = ["render_report", "run_charts", "write_report"]

log = logging.getLogger("rlstream")

EXAMPLE_CODES = ("degenerate_outputs", "entropy_collapse")
SORT_SCRIPT = """
(function () {
  document.querySelectorAll("table.sortable").forEach(function (table) {
    table.querySelectorAll("th").forEach(function (th, i) {
      th.addEventListener("click", function () {
        var body = table.tBodies[0];
        var rows = Array.prototype.slice.call(body.rows);
        var asc = th.getAttribute("data-dir") !== "asc";
        th.setAttribute("data-dir", asc ? "asc" : "desc");
        rows.sort(function (a, b) {
          var x = a.cells[i].getAttribute("data-v"), y = b.cells[i].getAttribute("data-v");
          if (x === "" || y === "") { return (x === "") - (y === ""); }
          var nx = Number(x), ny = Number(y);
          var c = (!isNaN(nx) && !isNaN(ny)) ? nx - ny : x.localeCompare(y);
          return asc ? c : -c;
        });
        rows.forEach(function (r) { body.appendChild(r); });
      });
    });
  });
  document.body.setAttribute("data-sortable", "ready");
})();
"""

STYLE = """
body{font:14px/1.4 system-ui,sans-serif;margin:24px;color:#222;background:#fff}
h1{font-size:22px;margin:0 0 4px} h2{font-size:18px;margin:28px 0 6px;border-top:1px solid #ccc;padding-top:14px}
.sub{color:#666} .counts span{display:inline-block;padding:4px 10px;margin:8px 6px 8px 0;border-radius:4px;color:#fff}
.s-critical{background:#c0392b} .s-stalled{background:#7d3c98} .s-warning{background:#d68910}
.s-healthy{background:#229954} .s-finished{background:#566573} .s-insufficient{background:#7f8c8d} .s-unknown{background:#999}
.s-insufficient{background:#85929e}
.s-rejected{background:#6e2c00} .counts .s-rejected a{color:#fff}
table{border-collapse:collapse;margin:6px 0} th,td{padding:3px 6px;border-bottom:1px solid #ddd;text-align:left;white-space:nowrap;vertical-align:top}
#fleet{max-width:1360px} #fleet td.codes,#fleet td.name{white-space:normal;overflow-wrap:anywhere;max-width:240px} .id{font-size:11px}
th{cursor:pointer;background:#f4f6f7;user-select:none} td.n{text-align:right;font-variant-numeric:tabular-nums}
.badge{padding:1px 6px;border-radius:3px;color:#fff;font-size:12px}
.charts{display:flex;flex-wrap:wrap;gap:10px}.fig{border:1px solid #e5e5e5;padding:4px}
.fig ol{margin:2px 0 4px 0;padding-left:22px;max-width:540px;font-size:12px}
svg.chart text{font:11px system-ui,sans-serif;fill:#333} svg.chart .ct{font-weight:600;font-size:12px}
svg.chart .yt{text-anchor:end} svg.chart .xt{text-anchor:middle} svg.chart .xl{text-anchor:end;fill:#888}
svg.chart .mk{text-anchor:middle;fill:#fff;font-weight:700;font-size:10px} svg.chart .empty{fill:#999}
svg.chart .plot{fill:#fcfcfc;stroke:#ccc} svg.chart .grid{stroke:#eee}
pre.completion{white-space:pre-wrap;word-break:break-word;background:#f8f8f8;border:1px solid #e3e3e3;padding:6px;max-width:1100px;margin:4px 0}
.msg{font-size:12px}
"""


def _sha256_b64(text: str) -> str:
    return base64.b64encode(hashlib.sha256(text.encode()).digest()).decode()


def _e(v: Any) -> str:
    return escape("" if v is None else str(v), quote=True)


def _badge(status: str | None, text: str | None = None) -> str:
    """A status badge; `text`: the words shown (the row's `verdict`), else the status."""
    s = status if status in STATUS_ORDER else "unknown"
    return f'<span class="badge s-{s}">{_e(text or status or "?")}</span>'


def _numcell(v: float | None, text: str) -> str:
    return f'<td class="n" data-v="{"" if v is None else _e(v)}">{_e(text)}</td>'


def _window(rows: list[dict[str, Any]]) -> str:
    ns = sorted({r["recent_steps"] for r in rows if r.get("recent_steps")})
    return f"median of last {ns[0]} steps" if len(ns) == 1 else "median of last steps"


def run_name(row: dict[str, Any]) -> str:
    """A run's folder name (the last part of its URI), else its id."""
    uri = str(row.get("run_uri") or "").rstrip("/")
    return uri.rsplit("/", 1)[-1] or str(row.get("run_id"))


def overview_table(rows: list[dict[str, Any]]) -> str:
    """The fleet table. KL, ESS, entropy and truncation are the window medians the
    health rules judge (as in `rlstream status`), so they agree with the findings;
    runs are named by folder (id below); quar.: the run's quarantined lines."""
    heads = ("run", "cohort", "status", "step", "updated", "reward", "trend/100")
    heads += ("KL*", "ESS*", "entropy*", "trunc*", "quar.", "findings")
    head = "<tr>" + "".join(f"<th>{h}</th>" for h in heads) + "</tr>"
    body = []
    for i, r in enumerate(rows):
        codes = ", ".join(f["code"] for f in r["firing"]) or "-"
        trend = r.get("reward_trend")
        kl, ess = r.get("mismatch_kl_recent"), r.get("mismatch_ess_recent")
        ent, trunc = r.get("entropy_recent"), r.get("truncated_recent")
        name = run_name(r)
        body.append(
            "<tr>"
            f'<td class="name" data-v="{_e(name)}"><a href="#run-{i}">{_e(name)}</a>'
            f'<div class="sub id">{_e(r["run_id"])}</div></td>'
            f'<td data-v="{_e(r.get("cohort") or "")}">{_e(r.get("cohort") or "-")}</td>'
            f'<td data-v="{STATUS_ORDER.get(r.get("status") or "", 9)}">{_badge(r.get("status"), r.get("verdict"))}</td>'
            + _numcell(r.get("last_step"), fmt_num(r.get("last_step"), "d"))
            + _numcell(r.get("seconds_since_update"), fmt_age(r.get("seconds_since_update")))
            + _numcell(headline_reward(r)[0], reward_text(r))
            + _numcell(trend, trend_arrow(trend) or "-")
            + _numcell(kl, fmt_num(kl, ".2e"))
            + _numcell(ess, fmt_num(ess, ".3f"))
            + _numcell(ent, fmt_num(ent, ".3f"))
            + _numcell(trunc, fmt_num(trunc, ".2f"))
            + _numcell(r.get("quarantined"), fmt_num(r.get("quarantined"), "d"))
            + f'<td class="codes" data-v="{len(r["firing"])}">{_e(codes)}</td></tr>'
        )
    legend = (
        f'<p class="sub">* {_window(rows)}, the value the health rules judge (reward: the '
        "last step); quar.: lines quarantined (OUT/quarantine holds file, offset and "
        "reason).</p>"
    )
    return (
        f'<table class="sortable" id="fleet"><thead>{head}</thead>'
        f"<tbody>{''.join(body)}</tbody></table>{legend}"
    )


def rejected_section(rejected: list[dict[str, Any]], out: str) -> str:
    """The runs not analysed (run.json or resume state unreadable, or their run id
    another folder's): they have no section of their own."""
    if not rejected:
        return ""
    items = "".join(
        f'<tr class="rejected-run"><td>{_e(r["run_uri"])}</td><td>{_e(r["reason"])}</td>'
        f"<td>{'run.json ' if r['reason'] == 'bad_run_json' else ''}{_e(r.get('detail'))}</td></tr>"
        for r in rejected
    )
    return (
        f'<h2 id="rejected">{plural(len(rejected), "rejected run")}</h2>'
        '<p class="sub">These run folders could not be read, or another folder holds their '
        "run id, so they are not analysed: fix what the detail says and analyze again. "
        f"Rows: {_e(rejected_folder(out))}</p>"
        f"<table><tr><th>run folder</th><th>reason</th><th>detail</th></tr>{items}</table>"
    )


def _figure(chart: Chart, findings: list[dict[str, Any]]) -> str:
    items = []
    for m in chart.markers:
        f = findings[m.number - 1]
        items.append(
            f'<li value="{m.number}" class="msg"><b>{_e(m.code)}</b> '
            f"[{_e(f.get('severity'))}, {_e(f.get('state'))}] since step {m.step}: "
            f"{_e(m.message)}</li>"
        )
    notes = f"<ol>{''.join(items)}</ol>" if items else ""
    return f'<div class="fig">{line_chart(chart)}{notes}</div>'


def _examples(run: dict[str, Any], out: str, storage_options: dict[str, Any] | None) -> str:
    wanted = [f for f in run.get("findings") or [] if f.get("code") in EXAMPLE_CODES]
    if not wanted:
        return ""
    since = (
        min(f["since_step"] for f in wanted if f.get("since_step") is not None)
        if any(f.get("since_step") is not None for f in wanted)
        else None
    )
    ex = example_completions(out, run["run_id"], since, storage_options)
    codes = ", ".join(sorted({f["code"] for f in wanted}))
    head = f"<h3>Example completions ({_e(codes)}; newest kept samples from step {_e(since)})</h3>"
    if not ex:
        return (
            head + '<p class="sub">No completion text kept (the run\'s transcripts record no '
            "text, or no step with kept samples is final yet).</p>"
        )
    body = "".join(
        f'<div class="sub">step {_e(e["step"])}, task {_e(e["task_id"])}, attempt '
        f"{_e(e['attempt_id'])}: seen {e['count']}× among the newest kept samples</div>"
        f'<pre class="completion">{_e(e["text"])}</pre>'
        for e in ex
    )
    return head + body


def _metadata(run_points: RunPoints) -> str:
    last = run_points.metadata
    if not last:
        return ""
    cells = "".join(
        f"<tr><td>{_e(k)}</td><td class='n'>{_e(fmt_num(v, '.3g'))}</td></tr>"
        for k, v in sorted(last.items())
    )
    return (
        "<details><summary>rollout metadata at the last step</summary>"
        f"<table><tr><th>key</th><th>value</th></tr>{cells}</table></details>"
    )


def run_section(
    i: int,
    row: dict[str, Any],
    latest: dict[str, Any],
    run_points: RunPoints,
    out: str,
    storage_options: dict[str, Any] | None,
    bands: dict[str, dict[str, list[Any]]] | None = None,
    siblings: dict[str, RunPoints] | None = None,
    heldout: dict[str, tuple[list[int], list[float | None]]] | None = None,
) -> str:
    findings = list(latest.get("findings") or [])
    samples, flags = run_samples(row["run_id"], out, storage_options)
    charts = run_charts(run_points, findings, bands, siblings, heldout, flags)
    unplaced = [f for f in findings if f.get("since_step") is None]
    extra = "".join(
        f"<li class='msg'><b>{_e(f.get('code'))}</b> [{_e(f.get('severity'))}, "
        f"{_e(f.get('state'))}]: {_e(f.get('message'))}</li>"
        for f in unplaced
    )
    return (
        f'<section class="run" id="run-{i}"><h2>{_e(run_name(row))} {_badge(row.get("status"), row.get("verdict"))}</h2>'
        f'<div class="sub">id {_e(row["run_id"])} · {_e(row.get("run_uri"))} · '
        f"{_e(row.get('format') or 'loops')} format · "
        f"{plural(int(row.get('quarantined') or 0), 'quarantined line')} · "
        f"cohort {_e(row.get('cohort') or '-')} · "
        f"last step {_e(row.get('last_step'))} · "
        f"{plural(run_points.rows, 'final step')} · {plural(len(findings), 'finding')}"
        + replaced_note(row)
        + "</div>"
        + judged_line(row)
        + not_evaluable_line(row)
        + (f"<ul>{extra}</ul>" if extra else "")
        + f'<div class="charts">{"".join(_figure(c, findings) for c in charts)}</div>'
        + f'<p class="sub">{_e(UNUSABLE_NOTE)}</p>'
        + _examples(latest, out, storage_options)
        + samples_section(
            samples, flags, "transcript_hack_flags" in (row.get("not_evaluable") or [])
        )
        + _metadata(run_points)
        + "</section>"
    )


def count_badges(rows: list[dict[str, Any]], rejected: int) -> str:
    """One badge per status (they add up to the runs), then the rejected runs."""
    badges = [
        f'<span class="s-{s.removesuffix("-untimed")}">{_e(words)}</span>'
        for s, _, words in count_parts(rows)
    ]
    if rejected:
        badges.append(
            f'<span class="s-rejected"><a href="#rejected">{rejected} rejected</a></span>'
        )
    return "".join(badges)


def render_report(
    out: str,
    storage_options: dict[str, Any] | None = None,
    now: float | None = None,
) -> str:
    """The whole report as one HTML document."""
    # The three reads of OUT are independent (each a log replay, then its files):
    # on object storage their round trips overlap.
    with ThreadPoolExecutor(3, thread_name_prefix="rlstream-report") as pool:
        got_latest = pool.submit(read_latest, out, storage_options)
        got_points = pool.submit(read_run_points, out, storage_options)
        got_bands = pool.submit(read_bands, out, None, storage_options)
        latest, by_run, bands = got_latest.result(), got_points.result(), got_bands.result()
    rejected = read_rejected(out, storage_options, [r["run_uri"] for r in latest])
    by_id = {r["run_id"]: r for r in latest}
    rows = status_rows(latest, now)
    with ThreadPoolExecutor(8, thread_name_prefix="rlstream-report") as pool:
        evals = list(pool.map(lambda r: read_heldout(out, r["run_id"], storage_options), rows))
    now_dt = dt.datetime.now(dt.UTC) if now is None else dt.datetime.fromtimestamp(now, dt.UTC)

    def siblings(r: dict[str, Any]) -> dict[str, RunPoints]:
        c = r.get("cohort")
        return {
            run_name(o): by_run[o["run_id"]]
            for o in rows
            if c and o.get("cohort") == c and o is not r and o["run_id"] in by_run
        }

    sections = "".join(
        run_section(
            i,
            r,
            by_id[r["run_id"]],
            by_run.get(r["run_id"]) or RunPoints(),
            out,
            storage_options,
            bands.get(r.get("cohort")),
            siblings(r),
            evals[i],
        )
        for i, r in enumerate(rows)
    )
    csp = (
        "default-src 'none'; style-src 'unsafe-inline'; img-src data:; "
        f"script-src 'sha256-{_sha256_b64(SORT_SCRIPT)}'"
    )
    extra = f" (and {plural(len(rejected), 'rejected run')})" if rejected else ""
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f'<meta http-equiv="Content-Security-Policy" content="{csp}">'
        "<title>rlstream fleet report</title>"
        f"<style>{STYLE}</style></head><body>"
        "<h1>rlstream fleet report</h1>"
        f'<div class="sub">{plural(len(rows), "run")}{extra} from {_e(out)} · generated '
        f"{now_dt:%Y-%m-%d %H:%M:%S} UTC · click a column to sort</div>"
        f'<div class="counts">{count_badges(rows, len(rejected))}</div>'
        + (overview_table(rows) if rows else "<p>No runs in run_health yet.</p>")
        + rejected_section(rejected, out)
        + sections
        + f"<script>{SORT_SCRIPT}</script></body></html>\n"
    )


def write_report(out: str, path: str, storage_options: dict[str, Any] | None = None) -> int:
    """Write the report to `path` (a local file); returns the number of runs with a
    section (rejected runs are listed, not counted)."""
    html = render_report(out, storage_options)
    with open(path, "w", encoding="utf-8") as f:
        f.write(html)
    return html.count('<section class="run"')
