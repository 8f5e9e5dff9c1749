"""The HTML report: content, escaping of run data, charts and findings markers."""

from __future__ import annotations

import re
from html import escape

from rlstream.cli import main
from rlstream.fleet.read import example_completions, read_latest
from rlstream.fleet.report import SORT_SCRIPT, render_report, run_charts
from rlstream.fleet.svg import Band, Chart, Marker, Series, line_chart
from tests.fleet.conftest import HOSTILE_ID, HOSTILE_LABEL, HOSTILE_REASON, HOSTILE_TEXT
from tests.outputs import out_con


def test_report_escapes_every_string_from_run_data(fleet_out, tmp_path):
    path = tmp_path / "report.html"
    assert main(["report", str(fleet_out.out), "-o", str(path)]) == 0
    html = path.read_text()
    # exactly one script element: ours, after every section
    assert html.count("<script") == 1
    assert html.rindex("<script>") > html.rindex('<section class="run"')
    assert "data-pwned" not in html.split("<script>")[1]
    for raw in (HOSTILE_ID, HOSTILE_TEXT, HOSTILE_LABEL, HOSTILE_REASON):
        assert raw not in html
    assert (
        "&lt;script&gt;document.body.setAttribute(&quot;data-pwned&quot;, &quot;id&quot;)" in html
    )
    assert "&lt;/pre&gt;&lt;script&gt;" in html  # completion text, as text
    assert "termination_reason/&lt;script&gt;" in html  # metadata label
    assert "rollout_failed/&lt;svg onload=" in html  # discard reason in a legend
    assert "onerror=" not in html.replace("onerror=&#x27;", "")
    # CSP allows only our script, by hash
    assert "script-src 'sha256-" in html and "unsafe-inline'; img-src" in html
    assert SORT_SCRIPT in html


def test_report_overview_and_sections(fleet_out):
    html = render_report(str(fleet_out.out), now=2e9)
    rows = re.findall(
        r'<tr><td class="name" data-v="([^"]*)"><a href="#run-\d+">[^<]*</a>'
        r'<div class="sub id">([^<]*)</div>',
        html,
    )
    assert len(rows) == 4
    # runs are named by their folder, the id below
    latest = {r["run_id"]: r for r in read_latest(str(fleet_out.out))}
    for name, rid in rows:
        assert latest[_unescape(rid)]["run_uri"].rstrip("/").endswith("/" + _unescape(name))
    # worst first: the two critical runs lead
    statuses = [latest[_unescape(v)]["status"] for _, v in rows]
    assert statuses == sorted(
        statuses, key=["critical", "stalled", "warning", "healthy", "finished"].index
    )
    assert html.count('<section class="run"') == 4
    # finished runs keep their severity and say that they finished
    assert '<span class="s-critical">2 critical (2 finished)</span>' in html
    # every run has its eight charts
    assert html.count('<svg xmlns="http://www.w3.org/2000/svg"') == 4 * 8
    # quarantined lines per run: a column and each section's line
    assert "<th>quar.</th>" in html and html.count("0 quarantined lines") == 4
    # the held-out evaluations are on each reward chart; the all-attempts mean is named
    assert html.count("held-out heldout") == 4
    assert "all attempts (incl. rejected groups)" in html
    # example completions only for runs with degenerate_outputs / entropy_collapse
    assert html.count("<h3>Example completions") == 2
    assert html.count('<pre class="completion">') >= 2


def test_findings_marked_on_their_chart_at_since_step(fleet_out):
    latest = {r["run_id"]: r for r in read_latest(str(fleet_out.out))}
    run = latest[fleet_out.run_ids["mismatch_kl_rising"]]
    findings = run["findings"]
    kl = next(f for f in findings if f["code"] == "mismatch_kl_rising")
    from rlstream.fleet.read import read_run_points

    run_points = read_run_points(str(fleet_out.out))[run["run_id"]]
    assert (run_points.rows, run_points.steps_range(), run_points.width) == (40, (0, 39), 1)
    charts = {c.title.split(" ")[0]: c for c in run_charts(run_points, findings)}
    marker = next(m for m in charts["sampler/trainer"].markers if m.code == "mismatch_kl_rising")
    assert marker.step == kl["since_step"] and marker.message == kl["message"]
    svg = line_chart(charts["sampler/trainer"])
    assert f"mismatch_kl_rising (since step {kl['since_step']})" in svg
    assert "reported" in svg and "recomputed" in svg


