"""The report's Samples section: the newest steps' kept samples with flagged ones first
and open, a probe task at two steps with a word diff, escaped run text, and a run
without text saying why; rendered in headless Chromium with no script from run data."""

from __future__ import annotations

import json
import re

import pytest

from rlstream.fleet.report import write_report
from rlstream.fleet.report_samples import samples_section
from rlstream.fleet.sample_diff import word_diff
from rlstream.pipeline.local import analyze_local
from rlstream.simulate import SimConfig, simulate
from rlstream.simulate.text import SHORTCUTS
from tests.fleet.cdp import artifacts
from tests.fleet.test_report_browser import CHROMIUM, _chromium

HOSTILE = '<script>document.body.setAttribute("data-pwned", "s")</script><img src=x onerror=1>'


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    base = tmp_path_factory.mktemp("rsamples")
    cfg = SimConfig(runs=1, steps=24, scenarios=("transcript_hack_flags",), seed=8, groups=6)
    simulate(base / "runs", cfg)
    simulate(base / "bare", SimConfig(runs=1, steps=5, seed=1, trace="samples"))
    (run,) = [p for p in (base / "runs").iterdir() if p.is_dir()]
    last = 23
    for p in (run / "transcripts").glob("*.json"):
        doc = json.loads(p.read_text())
        if doc["step"] == last:
            doc["generations"][-1]["text"] += HOSTILE
            p.write_text(json.dumps(doc))
    analyze_local([str(base / "runs"), str(base / "bare")], str(base / "out"))
    path = base / "report.html"
    assert write_report(str(base / "out"), str(path)) == 2
    return base, path


def _flag_runs(run) -> list[tuple[int, int]]:
    """Runs of steps where at least 2 % of the trained attempts of reward >= 0.5 end
    with a shortcut, recounted from the transcript files (docs/schema.md)."""
    high: dict[int, list[bool]] = {}
    for p in (run / "transcripts").glob("*.json"):
        doc = json.loads(p.read_text())
        if doc["trains"] and (doc.get("reward") or 0) >= 0.5:
            text = doc["generations"][-1].get("text") or ""
            high.setdefault(doc["step"], []).append(any(s in text for s in SHORTCUTS))
    steps = sorted(s for s, v in high.items() if sum(v) / len(v) >= 0.02)
    runs: list[list[int]] = []
    for s in steps:
        if runs and runs[-1][1] == s - 1:
            runs[-1][1] = s
        else:
            runs.append([s, s])
    return [(a, b) for a, b in runs]


def test_reward_chart_marks_the_steps_scanners_flagged(report):
    base, path = report
    html = path.read_text()
    (run,) = [p for p in (base / "runs").iterdir() if p.is_dir()]
    want = _flag_runs(run)
    assert want  # the scenario hacks after its onset
    got = re.findall(r'class="flag" fill="#c0392b"><title>steps (\d+)-(\d+): ', html)
    assert [(int(a), int(b)) for a, b in got] == want
    assert "transcript scanners flag &gt;= 2% of the high-reward attempts" in html


def test_samples_section_lists_newest_steps_flagged_first_and_a_probe_diff(report):
    _, path = report
    html = path.read_text()
    assert html.count("<h3>Samples</h3>") == 2
    assert "<h4>Step 23</h4>" in html and "<h4>Step 22</h4>" in html
    sec = html.split("<h4>Step 23</h4>")[1].split("<h4>")[0]
    samples = sec.split('<details class="sample"')[1:]
    flagged = [s.startswith(" open") for s in samples]
    assert flagged == sorted(flagged, reverse=True)  # flagged (open) ones first
    assert ("Probe task" in html and "<del" in html) or "No probe task" in html
    assert "record no text" in html  # the run without text says so
    assert HOSTILE not in html and "&lt;script&gt;document.body" in html


def test_word_diff_marks_only_changed_words_and_escapes():
    left, right = word_diff("a b <c> d", "a x <c> d e", inline=True)
    assert left == 'a <del style="background:#fde0dc">b</del> &lt;c&gt; d'
    assert (
        right
        == 'a <ins style="background:#dcf5dc">x</ins> &lt;c&gt; d <ins style="background:#dcf5dc">e</ins>'
    )


@pytest.mark.skipif(CHROMIUM is None, reason="chromium not installed")
def test_samples_render_in_chromium_and_run_no_script(report, tmp_path):
    _, path = report
    dom = _chromium(tmp_path, "--dump-dom", path.as_uri()).stdout
    assert 'data-sortable="ready"' in dom
    assert "data-pwned=" not in dom.replace("data-pwned&quot;", "")
    assert '<img src="x"' not in dom
    assert dom.count('class="sample"') >= 8
    png = artifacts(tmp_path) / "report-samples.png"
    _chromium(tmp_path, "--window-size=1280,3200", f"--screenshot={png}", path.as_uri())
    assert png.stat().st_size > 10_000


def _row(step: int, attempt: str, reward, kept, flags) -> dict:
    return {
        "run_id": "r", "step": step, "attempt_id": attempt, "task_id": "t", "group_id": "g",
        "reward": reward, "trained": True, "length": 3, "stop_reason": "stop",
        "policy_version": step, "calls": 1, "kept": kept, "flags": flags, "sent": "q",
        "sent_bytes": 1, "returned": "sys.exit(0)", "returned_bytes": 11, "transcript": None,
    }  # fmt: skip


def test_samples_without_rewards_claim_no_clean_steps():
    """Transcripts without `reward`: flagged samples are kept unranked, and the section
    says no high-reward share is known, never that no step was flagged."""
    rows = [_row(5, "a1", None, ["flagged"], ["early_exit"]), _row(5, "a2", None, ["probe"], [])]
    html = samples_section(rows, [], not_evaluable=True)
    assert "were flagged by a scanner" not in html
    assert "the transcripts carry none" in html and "cannot be judged" in html
    ranked = [_row(5, "a1", 1.0, ["top"], []), _row(5, "a2", 0.0, ["bottom"], [])]
    assert "No step's high-reward attempts were flagged" in samples_section(ranked, [], False)
