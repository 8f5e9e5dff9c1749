"""`rlstream serve` over HTTP: the pages of an analyzed OUT (one hostile run), the
version endpoint's ETag/304, the security headers, the bounded reads, and the command
bound to 127.0.0.1. The browser tests are in test_serve_browser.py."""

from __future__ import annotations

import http.client
import re
import subprocess
import sys
import urllib.request
from html import escape
from urllib.parse import quote

import pytest

from rlstream.fleet.read import read_latest, read_table
from rlstream.fleet.status import STATUS_ORDER
from rlstream.fleet.web import CSP, FleetPages, PageServer
from tests.fleet.conftest import HOSTILE_ID, LONG_RETURNED


@pytest.fixture(scope="module")
def server(fleet_out):
    pages = FleetPages(str(fleet_out.out), refresh=600)
    srv = PageServer(pages, port=0).start()
    yield srv, pages
    srv.close()


def _get(srv, path, headers=None):
    host, port = srv.address
    conn = http.client.HTTPConnection(host, port, timeout=30)
    conn.request("GET", path, headers=headers or {})
    r = conn.getresponse()
    body = r.read().decode()
    conn.close()
    return r.status, dict(r.getheaders()), body


def test_fleet_page_lists_every_run_escaped_with_counts(server, fleet_out):
    srv, _ = server
    status, head, body = _get(srv, "/")
    assert status == 200 and head["Content-Security-Policy"] == CSP
    assert head["X-Content-Type-Options"] == "nosniff"
    runs = re.findall(r'<tr data-status="([a-z]+)"', body)
    assert len(runs) == 4
    assert body.count('data-count="') == len(STATUS_ORDER)  # one badge per status, even at 0
    for scenario, rid in fleet_out.run_ids.items():
        if rid != HOSTILE_ID:
            assert f'data-run="{rid}"' in body, scenario
    assert "<script>document" not in body and "<img src=x" not in body
    assert "&lt;script&gt;document.body.setAttribute(&quot;data-pwned&quot;" in body
    # only our own script, from this origin
    assert re.findall(r"<script[^>]*>", body) == ['<script src="/static/live.js">']
    # each run's age carries its last activity (unix seconds), for the page to count on
    epochs = dict(re.findall(r'data-run="([^"]*)".*?<td class="n age" data-v="[\d.]*" '
                             r'data-epoch="([\d.]+)"', body))  # fmt: skip
    want = {escape(r["run_id"], quote=True): r["last_activity"].timestamp()
            for r in read_latest(str(fleet_out.out))}  # fmt: skip
    assert {k: round(float(v), 3) for k, v in epochs.items()} == {
        k: round(v, 3) for k, v in want.items()
    }
    # worst first: a critical run before the healthy one
    order = STATUS_ORDER
    assert [order[s] for s in runs] == sorted(order[s] for s in runs)


def test_run_page_has_charts_timeline_advice_quarantine_and_samples_panel(server, fleet_out):
    srv, _ = server
    rid = fleet_out.run_ids["entropy_collapse"]
    status, _, body = _get(srv, "/run?id=" + quote(rid))
    assert status == 200
    assert body.count('role="img" class="chart"') == 8
    assert "<b>entropy_collapse</b>" in body
    # the timeline, from the run's alerts rows: a faint bar from the step it went
    # pending to the step it fired, a solid one from there to the last step (firing)
    latest = {r["run_id"]: r for r in read_latest(str(fleet_out.out))}
    alerts = read_table(str(fleet_out.out), "alerts", where=("run_id", rid)).to_pylist()
    step_of = {(a["code"], a["to_state"]): a["step"] for a in alerts}
    pending, fired = (
        step_of[("entropy_collapse", "pending")],
        step_of[("entropy_collapse", "firing")],
    )
    last = latest[rid]["last_step"]
    assert pending < fired < last
    bars = re.findall(r'<rect x="([\d.]+)" y="\d+" width="([\d.]+)" height="11" '
                      r'fill="#[0-9a-f]+"(?: opacity="[\d.]+")? data-span="(\w+)"', body)  # fmt: skip

    def x(step):
        return 150 + step / last * 740

    assert [b[2] for b in bars] == ["pending", "firing"]
    (p0, pw, _), (f0, fw, _) = ((float(a), float(w), k) for a, w, k in bars)
    assert abs(p0 - x(pending)) < 0.06 and abs(p0 + pw - x(fired)) < 0.1
    assert abs(f0 - x(fired)) < 0.06 and abs(f0 + fw - 890) < 0.1
    assert f"firing since step {fired} (pending from {pending})" in body
    assert "the policy stopped exploring" in body  # its advice
    assert "no quarantined line" in body
    assert '<table class="samples">' in body  # its kept transcripts (the next test)
    # its cohort's other runs are listed and drawn as their own curves: with fewer
    # than 3 peers no band is drawn
    peers = [k for k, r in latest.items() if k != rid and r["cohort"] == latest[rid]["cohort"]]
    assert 1 <= len(peers) < 3
    assert body.count('href="/run?id=') == len(peers)
    assert "sibling " in body and "cohort median" not in body
    hostile = _get(srv, "/run?id=" + quote(HOSTILE_ID, safe=""))[2]
    assert "<script>document" not in hostile and "<img src=x" not in hostile