def test_line_chart_positions_and_gaps():
    chart = Chart(
        "t",
        [Series("a", [0, 1, 2, 3, 4], [0.0, 1.0, None, 3.0, 4.0])],
        [Marker(2, "c<", "warning", "m&", 1)],
    )
    svg = line_chart(chart, width=160, height=120)
    # a gap at step 2 splits the line in two
    assert svg.count("<polyline") == 2
    # plot area x from 58 to 148: step 2 of 0..4 is at x=103
    assert 'x1="103.0" x2="103.0"' in svg
    assert "c&lt; (since step 2): m&amp;" in svg
    empty = line_chart(Chart("none", [Series("a", [0, 1], [None, None])]))
    assert "no data for this figure" in empty


def test_a_cohort_band_is_shaded_under_the_series_over_the_runs_steps():
    band = Band("cohort p10-p90 (4 runs)", list(range(9)), [0.0] * 9, [9.0] * 9)
    band.low[3] = None  # no band at step 3: two polygons (steps 0-2 and 4-6)
    run = Series("a", list(range(7)), [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0])
    svg = line_chart(Chart("t", [run], band=band), width=160, height=120)
    polys = re.findall(r'<polygon points="([^"]*)"[^>]*class="band"', svg)
    assert len(polys) == 2
    assert svg.index('class="band"') < svg.index("<polyline")  # drawn under the run
    assert "cohort p10-p90 (4 runs)" in svg
    # The band stops at the run's last step (6 of 0..8 is the plot's right edge, x=148)
    # and the axis widens to hold its top (9.0 inside the plot, which starts at y=26).
    xs = [float(p.split(",")[0]) for poly in polys for p in poly.split()]
    ys = [float(p.split(",")[1]) for poly in polys for p in poly.split()]
    assert max(xs) == 148.0 and min(ys) >= 26.0


def test_example_completions_are_the_newest_kept_samples_texts_counted(fleet_out):
    """docs/fleet.md: the texts of the run's newest 48 kept samples at or after
    `since_step` (highest step, then attempt id), cut at 400 characters, most
    repeated first; recomputed here with DuckDB over OUT/samples."""
    out = str(fleet_out.out)
    ex = example_completions(out, HOSTILE_ID, since_step=30, limit=3)
    con = out_con(out)
    want = con.execute(
        """select left(returned, 400) t, count(*) n, max(step) s from (
             select * from samples where run_id = ? and step >= 30 and returned is not null
             order by step desc, attempt_id desc limit 48)
           group by t order by n desc, s desc""",
        [HOSTILE_ID],
    ).fetchall()
    assert 1 <= len(ex) <= 3 and want
    assert [(e["text"].removesuffix("…"), e["count"]) for e in ex] == [
        (t, n) for t, n, _ in want[:3]
    ]
    assert all(e["step"] >= 30 and e["text"].startswith(HOSTILE_TEXT) for e in ex)
    assert sum(n for _, n, _ in want) == 48  # the run keeps more than 48 samples since step 30
    assert example_completions(out, "no-such-run", None) == []


def test_the_report_reads_only_out_no_run_folder_and_no_resume_state(fleet_out, monkeypatch):
    """The report's examples and samples come from OUT's tables: it lists and reads
    nothing under the runs' folders and opens no resume state."""
    from rlstream.io.storage import Storage
    from rlstream.sinks.delta import DeltaSink

    touched: list[str] = []
    real_list, real_read = Storage.list_names, Storage.read

    def counting_list(self, url, start_after=None):
        touched.append(url)
        return real_list(self, url, start_after)

    def counting_read(self, url, *a, **k):
        touched.append(url)
        return real_read(self, url, *a, **k)

    def no_state(self, run_id):
        raise AssertionError(f"the report opened the resume state of {run_id}")

    monkeypatch.setattr(Storage, "list_names", counting_list)
    monkeypatch.setattr(Storage, "read", counting_read)
    monkeypatch.setattr(DeltaSink, "load_state", no_state)
    html = render_report(str(fleet_out.out), now=2e9)
    assert html.count("<h3>Example completions") == 2
    assert not [u for u in touched if str(fleet_out.root) in u]
    ex = example_completions(str(fleet_out.out), HOSTILE_ID, since_step=30)
    assert f"seen {ex[0]['count']}× among the newest kept samples" in html
    assert escape(ex[0]["text"])[:40] in html


