"""deploy/grafana and deploy/alertmanager are checked against what rlstream exports
and against themselves: the dashboard is valid JSON whose panels query only metric
names `fleet.prometheus` emits, with PromQL that promtool parses (skipped without
promtool), on a grid that fits; the provisioning files load; the Alertmanager
example routes every severity of deploy/prometheus/rules.yml to a receiver it
defines, Slack receivers reading the webhook from a file."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from rlstream.fleet.prometheus import METRIC_NAMES

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
DASH = json.loads((DEPLOY / "grafana" / "rlstream-fleet.json").read_text())
PANELS = [p for p in DASH["panels"] if p["type"] != "row"]


def _exprs() -> list[str]:
    return [t["expr"] for p in PANELS for t in p["targets"]]


def test_dashboard_queries_only_exported_metrics():
    assert len(PANELS) >= 15
    used = {m for e in _exprs() for m in re.findall(r"\brlstream_[a-z_]+", e)}
    assert used and used <= METRIC_NAMES, used - METRIC_NAMES
    # the run variable lists the runs rlstream exports
    (var,) = [v for v in DASH["templating"]["list"] if v["name"] == "run_id"]
    assert re.findall(r"rlstream_[a-z_]+", var["definition"])[0] in METRIC_NAMES
    # every panel and target reads the dashboard's Prometheus variable
    (ds,) = [v for v in DASH["templating"]["list"] if v["type"] == "datasource"]
    assert ds["query"] == "prometheus"
    for p in PANELS:
        assert p["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
        assert all(t["datasource"] == p["datasource"] for t in p["targets"])
    # a fleet part and a run part
    assert [p["title"] for p in DASH["panels"] if p["type"] == "row"] == ["Fleet", "Run"]


def test_dashboard_grid_fits_and_ids_are_unique():
    ids = [p["id"] for p in DASH["panels"]]
    assert len(ids) == len(set(ids))
    cells: set[tuple[int, int]] = set()
    for p in DASH["panels"]:
        g = p["gridPos"]
        assert g["x"] >= 0 and g["x"] + g["w"] <= 24
        mine = {
            (x, y) for x in range(g["x"], g["x"] + g["w"]) for y in range(g["y"], g["y"] + g["h"])
        }
        assert not mine & cells, p["title"]
        cells |= mine


@pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool not installed")
def test_dashboard_promql_parses(tmp_path):
    rules = {
        "groups": [
            {
                "name": "dashboard",
                "rules": [
                    {"record": f"rlstream:panel_{i}", "expr": e.replace("$run_id", ".*")}
                    for i, e in enumerate(_exprs())
                ],
            }
        ]
    }
    f = tmp_path / "panels.yml"
    f.write_text(yaml.safe_dump(rules))
    got = subprocess.run(["promtool", "check", "rules", str(f)], capture_output=True, text=True)
    assert got.returncode == 0, got.stdout + got.stderr
    assert f"SUCCESS: {len(_exprs())} rules found" in got.stdout


def test_grafana_provisioning_loads():
    ds = yaml.safe_load((DEPLOY / "grafana/provisioning/datasources/prometheus.yaml").read_text())
    (src,) = ds["datasources"]
    assert src["type"] == "prometheus" and src["url"].startswith("http")
    dash = yaml.safe_load((DEPLOY / "grafana/provisioning/dashboards/rlstream.yaml").read_text())
    (prov,) = dash["providers"]
    assert prov["type"] == "file" and prov["options"]["path"].startswith("/")


def test_alertmanager_routes_every_rule_severity_to_a_defined_receiver():
    am = yaml.safe_load((DEPLOY / "alertmanager" / "alertmanager.yml").read_text())
    names = {r["name"] for r in am["receivers"]}
    route = am["route"]
    assert route["receiver"] in names
    routed = {}
    for r in route["routes"]:
        assert r["receiver"] in names
        for m in r["matchers"]:
            key, _, value = (s.strip() for s in m.partition("="))
            if key == "severity":
                routed[value.strip('"')] = r["receiver"]
    rules = yaml.safe_load((DEPLOY / "prometheus" / "rules.yml").read_text())
    severities = {r["labels"]["severity"] for g in rules["groups"] for r in g["rules"]}
    assert severities <= routed.keys(), severities - routed.keys()
    assert routed["critical"] != routed["warning"]
    for rec in am["receivers"]:
        for slack in rec.get("slack_configs", []):
            assert "api_url" not in slack and slack["api_url_file"].startswith("/")
            assert slack["send_resolved"] is True and slack["channel"].startswith("#")
    assert set(route["group_by"]) >= {"run_id"}
