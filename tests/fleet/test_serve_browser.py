"""The live pages in a real browser: headless Chromium (Debian's `chromium`) driven
over the DevTools protocol (tests/fleet/cdp.py). The fleet and run pages load with no
console error (a CSP violation is one), show the runs, run no script from run data,
fit 1,400 px; filters and sorting work; and a step that a running watch commits
appears on an open page without a reload. Screenshots are kept as test artifacts
(`cdp.artifacts`: $RLSTREAM_TEST_ARTIFACTS if set, else the test's tmp folder). Skipped only when
chromium cannot be found."""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import threading
import time
from pathlib import Path
from urllib.parse import quote

import numpy as np
import pytest
from PIL import Image

from rlstream.config import PipelineConfig
from rlstream.fleet.prometheus import MetricsExporter
from rlstream.fleet.read import read_latest
from rlstream.fleet.web import FleetPages, PageServer
from rlstream.runtime.driver import RuntimeConfig
from rlstream.runtime.driver import run as run_pipeline
from rlstream.simulate import SimConfig, simulate_live
from tests.fleet.cdp import CHROMIUM, Browser, artifacts
from tests.fleet.conftest import HOSTILE_ID

pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="chromium not installed")


def _nonblank(png: Path) -> float:
    px = np.asarray(Image.open(png).convert("RGB"), dtype=np.int16).reshape(-1, 3)
    return float((px != 255).any(axis=1).mean())


def test_fleet_and_run_pages_in_chromium(fleet_out, tmp_path):
    srv = PageServer(FleetPages(str(fleet_out.out), refresh=1.0), port=0).start()
    host, port = srv.address
    b = Browser(tmp_path / "profile")
    try:
        b.call("Network.enable")  # every request the pages make is an event
        b.navigate(f"http://{host}:{port}/")
        assert b.evaluate("document.querySelectorAll('#fleet tbody tr').length") == 4
        names = b.evaluate("Array.from(document.querySelectorAll('#fleet tr[data-run]'))"
                           ".map(r => r.getAttribute('data-run'))")  # fmt: skip
        assert HOSTILE_ID in names  # shown as text ...
        assert b.evaluate("document.body.hasAttribute('data-pwned')") is False  # ... not run
        assert b.evaluate("document.querySelectorAll('#fleet img, #fleet svg').length") == 0
        # fits 1,400 px: no horizontal scroll
        assert b.evaluate("document.documentElement.scrollWidth") <= 1400
        # text search over names and finding codes
        b.evaluate("var t = document.getElementById('f-text'); t.value = 'entropy_collapse';"
                   "t.dispatchEvent(new Event('input'))")  # fmt: skip
        shown = b.evaluate("Array.from(document.querySelectorAll('#fleet tbody tr'))"
                           ".filter(r => !r.hidden).map(r => r.getAttribute('data-run'))")  # fmt: skip
        assert shown == [fleet_out.run_ids["entropy_collapse"]]
        b.evaluate("var t = document.getElementById('f-text'); t.value = '';"
                   "t.dispatchEvent(new Event('input'));"
                   "var s = document.getElementById('f-status'); s.value = 'critical';"
                   "s.dispatchEvent(new Event('input'))")  # fmt: skip
        statuses = b.evaluate("Array.from(document.querySelectorAll('#fleet tbody tr'))"
                              ".filter(r => !r.hidden).map(r => r.getAttribute('data-status'))")  # fmt: skip
        assert statuses and set(statuses) == {"critical"}
        b.evaluate("var s = document.getElementById('f-status'); s.value = '';"
                   "s.dispatchEvent(new Event('input'))")  # fmt: skip
        # filter by cohort, then by cohort and format: the runs OUT gives that cohort
        latest = read_latest(str(fleet_out.out))
        cohort = next(r["cohort"] for r in latest if r["run_id"] == HOSTILE_ID)
        want = sorted(r["run_id"] for r in latest if r["cohort"] == cohort)
        assert 0 < len(want) < len(latest)  # the filter has something to hide
        visible = ("Array.from(document.querySelectorAll('#fleet tbody tr'))"
                   ".filter(r => !r.hidden).map(r => r.getAttribute('data-run')).sort()")  # fmt: skip
        b.evaluate(f"var c = document.getElementById('f-cohort'); c.value = {json.dumps(cohort)};"
                   "c.dispatchEvent(new Event('input'))")  # fmt: skip
        assert b.evaluate(visible) == want
        b.evaluate("var f = document.getElementById('f-format'); f.value = 'loops';"
                   "f.dispatchEvent(new Event('input'))")  # fmt: skip
        assert b.evaluate(visible) == want
        assert b.evaluate("document.getElementById('f-format').options.length") == 2  # any, loops
        b.evaluate("['f-cohort', 'f-format'].forEach(function (i) {"
                   "var e = document.getElementById(i); e.value = '';"
                   "e.dispatchEvent(new Event('input')); })")  # fmt: skip
        assert len(b.evaluate(visible)) == len(latest)
        # sort by step (column 5), twice: ascending then descending
        b.evaluate("document.querySelectorAll('#fleet th')[4].click()")
        steps = b.evaluate("Array.from(document.querySelectorAll('#fleet tbody tr'))"
                           ".map(r => Number(r.cells[4].getAttribute('data-v')))")  # fmt: skip
        assert steps == sorted(steps)
        shot = artifacts(tmp_path) / "serve-fleet.png"
        b.screenshot(shot)
        assert _nonblank(shot) > 0.03
        assert b.errors() == []

        for rid in (fleet_out.run_ids["entropy_collapse"], HOSTILE_ID):
            b.navigate(f"http://{host}:{port}/run?id={quote(rid, safe='')}")
            assert b.evaluate("document.querySelectorAll('svg.chart').length") == 8
            assert b.evaluate("document.querySelectorAll('ol.timeline li').length") >= 1
            assert b.evaluate("document.body.hasAttribute('data-pwned')") is False
        shot = artifacts(tmp_path) / "serve-run-hostile.png"
        b.screenshot(shot)
        assert b.errors() == []
        # no request leaves the machine: the pages fetch only from this server
        urls = [e["params"]["request"]["url"] for e in b.events
                if e.get("method") == "Network.requestWillBeSent"]  # fmt: skip
        assert any(u.endswith("/static/live.js") for u in urls)
        origin = f"http://{host}:{port}/"
        assert [u for u in urls if not (u.startswith(origin) or u.startswith("data:"))] == []
    finally:
        b.close()
        srv.close()


