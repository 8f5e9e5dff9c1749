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