def test_a_finding_resolved_long_ago_is_on_the_run_page_where_it_ended(fleet_out, tmp_path):
    """A finding that fired and resolved early in a run is gone from its latest
    run_health row (kept only `keep_resolved_steps`) but not from its alerts: the
    run page shows it, its bar ending at the step it resolved, not at the last step."""
    import shutil

    from rlstream.fleet.read import out_sink
    from rlstream.sinks.health import alerts_table

    out = tmp_path / "out"
    shutil.copytree(fleet_out.out, out)
    rid = fleet_out.run_ids["healthy"]
    latest = {r["run_id"]: r for r in read_latest(str(out))}[rid]
    assert latest["findings"] == [] and latest["last_step"] == 39
    rows = [
        ("inactive", "pending", 5, "reward rose <fast>"),
        ("pending", "firing", 7, "reward rose +0.4 <fast>"),
        ("firing", "resolved", 12, "reward settled"),
        ("resolved", "pending", 20, "again"),
        ("pending", "inactive", 22, "no"),
    ]
    out_sink(str(out)).append("alerts", alerts_table([
        {"run_id": rid, "code": "reward_too_fast", "severity": "warning", "from_state": a,
         "to_state": b, "step": st, "time": 1.7e9 + st, "message": m, "commit_seq": 1}
        for a, b, st, m in rows]), {})  # fmt: skip
    status, _, body = FleetPages(str(out)).handle("/run?id=" + quote(rid))
    body = body.decode()
    assert status == 200 and "No finding." not in body
    assert "fired at step 7 (pending from 5), resolved at step 12" in body
    assert "steps 20-22, pending, ended without firing" in body
    assert "reward rose +0.4 &lt;fast&gt;" in body and "when it resolved: reward settled" in body
    bars = re.findall(r'<rect x="([\d.]+)" y="\d+" width="([\d.]+)" height="11" '
                      r'fill="#[0-9a-f]+"(?: opacity="[\d.]+")? data-span="(\w+)"', body)  # fmt: skip
    x = [(round(float(a) - 150, 1), round(float(a) + float(w) - 150, 1), k) for a, w, k in bars]
    per = 740 / 39
    want = [(5, 7, "pending"), (7, 12, "firing"), (20, 22, "pending")]
    assert x == [(round(a * per, 1), round(b * per, 1), k) for a, b, k in want]


