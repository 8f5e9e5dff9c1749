"""A run's cohort (rlstream.health.cohort) and the peers' verdict (health.peers): pure."""

from __future__ import annotations

import pytest

from rlstream.errors import ConfigError
from rlstream.health import rules_from_dict
from rlstream.health.cohort import cohort_of, fingerprint, parse_cohort_rules
from rlstream.health.config_peers import CohortsConfig, UnlikePeers
from rlstream.health.peers import band, judge

RECIPE = {
    "seed": 1,
    "run_name": "lr3e-6-seed1",
    "training": {"learning_rate": 3e-6, "max_steps": 300, "output_dir": "/ckpt/seed1"},
    "wandb": {"run_id": "abc"},
}


def _with(**changes):
    out = {**RECIPE, "training": dict(RECIPE["training"])}
    for k, v in changes.items():
        if k.startswith("training."):
            out["training"][k.split(".", 1)[1]] = v
        else:
            out[k] = v
    return out


def test_seeds_names_and_paths_do_not_split_a_cohort_a_learning_rate_does():
    base = fingerprint(RECIPE)
    assert base.startswith("cfg-") and len(base) == 14
    same = _with(seed=7, run_name="lr3e-6-seed7", wandb={"run_id": "zzz"})
    assert fingerprint(_with(**{"training.output_dir": "/ckpt/seed7"}, **same)) == base
    assert fingerprint(_with(**{"training.learning_rate": 1e-6})) != base
    # A dotted path is dropped only there; a bare name at any depth.
    cfg = CohortsConfig(ignore_keys="training.max_steps")
    assert fingerprint(_with(**{"training.max_steps": 10}), cfg) == fingerprint(RECIPE, cfg)
    assert fingerprint(_with(seed=2), cfg) != fingerprint(RECIPE, cfg)


def test_an_explicit_key_wins_then_the_command_lines_rules_then_the_fingerprint():
    rules = parse_cohort_rules(["base=*/sweep-a/*", "other=r9"])
    assert cohort_of("r1", "s3://b/sweep-a/r1", {"experiment": "grader-v2"}, rules=rules) == (
        "grader-v2"
    )
    assert cohort_of("r1", "s3://b/x", {"tags": ["rl", "v2"]}) == "rl+v2"
    assert cohort_of("r1", "s3://b/sweep-a/r1", RECIPE, rules=rules) == "base"
    assert cohort_of("r9", "/runs/r9", RECIPE, rules=rules) == "other"
    assert cohort_of("r2", "/runs/r2", RECIPE, rules=rules) == fingerprint(RECIPE)


@pytest.mark.parametrize("spec", ["noequals", "=glob", "name=", " = "])
def test_a_malformed_cohort_rule_is_a_usage_error(spec):
    with pytest.raises(ConfigError, match="NAME=GLOB"):
        parse_cohort_rules([spec])


def test_rules_toml_tables_and_their_checks():
    r = rules_from_dict({"unlike_peers": {"k": 8}, "cohorts": {"ignore_keys": "seed"}})
    assert r.unlike_peers.k == 8.0 and r.cohorts.ignore_keys == "seed"
    with pytest.raises(ConfigError, match="window_steps"):
        rules_from_dict({"unlike_peers": {"window_steps": 3}})
    with pytest.raises(ConfigError, match="unknown key"):
        rules_from_dict({"cohorts": {"nope": 1}})


def test_judge_needs_min_peers_and_names_the_band():
    cfg = UnlikePeers()
    assert judge({"kl": 0.03}, {"kl": [0.01, 0.011]}, cfg) is None
    v = judge({"kl": 0.03, "reward": 0.5}, {"kl": [0.01, 0.011, 0.0095], "reward": [0.5] * 3}, cfg)
    assert v.holds and v.message.startswith("kl 0.03 vs its 3 peers' median 0.01 (band ")
    # The runs' own noise widens the band: the same gap is then within it.
    assert not judge({"kl": 0.03}, {"kl": [0.01, 0.011, 0.0095]}, cfg, noise={"kl": 0.005}).holds
    # Hysteresis: while active the margin relaxes (6 x 0.8 = 4.8 deviations).
    near = {"kl": 0.01 + 5.5 * 0.001}
    assert not judge(near, {"kl": [0.01] * 3}, cfg).holds
    assert judge(near, {"kl": [0.01] * 3}, cfg, active=True).holds


def test_band_quantiles():
    b = band([1.0, 2.0, 3.0, 4.0, 100.0])
    assert b["n"] == 5 and b["median"] == 3.0 and b["p50"] == 3.0
    assert b["p10"] == pytest.approx(1.4) and b["p90"] == pytest.approx(61.6)
    assert b["mad"] == pytest.approx(1.4826)


def test_the_model_splits_a_cohort_a_run_name_inside_logging_does_not():
    a = {**RECIPE, "model": {"name": "Qwen2.5-1.5B"}, "logging": {"name": "seed1"}}
    b = {**RECIPE, "model": {"name": "SmolLM2-1.7B"}, "logging": {"name": "seed1"}}
    c = {**RECIPE, "model": {"name": "Qwen2.5-1.5B"}, "logging": {"name": "seed2"}, "seed": 2}
    assert fingerprint(a) != fingerprint(b)
    assert fingerprint(a) == fingerprint(c)
    # Inside a kept section only the bare names are kept; a dotted path still goes.
    cfg = CohortsConfig(ignore_keys="name,model.revision")
    d = {**a, "model": {"name": "Qwen2.5-1.5B", "revision": "r2"}}
    assert fingerprint(d, cfg) == fingerprint({**a, "model": {"name": "Qwen2.5-1.5B"}}, cfg)
    assert fingerprint(a, CohortsConfig(keep_under="")) == fingerprint(
        b, CohortsConfig(keep_under="")
    )


def test_simulated_runs_of_two_models_are_two_cohorts_in_out(tmp_path):
    """End to end, on the simulator's run.json (its config has `model.name`): two runs
    of one recipe and another model's run analysed in-process land in two cohorts."""
    import json

    from rlstream.fleet.read import read_latest
    from rlstream.pipeline.local import analyze_local
    from rlstream.simulate import SimConfig, simulate

    simulate(tmp_path / "runs", SimConfig(runs=3, steps=4, seed=11, groups=2))
    runs = sorted(p for p in (tmp_path / "runs").iterdir() if (p / "run.json").exists())
    docs = [json.loads((r / "run.json").read_text()) for r in runs]
    base = docs[0]["config"]
    for i, (r, doc) in enumerate(zip(runs, docs, strict=True)):
        cfg = json.loads(json.dumps(base))
        cfg["seed"] = 100 + i  # seeds vary within a sweep
        if i == 2:
            cfg["model"]["name"] = "another-model-7b"
        doc["config"] = cfg
        (r / "run.json").write_text(json.dumps(doc))
    analyze_local([str(tmp_path / "runs")], str(tmp_path / "out"))
    cohort = {r["run_id"]: r["cohort"] for r in read_latest(str(tmp_path / "out"))}
    ids = [d["run_id"] for d in docs]
    assert cohort[ids[0]] == cohort[ids[1]] != cohort[ids[2]]
    assert cohort[ids[0]] == fingerprint(base | {"seed": 0})