_ROWS = ("Array.from(document.querySelectorAll('table.samples tr'))"
         ".filter(r => r.cells[0].tagName === 'TD')"
         ".map(r => [r.cells[0].textContent, r.cells[1].textContent])")  # fmt: skip


def test_run_page_samples_controls_in_chromium(fleet_out, tmp_path):
    srv = PageServer(FleetPages(str(fleet_out.out), refresh=600), port=0).start()
    host, port = srv.address
    rid = fleet_out.run_ids["healthy"]
    b = Browser(tmp_path / "profile")
    try:
        b.navigate(f"http://{host}:{port}/run?id={quote(rid, safe='')}")
        steps = b.evaluate("Array.from(document.querySelectorAll('#s-step option'))"
                           ".map(o => o.value).filter(v => v !== '')")  # fmt: skip
        assert steps == sorted(steps, key=int, reverse=True) and len(steps) >= 3
        pick = steps[2]
        # the form: pick a step and "top", submit with a click (a GET to this origin)
        b.evaluate(f"document.getElementById('s-step').value = '{pick}';"
                   "document.getElementById('s-kept').value = 'top';"
                   "document.getElementById('s-go').click()")  # fmt: skip
        assert b.wait_for("location.search.indexOf('kept=top') >= 0 && "
                          "document.body && document.body.getAttribute('data-ready') === '1'"
                          " && document.readyState === 'complete'", 60)  # fmt: skip
        rows = b.evaluate(_ROWS)
        assert rows and all(s == pick and "top" in k.split(", ") for s, k in rows)
        # the kept filter as a link: "bottom" at the same step
        b.evaluate("Array.from(document.querySelectorAll('a.kept-filter'))"
                   ".find(a => a.textContent === 'bottom').click()")  # fmt: skip
        assert b.wait_for("location.search.indexOf('kept=bottom') >= 0 && "
                          "document.body && document.body.getAttribute('data-ready') === '1'"
                          " && document.readyState === 'complete'", 60)  # fmt: skip
        rows = b.evaluate(_ROWS)
        assert rows and all(s == pick and "bottom" in k.split(", ") for s, k in rows)
        assert b.evaluate("document.getElementById('s-step').value") == pick
        shot = artifacts(tmp_path) / "serve-run-samples.png"
        b.screenshot(shot)
        assert _nonblank(shot) > 0.03
        assert b.errors() == []
    finally:
        b.close()
        srv.close()


