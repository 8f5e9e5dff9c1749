"""`rlstream compare`: the first step where runs part beyond their noise, checked on
synthetic curves with a known split, and the command on a small analyzed OUT."""

from __future__ import annotations

import json

import numpy as np
import pytest

from rlstream.cli import main
from rlstream.errors import EXIT_USAGE
from rlstream.fleet.compare import CompareConfig, divergence
from rlstream.pipeline.local import analyze_local
from rlstream.simulate import SimConfig, simulate


def _noisy(n: int, seed: int, scale: float = 1.0, split: int | None = None) -> list[float]:
    x = 0.01 * (1 + 0.1 * np.random.default_rng(seed).standard_normal(n))
    if split is not None:
        x[split:] *= scale
    return x.tolist()


def test_a_curve_three_times_its_siblings_parts_where_it_splits():
    steps = list(range(120))
    a, b = _noisy(120, 1), _noisy(120, 2, scale=3.0, split=60)
    step, vb, va = divergence(steps, a, b)
    cfg = CompareConfig()
    # The first divergent window ends a few steps after the split, at most one window on.
    assert 60 <= step <= 60 + cfg.window
    assert vb > 2 * va


def test_two_seeds_of_one_curve_never_part():
    steps = list(range(200))
    assert divergence(steps, _noisy(200, 3), _noisy(200, 4)) == (None, None, None)
    flat = [0.5] * 200
    assert divergence(steps, flat, flat) == (None, None, None)


def test_a_short_excursion_is_not_sustained():
    steps = list(range(100))
    a = _noisy(100, 5)
    b = _noisy(100, 6)
    for i in range(40, 44):
        b[i] *= 6
    assert divergence(steps, a, b)[0] is None


@pytest.fixture(scope="module")
def out(tmp_path_factory):
    base = tmp_path_factory.mktemp("compare")
    labels = simulate(base / "runs", SimConfig(runs=2, steps=30, seed=11, groups=2))
    analyze_local([str(base / "runs")], str(base / "out"))
    return str(base / "out"), [lb.run_id for lb in labels]


def test_compare_prints_every_figure_as_json(out, capsys):
    path, ids = out
    assert main(["compare", path, ids[0], ids[1], "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["reference"] == ids[0]
    got = {d["figure"]: d for d in doc["divergences"]}
    assert {"reward_mean", "mismatch_kl", "entropy_estimate"} <= set(got)
    assert all(d["run_id"] == ids[1] and 0 < d["common_steps"] <= 30 for d in got.values())
    assert got["entropy_estimate"]["common_steps"] == 30  # every step has transcripts
    assert main(["compare", path, ids[0], ids[1]]) == 0
    table = capsys.readouterr().out.splitlines()
    assert table[0].split()[:3] == ["figure", "run", "vs"]


def test_compare_an_unknown_run_is_a_usage_error(out, capsys):
    path, ids = out
    assert main(["compare", path, ids[0], "no-such-run"]) == EXIT_USAGE
    err = capsys.readouterr().err
    assert "no step rows for no-such-run" in err and "rlstream status" in err


def test_compare_a_missing_out_is_a_usage_error(tmp_path, capsys):
    assert main(["compare", str(tmp_path / "nope"), "a", "b"]) == EXIT_USAGE
    assert "does not exist" in capsys.readouterr().err


def _kl_rise(labels, out: str) -> tuple[list[float], list[float]]:
    """Both runs' mismatch_kl, read back from the steps table."""
    from rlstream.fleet.read import StepsTable

    t = StepsTable(out)
    return tuple(
        [v for v in t.run(lb.run_id, ["mismatch_kl"])["mismatch_kl"] if v is not None]
        for lb in labels
    )


def test_compare_finds_the_demo_kl_rise_at_the_default_window(tmp_path, capsys):
    # The demo's plan (seed 1, 50 steps): run 0 healthy, run 2 mismatch_kl_rising.
    labels = simulate(
        tmp_path / "runs",
        SimConfig(runs=3, steps=50, seed=1, scenarios=("healthy", "healthy", "mismatch_kl_rising")),
    )
    out = str(tmp_path / "out")
    analyze_local([str(tmp_path / "runs")], out)
    healthy, rising = labels[0], labels[2]
    ka, kb = _kl_rise([healthy, rising], out)
    assert kb[-1] / kb[0] > 100 and max(ka) / min(ka) < 2  # the rise the demo shows
    assert main(["compare", out, healthy.run_id, rising.run_id, "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    got = {d["figure"]: d for d in doc["divergences"]}
    kl = got["mismatch_kl"]
    assert kl["step"] is not None and kl["why"] is None and kl["source"] == "recomputed"
    assert kl["step"] < 45 and kl["value"] > 3 * kl["reference_value"]
    assert f"{rising.run_id} on mismatch_kl at step {kl['step']}" in doc["verdict"]
    # A figure that did not part says how close it came.
    assert got["completion_len_mean"]["step"] is None
    assert "noise" in got["completion_len_mean"]["why"]


def test_compare_finds_a_learning_trainers_stale_sampler_near_its_onset(tmp_path, capsys):
    from rlstream.simulate.learn import simulate_learn

    root = tmp_path / "runs"
    (healthy,) = simulate_learn(root, "healthy", runs=1, steps=80, seed=3)
    (stale,) = simulate_learn(root, "stale_sampler", runs=1, steps=80, seed=4)
    out = str(tmp_path / "out")
    analyze_local([str(root)], out)
    assert main(["compare", out, healthy.run_id, stale.run_id, "--json"]) == 0
    got = {d["figure"]: d for d in json.loads(capsys.readouterr().out)["divergences"]}
    cfg = CompareConfig()
    assert got["mismatch_kl"]["step"] is not None
    assert got["mismatch_kl"]["step"] <= stale.onset_step + cfg.window
    assert got["lag_mean"]["step"] is not None


def test_compare_with_too_few_common_steps_says_so_and_fails(out, capsys):
    path, ids = out  # 30 common steps
    assert main(["compare", path, ids[0], ids[1], "--sustain", "25"]) == 1
    captured = capsys.readouterr()
    lines = captured.out.splitlines()
    assert "too few common steps: 30 < --window + --sustain - 1 = 34" in captured.out
    assert lines[-1].startswith("nothing compared: at most 30 common steps")
    assert "lower --window or --sustain" in captured.err
    assert main(["compare", path, ids[0], ids[1], "--json", "--sustain", "25"]) == 1
    doc = json.loads(capsys.readouterr().out)
    assert doc["verdict"].startswith("nothing compared")
    assert all(d["step"] is None and d["why"] for d in doc["divergences"])


def test_compare_without_a_divergence_says_why(tmp_path, capsys):
    # Two siblings of one cohort: the same plan, other seeds.
    labels = simulate(tmp_path / "runs", SimConfig(runs=2, steps=40, seed=2, cohort_size=2))
    path = str(tmp_path / "out")
    analyze_local([str(tmp_path / "runs")], path)
    assert main(["compare", path, labels[0].run_id, labels[1].run_id]) == 0
    last = capsys.readouterr().out.splitlines()[-1]
    assert last.startswith("no divergence: no figure apart by more than --k 3 x noise")