def _unescape(s: str) -> str:
    import html

    return html.unescape(s)


def _yticks(svg: str) -> list[float]:
    return [float(t) for t in re.findall(r'class="yt">([^<]+)<', svg)]


def test_axes_fit_the_quantity_and_gaps_are_shaded_and_explained():
    # A lag that is 0 throughout, with no value at step 2: axis 0-1, not -1 to 1.
    lag = Chart(
        "lag",
        [Series("mean", [0, 1, 2, 3, 4], [0.0, 0.0, None, None, 0.0])],
        y_min=0.0,
        gap_note="no trained attempt at these steps",
    )
    svg = line_chart(lag, width=300, height=160)
    ticks = _yticks(svg)
    assert min(ticks) == 0.0 and max(ticks) == 1.0
    assert svg.count('class="gap"') == 1  # steps 2-3: one band
    assert "<title>steps 2-3: no trained attempt at these steps</title>" in svg
    assert 'class="lg">no trained attempt at these steps</text>' in svg
    # A share near 1 stays within 0-1; no gap, no gap legend.
    # (plot area: y from 26 at the top to 26 + 76 = 102 at the bottom)
    assert '<polyline points="58.0,102.0 115.5,102.0"' in svg  # 0 sits on the bottom
    # A share from 0 to 1: the axis is exactly 0-1, no padding beyond either end.
    ess = Chart("ess", [Series("r", [0, 1, 2], [0.0, 1.0, 0.5])], y_min=0.0, y_max=1.0)
    svg = line_chart(ess, width=300, height=160)
    assert '<polyline points="58.0,102.0 173.0,26.0 288.0,64.0"' in svg
    assert 'class="gap"' not in svg and "no value at these steps" not in svg
    # Without bounds the padding still goes both ways (a reward may be negative).
    free = line_chart(Chart("r", [Series("r", [0, 1], [0.0, 0.0])]), width=300, height=160)
    assert min(_yticks(free)) < 0


def test_report_figures_agree_with_the_findings_and_counts_add_up(fleet_out):
    html = render_report(str(fleet_out.out), now=2e9)
    latest = {r["run_id"]: r for r in read_latest(str(fleet_out.out))}
    run = latest[fleet_out.run_ids["mismatch_kl_rising"]]
    kl = next(f for f in run["findings"] if f["code"] == "mismatch_kl_rising")
    assert kl["state"] == "firing"
    # the finding cites the window median; the overview shows that same figure
    assert f"mismatch KL {run['mismatch_kl_recent']:.4f} over the last 5 steps" in kl["message"]
    assert f">{run['mismatch_kl_recent']:.2e}</td>" in html
    assert "<th>KL*</th>" in html
    assert "* median of last 5 steps, the value the health rules judge" in html
    badges = re.findall(r'<span class="s-[a-z]+">(\d+) ([^<]+)</span>', html)
    assert sum(int(n) for n, _ in badges) == len(latest) == 4
    assert {label for _, label in badges} == {
        "critical (2 finished)",
        "warning (1 finished)",
        "finished healthy",
    }
    assert not re.search(r"[ >]1 (findings|final steps|runs)\b", html)
    assert re.search(r"· \d+ findings?</div>", html)


def test_long_series_are_thinned_keeping_extremes_and_gaps():
    from rlstream.fleet.svg import thin

    n = 100_000
    values = [float(i % 97) for i in range(n)]
    values[50_000] = 1e6  # a spike
    values[70_000] = None  # narrower than a column (about 204 steps): not a break
    values[80_000:80_500] = [None] * 500  # a gap wider than a column: the line breaks
    thinned = thin(Series("x", list(range(n)), values), 490)
    assert len(thinned.steps) <= 3 * 490
    assert thinned.steps == sorted(thinned.steps)
    assert 1e6 in thinned.values
    gaps = [s for s, v in zip(thinned.steps, thinned.values, strict=True) if v is None]
    assert gaps and all(80_000 <= s < 80_500 for s in gaps)
    assert min(v for v in thinned.values if v is not None) == 0.0
    short = Series("y", [0, 1], [1.0, 2.0])
    assert thin(short, 490) is short
    svg = line_chart(Chart("long", [Series("x", list(range(n)), values)]))
    assert svg.count(",") < 4 * 490  # points drawn, not 100,000