def test_compare_page_and_unknown_run(server, fleet_out):
    srv, _ = server
    a, b = fleet_out.run_ids["healthy"], fleet_out.run_ids["mismatch_kl_rising"]
    status, _, body = _get(srv, f"/compare?id={quote(a)}&id={quote(b)}")
    assert status == 200
    assert body.count("<tr><td>") == 9  # one row per figure of `compare`
    assert "mismatch_kl" in body
    # what `rlstream compare` prints: its verdict line and each row's source and why
    from rlstream.fleet.compare import compare_runs, verdict_line

    found = compare_runs(str(fleet_out.out), [a, b])
    line = verdict_line(found)
    assert line.startswith("diverged: ") and b in line  # the CLI's line, by run id ...
    folder = next(r["run_uri"] for r in read_latest(str(fleet_out.out)) if r["run_id"] == b)
    name = folder.rstrip("/").rsplit("/", 1)[-1]
    # ... the page's, by the name the page gives the run everywhere else
    assert f"<p class='verdict'>{escape(line.replace(b, name))}</p>" in body
    assert b not in body.split("<p class='verdict'>")[1].split("</p>")[0]
    never = [d for d in found if d.step is None and d.why]
    assert never and all(f"<td class='why'>{escape(d.why)}</td>" in body for d in never)
    assert body.count("<td>recomputed</td>") == sum(d.source == "recomputed" for d in found)
    assert _get(srv, "/run?id=nope")[0] == 404
    assert _get(srv, "/nothing")[0] == 404


def test_version_etag_304_and_reads_bounded(server):
    srv, pages = server
    status, head, _ = _get(srv, "/api/version")
    assert status == 200 and head["ETag"].startswith('"')
    before = pages.reads
    for _ in range(5):
        assert _get(srv, "/api/version", {"If-None-Match": head["ETag"]})[0] == 304
        assert _get(srv, "/")[0] == 200
    assert pages.reads == before  # within refresh/2: no new read of OUT


def test_only_loopback_host_names_and_read_only(server):
    srv, _ = server
    assert _get(srv, "/", {"Host": "evil.example:80"})[0] == 421
    host, port = srv.address
    conn = http.client.HTTPConnection(host, port, timeout=30)
    conn.request("POST", "/", body=b"x")
    assert conn.getresponse().status == 501
    conn.close()


