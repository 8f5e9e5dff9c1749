"""Prometheus: the exposition text, the endpoint scraped while `watch` runs on Ray,
and the example alert rules in deploy/prometheus/rules.yml."""

from __future__ import annotations

import re
import shutil
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
import yaml

from rlstream.config import PipelineConfig
from rlstream.fleet.prometheus import METRIC_NAMES, MetricsExporter, render_metrics
from rlstream.runtime.driver import RuntimeConfig
from rlstream.runtime.driver import run as run_pipeline
from rlstream.simulate import SimConfig, simulate

RULES = Path(__file__).parents[2] / "deploy" / "prometheus" / "rules.yml"
SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{.*\})? (\S+)$")


def parse(text: str) -> dict[tuple[str, str], float]:
    """{(name, labels text): value}; fails on any line that is not valid exposition."""
    out = {}
    for line in text.splitlines():
        if line.startswith("# HELP ") or line.startswith("# TYPE "):
            continue
        m = SAMPLE.match(line)
        assert m, f"bad exposition line: {line!r}"
        assert m.group(1) in METRIC_NAMES, m.group(1)
        out[(m.group(1), m.group(2) or "")] = float(m.group(3))
    return out


def _latest(run_id, status, firing=(), **kw):
    return {
        "run_id": run_id,
        "status": status,
        "last_step": 10,
        "last_activity": 1000.0,
        "findings": [
            {"code": c, "severity": s, "state": "firing", "since_step": 2, "message": "x"}
            for c, s in firing
        ],
        **kw,
    }


def test_render_values_labels_and_escaping():
    text = render_metrics(
        [
            _latest('we"ird\\id\nx', "critical", [("degenerate_outputs", "critical")]),
            _latest("ok", "finished", mismatch_kl=0.25, reward_mean=None),
        ],
        {"bytes": 1234, "transcripts": 7, "polls": 3, "last_poll_started": 1090.0},
        now=1100.0,
    )
    m = parse(text)
    weird = 'run_id="we\\"ird\\\\id\\nx"'
    assert m[("rlstream_run_status", "{" + weird + ',status="critical"}')] == 1
    assert (
        m[("rlstream_run_finding", "{" + weird + ',code="degenerate_outputs",severity="critical"}')]
        == 1
    )
    assert m[("rlstream_run_seconds_since_update", '{run_id="ok"}')] == 100.0
    assert m[("rlstream_run_mismatch_kl", '{run_id="ok"}')] == 0.25
    assert ("rlstream_run_reward_mean", '{run_id="ok"}') not in m  # null: no sample
    assert m[("rlstream_run_finished", '{run_id="ok"}')] == 1
    assert m[("rlstream_runs", '{status="critical"}')] == 1
    assert m[("rlstream_pipeline_bytes_processed_total", "")] == 1234
    assert m[("rlstream_pipeline_files_processed_total", "")] == 7
    assert m[("rlstream_pipeline_data_age_seconds", "")] == 10.0
    assert text.count("# TYPE rlstream_run_status gauge") == 1


def test_cohort_info_and_unlike_peers_series():
    text = render_metrics(
        [
            _latest("odd", "warning", [("unlike_peers", "warning")], cohort="sweep-a"),
            _latest("sib", "healthy", cohort="sweep-a"),
            _latest("old", "healthy"),  # written before cohorts: no cohort series
        ],
        {},
        now=1100.0,
    )
    m = parse(text)
    assert m[("rlstream_run_cohort", '{run_id="odd",cohort="sweep-a"}')] == 1
    assert m[("rlstream_run_unlike_peers", '{run_id="odd",cohort="sweep-a"}')] == 1
    assert m[("rlstream_run_unlike_peers", '{run_id="sib",cohort="sweep-a"}')] == 0
    assert not [
        k for k in m if k[0].startswith("rlstream_run_") and '"old"' in k[1] and "cohort" in k[0]
    ]
    assert text.count("# TYPE rlstream_run_cohort gauge") == 1


def test_run_cap_keeps_the_worst_runs():
    rows = [_latest(f"h{i}", "healthy") for i in range(5)] + [_latest("bad", "critical")]
    m = parse(render_metrics(rows, {}, now=1000.0, max_runs=2))
    exported = {k[1] for k in m if k[0] == "rlstream_run_last_step"}
    assert exported == {'{run_id="bad"}', '{run_id="h0"}'}
    assert m[("rlstream_runs_not_exported", "")] == 4
    assert m[("rlstream_runs", '{status="healthy"}')] == 5


def _scrape(url: str) -> str:
    with urllib.request.urlopen(url, timeout=10) as r:
        assert r.headers["Content-Type"].startswith("text/plain; version=0.0.4")
        return r.read().decode()