def test_charts_of_a_short_run_draw_its_step_rows(fleet_out):
    """A run of at most MAX_BINS steps is charted from its digest at width 1: every
    series is the steps column itself (NaN where null), discards are one series per
    reason (the six largest totals), and the metadata is the last non-empty map, all
    recomputed here from the rows as Python lists."""
    from rlstream.fleet.read import StepsTable, read_run_points
    from rlstream.fleet.report import _metadata

    table = StepsTable(str(fleet_out.out))
    by_run = read_run_points(str(fleet_out.out))
    seen = 0
    for run in read_latest(str(fleet_out.out)):
        run_points = by_run[run["run_id"]]
        lists = table.run(run["run_id"], ["reward_mean", "mismatch_kl", "discards"])
        lists.update(table.run(run["run_id"], ["rollout_metadata"]))
        assert lists["step"] == list(range(40)) and run_points.rows == 40
        charts = {c.title.split(" ")[0]: c for c in run_charts(run_points, run["findings"])}
        reward = charts["reward"].series[0]
        assert list(reward.steps) == lists["step"]
        want = [float("nan") if v is None else v for v in lists["reward_mean"]]
        assert [repr(v) for v in reward.values.tolist()] == [repr(v) for v in want]
        kl = charts["sampler/trainer"].series[0]  # log axis: <= 0 is no value
        want = [v if v is not None and v > 0 else float("nan") for v in lists["mismatch_kl"]]
        assert [repr(v) for v in kl.values.tolist()] == [repr(v) for v in want]
        filled = [dict(m) for m in lists["rollout_metadata"] if m]
        assert run_points.metadata == filled[-1] and _metadata(run_points) != ""
        totals: dict[str, float] = {}
        for m in lists["discards"]:
            for k, v in m or []:
                totals[k] = totals.get(k, 0) + (v or 0)
        top = sorted(totals, key=lambda k: (-totals[k], k))[:6]
        want_series = {
            k: [float(dict(m or []).get(k) or 0) for m in lists["discards"]] for k in top
        }
        got_series = {
            s.label: [float(v) for v in s.values] for s in charts["discards"].series if not s.dashed
        }
        assert got_series == want_series
        seen = max(seen, len(want_series))
    assert seen >= 2  # some run has several discard reasons


def test_steps_come_back_in_step_order_whatever_the_file_order(tmp_path):
    from rlstream.fleet.read import StepsTable, out_sink
    from rlstream.pipeline.rows import steps_table

    sink = out_sink(str(tmp_path / "out"))
    for step in (3, 1, 2, 0):
        rows = [{"run_id": r, "step": step} for r in ("b", "a")]
        sink.append("steps", steps_table(rows), {"x": step})
    table = StepsTable(str(tmp_path / "out"))
    assert table.run("a", [])["step"] == table.run("b", [])["step"] == [0, 1, 2, 3]


def test_runs_are_sliced_in_place_only_when_each_is_one_block_in_step_order():
    import pyarrow as pa

    from rlstream.fleet.read import _run_ranges

    def table(ids, steps):
        return pa.table({"run_id": ids, "step": pa.array(steps, pa.int64())})

    assert _run_ranges(table(["b", "b", "a", "a", "a"], [0, 1, 0, 1, 5])) == {
        "b": (0, 2),
        "a": (2, 5),
    }
    assert _run_ranges(table(["b", "a", "b"], [0, 0, 1])) is None  # b in two blocks
    assert _run_ranges(table(["a", "a"], [1, 0])) is None  # out of step order
    assert _run_ranges(table(["a", "a"], [1, 1])) is None  # a step twice
    assert _run_ranges(table([], [])) == {}
