"""`rlstream report OUT -o report.html`: one self-contained HTML file, no network.

The page has a fleet overview (runs per status and the status table, sortable by a
small inline script) and one section per run, worst first: inline SVG charts of
reward, discards by reason, mismatch KL and ESS (recomputed and reported), entropy,
completion length, truncation and lag, each finding marked on its chart at
`since_step` with its message, and, for degenerate_outputs and entropy_collapse,
example completions read from the run's newest transcripts (the one read outside OUT).

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
from html import escape
from typing import Any

from rlstream.fleet.read import StepsTable, example_completions, read_latest
from rlstream.fleet.status import (
    STATUS_ORDER,
    counts,
    fmt_age,
    fmt_num,
    status_rows,
    trend_arrow,
)
from rlstream.fleet.svg import Chart, Marker, Series, line_chart

log = logging.getLogger("rlstream")

EXAMPLE_CODES = ("degenerate_outputs", "entropy_collapse")

STEP_COLUMNS = [
    "reward_mean",
    "reward_mean_with_unusable",
    "reward_group_std_mean",
    "reported_reward_mean",
    "discards",
    "groups_no_variance",
    "groups_group_too_small",
    "mismatch_kl",
    "reported_mismatch_kl",
    "mismatch_ess",
    "mismatch_ess_seq",
    "reported_mismatch_ess",
    "entropy_estimate",
    "reported_entropy_estimate",
    "repetition",
    "distinct_completions",
    "completion_len_mean",
    "completion_len_p95",
    "truncated_frac",
    "lag_mean",
    "lag_p90",
    "reported_lag_mean",
    "rollout_metadata",
]

# Which chart a finding is marked on; codes not listed go on the reward chart.
CHART_OF = {
    "unusable_groups_streak": "discards",
    "rollout_failure_burst": "discards",
    "grading_failure_burst": "discards",
    "mismatch_kl_rising": "kl",
    "metric_disagreement": "kl",
    "low_ess": "ess",
    "entropy_collapse": "entropy",
    "entropy_too_high": "entropy",
    "degenerate_outputs": "entropy",
    "length_explosion": "length",
    "length_collapse": "length",
    "out_of_room": "truncation",
    "stale_rollouts": "lag",
}
MAX_DISCARD_SERIES = 6

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
.s-healthy{background:#229954} .s-finished{background:#566573} .s-unknown{background:#999}
table{border-collapse:collapse;margin:6px 0} th,td{padding:3px 8px;border-bottom:1px solid #ddd;text-align:left;white-space:nowrap}
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


def _badge(status: str | None) -> str:
    s = status if status in STATUS_ORDER else "unknown"
    return f'<span class="badge s-{s}">{_e(status or "?")}</span>'


def _numcell(v: float | None, text: str) -> str:
    return f'<td class="n" data-v="{"" if v is None else _e(v)}">{_e(text)}</td>'


def overview_table(rows: list[dict[str, Any]]) -> str:
    head = (
        "<tr><th>run</th><th>status</th><th>last step</th><th>updated</th><th>reward</th>"
        "<th>trend/100 steps</th><th>mismatch KL</th><th>ESS</th><th>entropy</th>"
        "<th>truncation</th><th>firing findings</th></tr>"
    )
    body = []
    for i, r in enumerate(rows):
        codes = ", ".join(f["code"] for f in r["firing"]) or "-"
        trend = r.get("reward_trend")
        body.append(
            "<tr>"
            f'<td data-v="{_e(r["run_id"])}"><a href="#run-{i}">{_e(r["run_id"])}</a></td>'
            f'<td data-v="{STATUS_ORDER.get(r.get("status") or "", 9)}">{_badge(r.get("status"))}</td>'
            + _numcell(r.get("last_step"), fmt_num(r.get("last_step"), "d"))
            + _numcell(r.get("seconds_since_update"), fmt_age(r.get("seconds_since_update")))
            + _numcell(r.get("reward_mean"), fmt_num(r.get("reward_mean"), ".3f"))
            + _numcell(trend, trend_arrow(trend) or "-")
            + _numcell(r.get("mismatch_kl"), fmt_num(r.get("mismatch_kl"), ".2e"))
            + _numcell(r.get("mismatch_ess"), fmt_num(r.get("mismatch_ess"), ".3f"))
            + _numcell(r.get("entropy_estimate"), fmt_num(r.get("entropy_estimate"), ".3f"))
            + _numcell(r.get("truncated_frac"), fmt_num(r.get("truncated_frac"), ".2f"))
            + f'<td data-v="{len(r["firing"])}">{_e(codes)}</td></tr>'
        )
    return (
        f'<table class="sortable" id="fleet"><thead>{head}</thead>'
        f"<tbody>{''.join(body)}</tbody></table>"
    )


def _map_series(steps: list[int], maps: list[Any]) -> dict[str, list[float | None]]:
    """Per-key series of a map column (list of (key, value) pairs per row); a key
    missing at a step counts 0 (a discard reason that did not occur)."""
    keys: dict[str, float] = {}
    rows = []
    for m in maps:
        d = dict(m or [])
        rows.append(d)
        for k, v in d.items():
            keys[k] = keys.get(k, 0) + (v or 0)
    top = sorted(keys, key=lambda k: (-keys[k], k))[:MAX_DISCARD_SERIES]
    return {k: [float(d.get(k) or 0) for d in rows] for k in top}


def run_charts(cols: dict[str, list[Any]], findings: list[dict[str, Any]]) -> list[Chart]:
    steps = cols["step"]

    def s(col: str, label: str, dashed: bool = False) -> Series:
        return Series(label, steps, cols[col], dashed)

    charts = {
        "reward": (
            "reward",
            [
                s("reward_mean", "mean"),
                s("reward_mean_with_unusable", "mean with unusable"),
                s("reward_group_std_mean", "within-group std"),
                s("reported_reward_mean", "reported mean", True),
            ],
            False,
        ),
        "discards": (
            "discards by reason (attempts) and no-variance groups",
            [
                *(Series(k, steps, v) for k, v in _map_series(steps, cols["discards"]).items()),
                s("groups_no_variance", "groups: no_variance", True),
            ],
            False,
        ),
        "kl": (
            "sampler/trainer mismatch KL (k3, log scale)",
            [s("mismatch_kl", "recomputed"), s("reported_mismatch_kl", "reported", True)],
            True,
        ),
        "ess": (
            "importance-weight ESS",
            [
                s("mismatch_ess", "recomputed (token)"),
                s("reported_mismatch_ess", "reported", True),
                s("mismatch_ess_seq", "recomputed (sequence)"),
            ],
            False,
        ),
        "entropy": (
            "entropy (nats/token), repetition, distinct completions",
            [
                s("entropy_estimate", "entropy recomputed"),
                s("reported_entropy_estimate", "entropy reported", True),
                s("repetition", "repetition"),
                s("distinct_completions", "distinct completions"),
            ],
            False,
        ),
        "length": (
            "completion length (tokens)",
            [s("completion_len_mean", "mean"), s("completion_len_p95", "p95")],
            False,
        ),
        "truncation": ("truncated share", [s("truncated_frac", "stop_reason = length")], False),
        "lag": (
            "policy lag (steps)",
            [
                s("lag_mean", "mean"),
                s("lag_p90", "p90"),
                s("reported_lag_mean", "reported mean", True),
            ],
            False,
        ),
    }
    markers: dict[str, list[Marker]] = {k: [] for k in charts}
    for n, f in enumerate(findings, 1):
        if f.get("since_step") is None:
            continue
        key = CHART_OF.get(f.get("code"), "reward")
        markers[key].append(
            Marker(
                f["since_step"],
                str(f.get("code")),
                str(f.get("severity")),
                str(f.get("message") or ""),
                n,
            )
        )
    return [
        Chart(title, series, markers[key], log_y) for key, (title, series, log_y) in charts.items()
    ]


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


def _examples(run: dict[str, Any], storage_options: dict[str, Any] | None) -> str:
    wanted = [f for f in run.get("findings") or [] if f.get("code") in EXAMPLE_CODES]
    if not wanted or not run.get("run_uri"):
        return ""
    since = (
        min(f["since_step"] for f in wanted if f.get("since_step") is not None)
        if any(f.get("since_step") is not None for f in wanted)
        else None
    )
    ex = example_completions(run["run_uri"], since, storage_options)
    codes = ", ".join(sorted({f["code"] for f in wanted}))
    head = f"<h3>Example completions ({_e(codes)}; newest transcripts from step {_e(since)})</h3>"
    if not ex:
        return (
            head
            + '<p class="sub">No completion text found (samples traces, or the run folder is unreachable).</p>'
        )
    body = "".join(
        f'<div class="sub">step {_e(e["step"])}, task {_e(e["task_id"])}, attempt '
        f"{_e(e['attempt_id'])}: seen {e['count']}× among the newest transcripts</div>"
        f'<pre class="completion">{_e(e["text"])}</pre>'
        for e in ex
    )
    return head + body


def _metadata(cols: dict[str, list[Any]]) -> str:
    maps = [m for m in cols.get("rollout_metadata") or [] if m]
    if not maps:
        return ""
    last = dict(maps[-1])
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
    steps: StepsTable,
    storage_options: dict[str, Any] | None,
) -> str:
    findings = list(latest.get("findings") or [])
    cols = steps.run(row["run_id"], STEP_COLUMNS)
    charts = run_charts(cols, findings)
    unplaced = [f for f in findings if f.get("since_step") is None]
    extra = "".join(
        f"<li class='msg'><b>{_e(f.get('code'))}</b> [{_e(f.get('severity'))}, "
        f"{_e(f.get('state'))}]: {_e(f.get('message'))}</li>"
        for f in unplaced
    )
    return (
        f'<section class="run" id="run-{i}"><h2>{_e(row["run_id"])} {_badge(row.get("status"))}</h2>'
        f'<div class="sub">{_e(row.get("run_uri"))} · {_e(row.get("format") or "loops")} format · '
        f"last step {_e(row.get('last_step'))} · "
        f"{len(cols['step'])} final steps · {len(findings)} findings</div>"
        + (f"<ul>{extra}</ul>" if extra else "")
        + f'<div class="charts">{"".join(_figure(c, findings) for c in charts)}</div>'
        + _examples(latest, storage_options)
        + _metadata(cols)
        + "</section>"
    )


def render_report(
    out: str,
    storage_options: dict[str, Any] | None = None,
    now: float | None = None,
) -> str:
    """The whole report as one HTML document."""
    latest = read_latest(out, storage_options)
    by_id = {r["run_id"]: r for r in latest}
    rows = status_rows(latest, now)
    now_dt = dt.datetime.now(dt.UTC) if now is None else dt.datetime.fromtimestamp(now, dt.UTC)
    c = counts(rows)
    count_html = "".join(
        f'<span class="s-{s}">{n} {s}</span>' for s, n in c.items() if n or s in STATUS_ORDER
    )
    steps = StepsTable(out, storage_options)
    sections = "".join(
        run_section(i, r, by_id[r["run_id"]], steps, storage_options) for i, r in enumerate(rows)
    )
    csp = (
        "default-src 'none'; style-src 'unsafe-inline'; img-src data:; "
        f"script-src 'sha256-{_sha256_b64(SORT_SCRIPT)}'"
    )
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f'<meta http-equiv="Content-Security-Policy" content="{csp}">'
        "<title>rlstream fleet report</title>"
        f"<style>{STYLE}</style></head><body>"
        "<h1>rlstream fleet report</h1>"
        f'<div class="sub">{len(rows)} runs from {_e(out)} · generated '
        f"{now_dt:%Y-%m-%d %H:%M:%S} UTC · click a column to sort</div>"
        f'<div class="counts">{count_html}</div>'
        + (overview_table(rows) if rows else "<p>No runs in run_health yet.</p>")
        + sections
        + f"<script>{SORT_SCRIPT}</script></body></html>\n"
    )


def write_report(out: str, path: str, storage_options: dict[str, Any] | None = None) -> int:
    """Write the report to `path` (a local file); returns the number of runs."""
    html = render_report(out, storage_options)
    with open(path, "w", encoding="utf-8") as f:
        f.write(html)
    return html.count('<section class="run"')
