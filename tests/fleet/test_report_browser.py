"""The report in a real browser: headless Chromium (Debian's `chromium`, installed by
.ci/run) renders it with no network, shows the runs, and runs no script from run data; its
screenshot is kept (`cdp.artifacts`). Skipped only when chromium cannot be found."""

from __future__ import annotations

import subprocess
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from rlstream.fleet.report import write_report
from tests.fleet.cdp import CHROMIUM, FLAGS, artifacts
from tests.fleet.conftest import HOSTILE_ID

pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="chromium not installed")


def _chromium(tmp: Path, *args: str) -> subprocess.CompletedProcess:
    profile = tmp / f"profile-{len(list(tmp.glob('profile-*')))}"
    profile.mkdir()
    cmd = [str(CHROMIUM), *FLAGS, f"--user-data-dir={profile}", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=True)


def test_report_renders_in_chromium_without_running_run_data(fleet_out, tmp_path):
    report = tmp_path / "report.html"
    assert write_report(str(fleet_out.out), str(report)) == 4
    url = report.as_uri()

    dom = _chromium(tmp_path, "--dump-dom", url).stdout
    # Our sorting script ran (so scripts do run in this browser) ...
    assert 'data-sortable="ready"' in dom
    # ... and none from run data did: no attribute set, no element created by them.
    assert "data-pwned=" not in dom.replace("data-pwned&quot;", "")
    assert '<img src="x"' not in dom and "<svg onload" not in dom
    for run_id in fleet_out.run_ids.values():
        if run_id != HOSTILE_ID:
            assert run_id in dom
    # The hostile run id is shown as text (escaped again when the DOM is serialized).
    assert '&lt;script&gt;document.body.setAttribute("data-pwned", "id")&lt;/script&gt;' in dom
    assert dom.count('<tr><td class="name" data-v=') == 4

    png = artifacts(tmp_path) / "report-1280.png"
    _chromium(tmp_path, "--window-size=1280,1600", f"--screenshot={png}", url)
    img = Image.open(png).convert("RGB")
    assert img.size == (1280, 1600)
    px = np.asarray(img, dtype=np.int16).reshape(-1, 3)
    non_white = float((px != 255).any(axis=1).mean())
    assert non_white > 0.05, f"screenshot nearly blank ({non_white:.1%} non-white)"
    # the red "critical" badge of the overview is on screen
    assert (np.abs(px - [0xC0, 0x39, 0x2B]).max(axis=1) < 8).sum() > 50