class VersionedPages(FleetPages):
    """The pages of an OUT whose version the test moves on (`bump`), as a commit would."""

    bump = 0

    def snapshot(self):
        snap = super().snapshot()
        return dataclasses.replace(snap, etag=f'{snap.etag[:-1]}-{self.bump}"')


class IdlePages(FleetPages):
    """An OUT no watch writes any more: every run_health row written, and one run's
    last step, `age` seconds before the page is first rendered; no new version."""

    def __init__(self, out, run_id, age, **kw):
        super().__init__(out, **kw)
        self.run_id = run_id
        self.at = dt.datetime.now(dt.UTC) - dt.timedelta(seconds=age)

    def snapshot(self):
        snap = super().snapshot()
        latest = [dict(r, as_of=self.at, **({"last_activity": self.at}
                  if r["run_id"] == self.run_id else {})) for r in snap.latest]  # fmt: skip
        return dataclasses.replace(snap, latest=latest)


def test_ages_count_on_while_no_watch_writes(fleet_out, tmp_path):
    """A page is rendered once per version, and a dead watch makes no new version: the
    run's "updated" age and the tables' freshness must still grow in the open page (and
    in one opened later from the same cached render), not stay at what they were."""
    rid = fleet_out.run_ids["healthy"]
    pages_ = IdlePages(str(fleet_out.out), rid, 117, refresh=0.3)
    srv = PageServer(pages_, port=0).start()
    host, port = srv.address
    b = Browser(tmp_path / "profile")
    cell = (f"document.querySelector('#fleet tr[data-run={json.dumps(rid)}]')"
            ".cells[5].textContent")  # fmt: skip
    try:
        b.navigate(f"http://{host}:{port}/")
        assert b.evaluate(cell) in ("117s", "118s", "119s")
        assert b.evaluate("document.querySelector('#freshness .age').textContent") in (
            "117s", "118s", "119s")  # fmt: skip
        # past two minutes the age reads in minutes, with no new version and no reload
        assert b.wait_for(f"{cell} === '2m'", 20), b.evaluate(cell)
        assert b.evaluate("document.querySelector('#freshness .age').textContent") == "2m"
        assert b.evaluate("document.body.getAttribute('data-updates')") is None
        assert b.errors() == []
    finally:
        b.close()
        srv.close()