def test_serve_command_binds_loopback_and_serves(fleet_out):
    proc = subprocess.Popen(
        [sys.executable, "-m", "rlstream.cli", "serve", str(fleet_out.out), "--port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        m = re.search(r"http://(127\.0\.0\.1):(\d+)/", line)
        assert m, line
        with urllib.request.urlopen(f"http://127.0.0.1:{m[2]}/", timeout=30) as r:
            assert r.status == 200 and b'id="fleet"' in r.read()
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_serve_refuses_a_folder_that_is_not_out(tmp_path):
    got = subprocess.run(
        [sys.executable, "-m", "rlstream.cli", "serve", str(tmp_path / "none")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert got.returncode == 2 and "rlstream: error:" in got.stderr


def test_samples_panel_shows_the_newest_kept_samples_flagged_first(fleet_out, tmp_path):
    import shutil

    import pyarrow as pa
    from deltalake import DeltaTable, write_deltalake

    out = tmp_path / "out"
    shutil.copytree(fleet_out.out, out)
    rid = fleet_out.run_ids["healthy"]
    table = DeltaTable(str(out / "samples")).to_pyarrow_table()
    kept = table.to_pylist()
    mine = [r for r in kept if r["run_id"] == rid]
    assert mine, "the simulated run's transcripts carry text: samples are kept"
    newest = max(r["step"] for r in mine)
    # one hostile, flagged sample at the newest step: shown first, escaped
    row = dict(mine[0], step=newest, attempt_id="hostile", flags=["early_exit"])
    row["returned"] = "<script>alert(1)</script>sys.exit(0)"
    one = pa.Table.from_pylist([row], schema=table.schema)
    write_deltalake(str(out / "samples"), one, mode="append")
    status, _, body = FleetPages(str(out)).handle("/run?id=" + quote(rid))
    html = body.decode()
    assert status == 200 and "no samples table" not in html
    panel = html[html.index('<table class="samples">') :]
    panel = panel[: panel.index("</table>")]
    cells = re.findall(r"<tr>((?:<td class='sample[^']*'>.*?</td>)+)</tr>", panel, re.S)
    assert cells and "early_exit" in cells[0]  # flagged first
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in panel and "<script>alert" not in html
    shown = [int(re.match(r"<td class='sample'>(\d+)</td>", c).group(1)) for c in cells]
    assert shown[0] == newest and all(s >= newest - 3 for s in shown)  # the newest steps
    assert len(cells) == min(len([r for r in mine if r["step"] >= min(shown)]) + 1, 20)


def _panel_rows(html):
    """The samples table's rows: step, kept, reward, flags, task, then the returned
    excerpt as shown (escaped, the search marked)."""
    panel = html[html.index('<table class="samples">') :]
    panel = panel[: panel.index("</table>")]
    cells = re.findall(r"<tr>((?:<td class='sample[^']*'>.*?</td>)+)</tr>", panel, re.S)
    rows = [re.findall(r"<td class='sample[^']*'>(.*?)</td>", c, re.S) for c in cells]
    for r in rows:
        m = re.search(r'<div class="excerpt" data-keep="r/[^"]*">(.*?)</div>', r[5], re.S)
        r[5] = m.group(1) if m else r[5]
    return rows


def test_samples_controls_step_kept_and_search_from_the_query(kept_out):
    out, rid, mine = kept_out
    pages_ = FleetPages(str(out))

    def page(**q):
        target = "/run?" + "&".join(
            f"{k}={quote(str(v), safe='')}" for k, v in {"id": rid, **q}.items()
        )
        status, _, body = pages_.handle(target)
        assert status == 200
        return body.decode()

    steps = sorted({r["step"] for r in mine}, reverse=True)
    html = page()
    # the step picker: the run's steps in the table, newest first
    picker = html[html.index('<select name="step"') :].split("</select>")[0]
    assert re.findall(r'<option value="(\d+)"', picker) == [str(s) for s in steps]
    # one step: its rows only (columns: step, kept, reward, flags, task_id, returned)
    older = steps[3]
    want = [r for r in mine if r["step"] == older]
    got = _panel_rows(page(step=older))
    assert len(got) == min(len(want), 20) and {c[0] for c in got} == {str(older)}
    assert f'<option value="{older}" selected>' in page(step=older)
    # kept filters at that step
    for kind in ("top", "bottom"):
        got = _panel_rows(page(step=older, kept=kind))
        n = sum(kind in r["kept"] for r in want)
        assert len(got) == n and all(kind in c[1].split(", ") for c in got)
    flagged = [r for r in mine if r["flags"] or "flagged" in r["kept"]]
    got = _panel_rows(page(kept="flagged"))
    assert got and all(c[3] for c in got) and len(got) <= len(flagged)
    assert any("early_exit" in c[3] for c in got)
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page(kept="flagged")
    # search: case-insensitive, in the newest 8 steps only; the hit escaped
    html = page(q="zebra-NEEDLE")
    got = _panel_rows(html)
    assert len(got) == 1 and got[0][5] == "a <mark>ZEBRA-Needle</mark> &lt;b&gt;here&lt;/b&gt;"
    assert f"steps read: {', '.join(map(str, steps[:8]))}; at most 8" in html
    got = _panel_rows(page(q="zebra-needle", step=steps[0] - 9))
    assert [c[5] for c in got] == ["<mark>zebra-needle</mark> too old"]  # found at its step
    assert "no kept sample matches" in page(q="no such text anywhere")
    # hostile query text is escaped back into the form, never markup
    html = page(q='"><script>x()</script>', kept="<b>", step="1; drop")
    assert "<script>x()" not in html and 'value="&quot;&gt;&lt;script&gt;x()' in html
    assert '<option value="" selected>all kept</option>' in html  # unknown kept: all


def test_a_sample_shows_its_whole_excerpt_what_it_was_sent_and_its_file(kept_out):
    """What a scanner flagged is often far into the text: the row shows the whole
    stored excerpt (escaped), not its head, and what the attempt was sent; a search
    marks where the text matched."""
    out, rid, mine = kept_out
    step = max(r["step"] for r in mine) - 1
    assert LONG_RETURNED.index("rm -f") > 800
    pages_ = FleetPages(str(out))
    html = pages_.handle(f"/run?id={quote(rid)}&step={step}&kept=flagged")[2].decode()
    rows = _panel_rows(html)
    assert [r[3] for r in rows] == ["test_tampering"]
    assert rows[0][5] == escape(LONG_RETURNED, quote=True)
    assert "Fix &lt;the&gt; bug in solution.py" in html and "sent (29 bytes)" in html
    assert "attempt long-flagged" in html and "transcripts/long-flagged.json" in html
    html = pages_.handle(f"/run?id={quote(rid)}&q={quote('RM -F tests/')}")[2].decode()
    rows = _panel_rows(html)
    assert len(rows) == 1 and "<mark>rm -f tests/</mark>test_solution.py" in rows[0][5]


def test_run_page_probe_diff_defaults_to_the_first_probe_task(kept_out):
    out, rid, mine = kept_out
    pages_ = FleetPages(str(out))
    probes: dict[str, set[int]] = {}
    for r in mine:
        if "probe" in r["kept"] and r["task_id"]:
            probes.setdefault(r["task_id"], set()).add(r["step"])
    two = {t: sorted(s) for t, s in probes.items() if len(s) >= 2}
    assert two, "the simulated run keeps probe tasks at several steps"
    task = min(two, key=lambda t: (two[t][0], t))
    html = pages_.handle("/run?id=" + quote(rid))[2].decode()
    assert f"Probe task {task}: step {two[task][0]} and step {two[task][-1]}" in html
    other = max(two)
    a, b = two[other][-1], two[other][0]
    q = f"/run?id={quote(rid)}&probe={quote(other)}&a={a}&b={b}"
    html = pages_.handle(q)[2].decode()
    assert f"Probe task {other}: step {a} and step {b}" in html
    left = html.split('<td class="probe-a">')[1].split("</td>")[0]
    text_a = next(r["returned"] for r in sorted(mine, key=lambda r: r["attempt_id"])
                  if r["task_id"] == other and r["step"] == a and "probe" in r["kept"])  # fmt: skip
    assert re.sub(r"</?(ins|del)>", "", left) == " ".join(
        escape(w, quote=True) for w in text_a.split()[:600]
    )


def test_every_status_badge_has_a_colour_on_the_page_and_in_the_report():
    # a badge with no rule of its own is white text on white: a count nobody sees
    from importlib import resources

    from rlstream.fleet.report import STYLE

    css = resources.files("rlstream.fleet").joinpath("static/live.css").read_text()
    for s in STATUS_ORDER:
        assert re.search(rf"\.s-{s}\{{background:#[0-9a-f]{{3,6}}\}}", css), s
        assert re.search(rf"\.s-{s}\{{background:#[0-9a-f]{{3,6}}\}}", STYLE), s


def test_run_page_band_heldout_quarantine_and_fleet_rejected(tmp_path):
    """A cohort of 4 runs (3 peers: a band, not sibling curves), held-out evaluations
    every 10 steps, two bad lines in one run's rollouts and one unreadable run folder:
    the run page shows the band, the held-out curve and the quarantine by reason; the
    fleet page the rejected folder, its reason, and a count for it."""
    from rlstream.pipeline.local import analyze_local
    from rlstream.simulate import SimConfig, simulate

    root, out = tmp_path / "runs", tmp_path / "out"
    labels = simulate(root, SimConfig(runs=4, steps=30, seed=6, cohort_size=4, eval_every=10))
    path = root / labels[0].run / "rollouts.jsonl"
    lines = path.read_bytes().splitlines(keepends=True)
    path.write_bytes(b"".join([*lines[:20], b'{"attempt_id": oops\n', b"[1, 2]\n", *lines[20:]]))
    bad = root / "broken"
    bad.mkdir()
    (bad / "run.json").write_text("{not json")
    analyze_local([str(root)], str(out))
    pages = FleetPages(str(out), refresh=0)
    status, _, body = pages.handle("/run?id=" + quote(labels[0].run_id))
    body = body.decode()
    assert status == 200
    assert "cohort median ± 2 robust sd (4 runs)" in body and "sibling " not in body
    assert "held-out " in body
    assert "2 quarantined lines (malformed_json: 1, not_an_object: 1)" in body
    status, _, body = pages.handle("/")
    body = body.decode()
    assert '<span class="s-rejected">1 rejected</span>' in body
    assert escape(str(bad)) in body and "bad_run_json" in body
