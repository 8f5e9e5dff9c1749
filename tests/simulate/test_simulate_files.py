"""The simulator writes the run format: files, fields, determinism, labels."""

from __future__ import annotations

import re
from pathlib import Path

import orjson
import pytest

from rlstream.simulate import SCENARIOS, SimConfig, simulate
from rlstream.simulate.cli import config_from_args, main
from tests.simulate import simreader as rd
from tests.simulate.conftest import SEED

ID = re.compile(r"^[A-Za-z0-9._-]{1,128}$")


def tree(root: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()
    }


def labels(root: Path) -> dict:
    return orjson.loads((root / "labels.json").read_bytes())


def test_same_seed_gives_identical_bytes(tmp_path: Path) -> None:
    cfg = SimConfig(
        runs=3, steps=8, scenarios=("healthy", "stalled", "degenerate_outputs"), seed=11, topk=3
    )
    simulate(tmp_path / "a", cfg)
    simulate(tmp_path / "b", cfg)
    a, b = tree(tmp_path / "a"), tree(tmp_path / "b")
    assert len(a) > 3 * 8 * 16 * 0.5  # transcripts, not just a few files
    assert a.keys() == b.keys()
    assert [k for k in a if a[k] != b[k]] == []
    simulate(tmp_path / "c", SimConfig(**{**_fields(cfg), "seed": 12}))
    c = tree(tmp_path / "c")
    assert c["run-000-healthy/steps.jsonl"] != a["run-000-healthy/steps.jsonl"]


def _fields(cfg: SimConfig) -> dict:
    return {f: getattr(cfg, f) for f in cfg.__dataclass_fields__}


def test_every_scenario_writes_all_files_and_a_label(all_scenarios: Path) -> None:
    lab = labels(all_scenarios)
    assert lab["format_version"] == 1 and lab["seed"] == SEED
    assert [r["scenario"] for r in lab["runs"]] == list(SCENARIOS)
    for i, r in enumerate(lab["runs"]):
        assert r["run"] == f"run-{i:03d}-{r['scenario']}"
        d = all_scenarios / r["run"]
        assert not (d / "labels.json").exists()
        run = orjson.loads((d / "run.json").read_bytes())
        assert run["run_id"] == r["run_id"] and run["format_version"] == 1
        assert rd.steps(d), r["run"]
        assert rd.read_jsonl(d / "rollouts.jsonl"), r["run"]
        assert any((d / "transcripts").iterdir()), r["run"]
        if r["scenario"] == "healthy":
            assert (r["onset_step"], r["expected_codes"]) == (None, [])
        elif r["scenario"] in ("tasks_too_hard", "tasks_too_easy"):
            assert (r["onset_step"], r["expected_codes"]) == (0, [r["scenario"]])
        else:
            assert 7 <= r["onset_step"] <= 12  # 40% of 24 steps +- 8%
            assert r["expected_codes"] == [r["scenario"]]


def test_run_json_config_and_finish(all_scenarios: Path) -> None:
    for r in labels(all_scenarios)["runs"]:
        d = all_scenarios / r["run"]
        run = orjson.loads((d / "run.json").read_bytes())
        cfg = run["config"]
        assert cfg["training"]["max_steps"] == 24
        assert set(cfg) == {"training", "rollout", "sampling", "output", "model"}
        assert cfg["model"]["vocab_size"] == 32000
        steps = rd.steps(d)
        if r["scenario"] == "stalled":
            assert "finished_at" not in run
            assert [s["step"] for s in steps] == list(range(r["onset_step"]))
        else:
            assert [s["step"] for s in steps] == list(range(24))
            assert run["finished_at"] > steps[-1]["time"] > run["created_at"]


def test_attempt_ids_and_files_agree(all_scenarios: Path) -> None:
    for r in labels(all_scenarios)["runs"]:
        d = all_scenarios / r["run"]
        rollouts = rd.read_jsonl(d / "rollouts.jsonl")
        ids = [x["attempt_id"] for x in rollouts]
        assert len(set(ids)) == len(ids)
        assert all(ID.match(i) for i in ids)
        names = sorted(p.name for p in (d / "transcripts").iterdir())
        assert all(n.endswith(".json") for n in names)  # no .tmp left behind
        on_disk = {n[:-5] for n in names}
        if r["scenario"] == "stalled":
            # The hung step's first attempts finished; their rollouts lines never came.
            assert set(ids) < on_disk and len(on_disk - set(ids)) == 5
        else:
            assert set(ids) == on_disk
        times = [x["time"] for x in rollouts]
        assert times == sorted(times)


def test_rollout_records(healthy: Path) -> None:
    recs = rd.read_jsonl(healthy / "run-000-healthy" / "rollouts.jsonl")
    keys = [
        "attempt_id", "group_id", "task_id", "step", "policy_version", "reward",
        "trained", "discard_reason", "metadata", "time",
    ]  # fmt: skip
    assert all(list(r) == keys for r in recs)
    for r in recs:
        assert r["trained"] == (r["discard_reason"] is None)
        if r["discard_reason"] and r["discard_reason"].startswith(("rollout_", "grading_")):
            assert r["reward"] is None and "passed_tests" not in r["metadata"]
        else:
            assert 0.0 <= r["reward"] <= 1.0
            assert r["metadata"]["passed_tests"] == (r["reward"] == 1.0)
        assert r["group_id"].startswith("g") and r["task_id"].startswith("t")
        assert r["policy_version"] == r["step"]  # sync mode


def test_heartbeats_only_with_progress_config(all_scenarios: Path) -> None:
    seen = 0
    for r in labels(all_scenarios)["runs"]:
        d = all_scenarios / r["run"]
        cfg = orjson.loads((d / "run.json").read_bytes())["config"]
        beats = [x for x in rd.read_jsonl(d / "steps.jsonl") if "step" not in x]
        if "progress_every_seconds" in cfg["output"]:
            seen += 1
            assert beats
            assert all(b["progress"]["phase"] == "sampling" for b in beats)
            assert all(0 <= b["progress"]["completed_groups"] <= 4 for b in beats)
        else:
            assert beats == []
    assert 0 < seen < len(SCENARIOS)


def test_cli_runs_and_refuses_to_overwrite(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    argv = [str(tmp_path), "--runs", "2", "--steps", "3", "--scenario", "healthy"]
    argv += ["--scenario", "stalled", "--seed", "5", "--trace", "samples"]
    assert main(argv) == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "labels.json", "run-000-healthy", "run-001-stalled",
    ]  # fmt: skip
    assert main(argv) == 2
    assert "already exists" in capsys.readouterr().err
    assert main([str(tmp_path / "x"), "--scenario", "nope"]) == 2


def test_cli_scenario_all_gives_one_run_each() -> None:
    import argparse

    from rlstream.simulate.cli import add_arguments

    p = argparse.ArgumentParser()
    add_arguments(p)
    cfg = config_from_args(p.parse_args(["/tmp/x", "--scenario", "all", "--topk", "5"]))
    assert cfg.scenarios == SCENARIOS and cfg.runs == len(SCENARIOS) and cfg.topk == 5
    cfg = config_from_args(p.parse_args(["/tmp/x"]))
    assert (cfg.runs, cfg.steps, cfg.scenarios, cfg.groups, cfg.group_size) == (
        4, 50, ("healthy",), 4, 4,
    )  # fmt: skip