def test_a_refresh_keeps_what_the_reader_was_doing_on_the_run_page(kept_out, tmp_path):
    """A commit lands while someone types a search into the samples panel, has picked
    a filter, opened what a sample was sent, or is reading a scrolled excerpt: the page
    takes the new content and keeps all of that. The probe diff's two sides are the
    same width, with the changed words coloured; the whole flagged excerpt is shown."""
    out, rid, _ = kept_out
    pages_ = VersionedPages(str(out), refresh=0.3)
    srv = PageServer(pages_, port=0).start()
    host, port = srv.address
    b = Browser(tmp_path / "profile")
    try:
        b.navigate(f"http://{host}:{port}/run?id={quote(rid, safe='')}")
        # the probe diff: side by side, equal halves, changes coloured (the CSP allows
        # no inline style, so this is the stylesheet's doing)
        widths = b.evaluate("['probe-a', 'probe-b'].map(c => "
                            "document.querySelector('td.' + c).getBoundingClientRect().width)")  # fmt: skip
        assert widths[0] > 300 and abs(widths[0] - widths[1]) <= 2, widths
        colours = b.evaluate("['del', 'ins'].map(t => getComputedStyle("
                             "document.querySelector('table.probe ' + t)).backgroundColor)")  # fmt: skip
        assert colours == ["rgb(253, 224, 220)", "rgb(220, 245, 220)"], colours
        # what the reader does, not submitted
        b.evaluate("var q = document.getElementById('s-q'); q.focus(); q.value = 'rm -f';"
                   "q.setSelectionRange(2, 4);"
                   "document.getElementById('s-kept').value = 'flagged';"
                   "var d = document.querySelector('details.sent'); d.open = true;"
                   "window.__opened = d.getAttribute('data-keep');"
                   "var x = document.querySelector('.excerpt[data-keep$=\"/long-flagged\"]');"
                   "x.scrollTop = 40; window.__scrolled = x.scrollTop;"
                   "document.querySelector('main').firstElementChild.setAttribute('data-old', '1')")  # fmt: skip
        assert b.evaluate("window.__scrolled") == 40  # the long excerpt is a scroll box
        pages_.bump = 1
        assert b.wait_for("document.body.getAttribute('data-updates') === '1'", 30)
        assert b.evaluate("document.querySelector('[data-old]')") is None  # new content
        assert b.evaluate("document.getElementById('s-q').value") == "rm -f"
        assert b.evaluate("document.activeElement.id") == "s-q"
        assert b.evaluate("[document.getElementById('s-q').selectionStart,"
                          "document.getElementById('s-q').selectionEnd]") == [2, 4]  # fmt: skip
        assert b.evaluate("document.getElementById('s-kept').value") == "flagged"
        assert b.evaluate("document.querySelector('details.sent[data-keep=\"' + "
                          "window.__opened + '\"]').open") is True  # fmt: skip
        assert b.evaluate("document.querySelector('.excerpt[data-keep$=\"/long-flagged\"]')"
                          ".scrollTop") == 40  # fmt: skip
        # and the form still submits what was typed
        b.evaluate("document.getElementById('s-go').click()")
        assert b.wait_for("location.search.indexOf('q=rm+-f') >= 0 && document.body && "
                          "document.body.getAttribute('data-ready') === '1'", 60)  # fmt: skip
        assert b.evaluate("document.querySelectorAll('.excerpt mark').length") >= 1
        # the hit, 40 lines into the excerpt, is in view in its scroll box
        box, hit = b.evaluate("var m = document.querySelector('.excerpt mark');"
                              "[m.closest('.excerpt').getBoundingClientRect().toJSON(),"
                              " m.getBoundingClientRect().toJSON()]")  # fmt: skip
        assert box["top"] <= hit["top"] and hit["bottom"] <= box["bottom"], (box, hit)
        shot = artifacts(tmp_path) / "serve-run-refresh-kept.png"
        b.screenshot(shot)
        assert _nonblank(shot) > 0.03
        assert b.errors() == []
    finally:
        b.close()
        srv.close()