@pytest.mark.ray
def test_metrics_scraped_while_watch_runs(ray_session, tmp_path):
    root, out = tmp_path / "runs", tmp_path / "out"
    labels = simulate(
        root, SimConfig(runs=2, steps=40, scenarios=("healthy", "entropy_collapse"), seed=1)
    )
    exporter = MetricsExporter(str(out), port=0, min_refresh_seconds=0).start()
    host, port = exporter.address
    assert host == "127.0.0.1"
    url = f"http://{host}:{port}/metrics"
    scraped: list[str] = []

    deadline = time.monotonic() + 300

    def stop() -> bool:
        # Scrape from the watch loop once a commit has written every run's health.
        assert time.monotonic() < deadline, "no commit with both runs within 300 s"
        if exporter.pipeline.get("last_commit") is None:
            return False
        text = _scrape(url)
        if text.count("rlstream_run_last_step{") < 2:
            return False
        scraped.append(text)
        return True

    try:
        cfg = PipelineConfig(poll_seconds=0.2, commit_seconds=0.5)
        run_pipeline(
            [str(root)], str(out), cfg, RuntimeConfig(workers=2), watch=True, stop=stop,
            metrics=exporter,
        )  # fmt: skip
        with pytest.raises(urllib.error.HTTPError) as err:
            urllib.request.urlopen(f"http://{host}:{port}/other", timeout=10)
        assert err.value.code == 404
    finally:
        exporter.close()
    m = parse(scraped[0])
    ids = {lab.scenario: lab.run_id for lab in labels}
    for rid in ids.values():
        assert m[("rlstream_run_last_step", f'{{run_id="{rid}"}}')] == 39
    sick = ids["entropy_collapse"]
    assert (
        m[
            (
                "rlstream_run_finding",
                f'{{run_id="{sick}",code="entropy_collapse",severity="warning"}}',
            )
        ]
        == 1
    )
    assert m[("rlstream_run_findings_firing", f'{{run_id="{ids["healthy"]}"}}')] == 0
    assert m[("rlstream_pipeline_runs", "")] == 2
    assert m[("rlstream_pipeline_workers", "")] == 2
    assert m[("rlstream_pipeline_files_processed_total", "")] == sum(
        len(list((root / lab.run / "transcripts").iterdir())) for lab in labels
    )
    assert m[("rlstream_pipeline_bytes_processed_total", "")] > 100_000
    assert m[("rlstream_pipeline_step_rows_total", "")] == 80
    assert m[("rlstream_pipeline_quarantined_total", "")] == 0
    assert m[("rlstream_pipeline_worker_restarts_total", "")] == 0
    assert m[("rlstream_pipeline_polls_total", "")] >= 1
    assert 0 <= m[("rlstream_pipeline_data_age_seconds", "")] < 30


def test_alert_rules_are_valid_and_use_exported_series():
    doc = yaml.safe_load(RULES.read_text())
    rules = [r for g in doc["groups"] for r in g["rules"]]
    severities = {r["labels"]["severity"] for r in rules}
    assert {"critical", "warning", "info"} <= severities
    names = {r["alert"] for r in rules}
    assert "RlstreamRunStoppedReporting" in names
    for r in rules:
        assert set(r) == {"alert", "expr", "for", "labels", "annotations"}, r["alert"]
        assert re.fullmatch(r"\d+[smh]", r["for"]), r["alert"]
        assert r["annotations"]["summary"]
        used = set(re.findall(r"\brlstream_[a-z_]+", r["expr"]))
        assert used and used <= METRIC_NAMES, (r["alert"], used - METRIC_NAMES)
        assert r["expr"].count("(") == r["expr"].count(")")
    for sev in ("critical", "warning", "info"):
        assert any(f'severity="{sev}"' in r["expr"] for r in rules), sev
    promtool = shutil.which("promtool")
    if promtool:
        res = subprocess.run(
            [promtool, "check", "rules", str(RULES)], capture_output=True, text=True, timeout=60
        )
        assert res.returncode == 0, res.stdout + res.stderr
        assert f"SUCCESS: {len(rules)} rules found" in res.stdout
        res = subprocess.run(
            [promtool, "test", "rules", str(RULES.with_name("rules_test.yml"))],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert res.returncode == 0, res.stdout + res.stderr


def test_every_family_is_one_group_for_a_strict_parser():
    # prometheus_client's parser starts a new family whenever a sample's name differs
    # from the previous one: a family split in two groups comes back as two families.
    from prometheus_client.parser import text_string_to_metric_families

    latest = [
        _latest(
            f"r{i}",
            s,
            [("degenerate_outputs", "critical")] if s == "critical" else [],
            mismatch_kl=0.1 * i,
            reward_mean=0.5,
        )
        for i, s in enumerate(["critical", "healthy", "finished", "warning"])
    ]
    text = render_metrics(latest, {"bytes": 1, "polls": 1}, now=1100.0)
    families = list(text_string_to_metric_families(text))
    names = [f.name for f in families]
    assert len(names) == len(set(names)) == text.count("# TYPE ")
    status = next(f for f in families if f.name == "rlstream_run_status")
    assert sorted(s.labels["run_id"] for s in status.samples) == ["r0", "r1", "r2", "r3"]
    kl = next(f for f in families if f.name == "rlstream_run_mismatch_kl")
    assert {s.labels["run_id"]: round(s.value, 6) for s in kl.samples} == {
        "r0": 0.0,
        "r1": 0.1,
        "r2": 0.2,
        "r3": 0.3,
    }
