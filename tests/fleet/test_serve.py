"""`rlstream serve` over HTTP: the pages of an analyzed OUT (one hostile run), the
version endpoint's ETag/304, the security headers, the bounded reads, and the command
bound to 127.0.0.1. The browser tests are in test_serve_browser.py."""

from __future__ import annotations

import http.client
import re
import subprocess
import sys
import urllib.request
from urllib.parse import quote

import pytest

from rlstream.fleet.read import read_latest
from rlstream.fleet.status import STATUS_ORDER
from rlstream.fleet.web import CSP, FleetPages, PageServer
from tests.fleet.conftest import HOSTILE_ID


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
    # the timeline: one bar per placed finding, from its since_step to the last step
    latest = {r["run_id"]: r for r in read_latest(str(fleet_out.out))}
    placed = sorted(
        (f for f in latest[rid]["findings"] if f["since_step"] is not None),
        key=lambda f: f["since_step"],
    )
    bars = re.findall(r'<rect x="([\d.]+)" y="\d+" width="([\d.]+)" height="11"', body)
    assert len(bars) == len(placed) >= 1
    f = placed[0]
    x0 = 150 + f["since_step"] / latest[rid]["last_step"] * 740
    assert (
        abs(float(bars[0][0]) - x0) < 0.06
        and abs(float(bars[0][0]) + float(bars[0][1]) - 890) < 0.1
    )
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


def test_compare_page_and_unknown_run(server, fleet_out):
    srv, _ = server
    a, b = fleet_out.run_ids["healthy"], fleet_out.run_ids["mismatch_kl_rising"]
    status, _, body = _get(srv, f"/compare?id={quote(a)}&id={quote(b)}")
    assert status == 200
    assert body.count("<tr><td>") == 8  # one row per figure of `compare`
    assert "mismatch_kl" in body
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
    cells = re.findall(r"<tr>((?:<td class='sample'>.*?</td>)+)</tr>", panel)
    assert cells and "early_exit" in cells[0]  # flagged first
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in panel and "<script>alert" not in html
    shown = [int(re.match(r"<td class='sample'>(\d+)</td>", c).group(1)) for c in cells]
    assert shown[0] == newest and all(s >= newest - 3 for s in shown)  # the newest steps
    assert len(cells) == min(len([r for r in mine if r["step"] >= min(shown)]) + 1, 20)