@pytest.mark.ray
def test_a_step_committed_by_a_running_watch_appears_without_reload(ray_session, tmp_path):
    root, out = tmp_path / "runs", tmp_path / "out"
    sim = SimConfig(runs=2, steps=60, scenarios=("healthy", "entropy_collapse"), seed=5)
    # The writer holds after 10 steps of each run until the page is open, so steps are
    # still to come however slowly the watch starts.
    page_open = threading.Event()

    def gated_sleep(seconds: float) -> None:
        written = sum(p.read_bytes().count(b"\n") for p in root.glob("*/steps.jsonl"))
        if written >= 2 * 10:
            page_open.wait(timeout=600)
        time.sleep(seconds)  # the simulated trainer's step time

    writer = threading.Thread(
        target=simulate_live, args=(root, sim, 0.25), kwargs={"sleep": gated_sleep}, daemon=True
    )
    writer.start()
    refresh = 1.0
    exporter = MetricsExporter(
        str(out), port=0, min_refresh_seconds=0, pages=FleetPages(str(out), refresh=refresh)
    ).start()
    host, port = exporter.address
    done = threading.Event()
    deadline = time.monotonic() + 400

    def stop() -> bool:
        assert time.monotonic() < deadline, "the watch ran too long"
        return done.is_set()

    cfg = PipelineConfig(poll_seconds=0.2, commit_seconds=0.5)
    failed: list[BaseException] = []

    def watch() -> None:
        try:
            run_pipeline([str(root)], str(out), cfg, RuntimeConfig(workers=1, tailers=1),
                         watch=True, stop=stop, metrics=exporter)  # fmt: skip
        except BaseException as e:  # told to the test below
            failed.append(e)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    b = None
    try:
        while not (out / "run_health").exists() or len(read_latest(str(out))) < 2:
            assert not failed, failed
            assert time.monotonic() < deadline, "no first commit of both runs"
            watcher.join(0.2)  # waits on the watch thread (ends early only if it fails)
        b = Browser(tmp_path / "profile")
        b.navigate(f"http://{host}:{port}/")
        b.evaluate("window.__sameDocument = 'yes'")
        first = b.evaluate("Math.max(...Array.from(document.querySelectorAll('#fleet tbody tr'))"
                           ".map(r => Number(r.cells[4].getAttribute('data-v'))))")  # fmt: skip
        page_open.set()
        # The next step committed to OUT (as `status` reads it) must be on the page
        # within two refresh intervals of being readable, with no reload.
        while True:
            seen = max(r["last_step"] or -1 for r in read_latest(str(out)))
            if seen > first:
                break
            assert time.monotonic() < deadline, "the watch committed no new step"
            b.pump(0.1)
        committed_at = time.monotonic()
        got = b.wait_for(
            "Math.max(...Array.from(document.querySelectorAll('#fleet tbody tr'))"
            f".map(r => Number(r.cells[4].getAttribute('data-v')))) >= {seen}",
            # two of the page's polls, plus slack for the server's read and the
            # browser's render on a loaded machine
            timeout=2 * refresh + 3.0,
        )
        took = time.monotonic() - committed_at
        assert got, f"step {seen} not shown {took:.1f}s after it was committed"
        assert b.evaluate("window.__sameDocument") == "yes"  # no reload
        assert int(b.evaluate("document.body.getAttribute('data-updates')")) >= 1
        shot = artifacts(tmp_path) / "serve-live.png"
        b.screenshot(shot)
        assert _nonblank(shot) > 0.03
        assert b.errors() == []
    finally:
        page_open.set()
        if b is not None:
            b.close()
        done.set()
        watcher.join(120)
        exporter.close()
        writer.join(120)
    assert not failed, failed


def test_report_overview_fits_1400_px(fleet_out, tmp_path):
    from rlstream.fleet.report import write_report

    report = tmp_path / "report.html"
    write_report(str(fleet_out.out), str(report))
    b = Browser(tmp_path / "profile")
    try:
        b.call("Page.navigate", url=report.as_uri())
        assert b.wait_for("document.body && document.body.getAttribute('data-sortable')", 60)
        right = b.evaluate("document.getElementById('fleet').getBoundingClientRect().right")
        assert right <= 1400, right
        shot = artifacts(tmp_path) / "report-1400.png"
        b.screenshot(shot)
        assert b.errors() == []
    finally:
        b.close()


@pytest.fixture(scope="module")
def hack_out(tmp_path_factory):
    """A text-hacking run and its healthy twin, analyzed: the hacking one has steps
    whose high-reward attempts the scanners flag."""
    from rlstream.pipeline.local import analyze_local
    from rlstream.simulate import simulate

    base = tmp_path_factory.mktemp("hack")
    cfg = SimConfig(runs=2, steps=24, scenarios=("transcript_hack_flags", "healthy"), seed=3,
                    groups=6, group_size=4)  # fmt: skip
    labels = simulate(base / "runs", cfg)
    analyze_local([str(base / "runs")], str(base / "out"))
    return base / "out", {lab.scenario: lab.run_id for lab in labels}


_FLAG_BARS = """(function () {
  var chart = document.querySelectorAll('svg.chart')[0];
  var box = chart.getBoundingClientRect();
  return Array.from(chart.querySelectorAll('rect.flag')).map(function (r) {
    var b = r.getBoundingClientRect(), cx = b.left + b.width / 2, cy = b.top + b.height / 2;
    var hit = document.elementFromPoint(cx, cy);
    return {title: r.querySelector('title').textContent, w: b.width, h: b.height,
            dy: b.top - box.top, inside: b.left >= box.left && b.right <= box.right,
            seen: hit === r || r.contains(hit), x: cx + window.scrollX, y: cy + window.scrollY};
  });
})()"""


def test_flag_marks_on_the_live_run_page_in_chromium(hack_out, tmp_path):
    """The reward chart of the live run page marks, along its top edge, the steps
    where scanners flagged at least 2 % of the high-reward attempts (as the report
    does): red bars a person sees (topmost at their centre, drawn red in the
    screenshot), each titled with its steps, and the legend says what they mean;
    the healthy twin's chart has none."""
    from rlstream.fleet.report_samples import flag_steps
    from tests.outputs import out_sql

    out, ids = hack_out
    rid = ids["transcript_hack_flags"]
    want = [s for (s,) in out_sql(out, f"select step from steps where run_id = '{rid}' "
                                       "and flagged_high_frac >= 0.02 order by step")]  # fmt: skip
    assert want and flag_steps(rid, str(out), None) == want
    srv = PageServer(FleetPages(str(out), refresh=600), port=0).start()
    host, port = srv.address
    b = Browser(tmp_path / "profile")
    try:
        b.navigate(f"http://{host}:{port}/run?id={quote(rid, safe='')}")
        assert b.evaluate("document.querySelector('svg.chart').textContent").startswith("reward")
        bars = b.evaluate(_FLAG_BARS)
        assert bars
        spans = []
        for bar in bars:
            a, z = map(int, bar["title"].split(":")[0].removeprefix("steps ").split("-"))
            assert a in want and z in want and a <= z
            assert bar["title"].endswith(
                "transcript scanners flag >= 2% of the high-reward attempts"
            )
            assert bar["w"] >= 1.5 and bar["h"] >= 4 and 0 <= bar["dy"] < 60 and bar["inside"]
            assert bar["seen"]  # nothing drawn over it
            spans.append((a, z))
        assert all(any(a <= s <= z for a, z in spans) for s in want)
        legend = b.evaluate("Array.from(document.querySelector('svg.chart')"
                            ".querySelectorAll('text')).map(t => t.textContent)")  # fmt: skip
        assert "transcript scanners flag >= 2% of the high-reward attempts" in legend
        b.evaluate("window.scrollTo(0, 0)")
        bars = b.evaluate(_FLAG_BARS)
        shot = artifacts(tmp_path) / "serve-run-flag-marks.png"
        b.screenshot(shot)
        scale = b.evaluate("window.devicePixelRatio")
        img = Image.open(shot).convert("RGB")
        for bar in bars:
            r, g, bl = img.getpixel((round(bar["x"] * scale), round(bar["y"] * scale)))
            assert (r, g, bl) == (0xC0, 0x39, 0x2B)  # FLAG_COLOR, as drawn
        assert b.errors() == []
        b.navigate(f"http://{host}:{port}/run?id={quote(ids['healthy'], safe='')}")
        assert b.evaluate("document.querySelectorAll('svg.chart').length") == 8
        assert b.evaluate(_FLAG_BARS) == []
        assert b.errors() == []
    finally:
        b.close()
        srv.close()
