"""The five trackers through the whole pipeline: every fixture run (written by the real
libraries) found under one ROOT beside the others, read to Delta tables, and checked
against the expected files (what each library's own reader returned, `gen_*.py`).

The expectation is rebuilt here from those files and docs/formats.md only: per step
and key the newest point wins (a restart re-logging a step), non-finite values are
left out of the row and quarantined with their step, and a trainer's documented keys
land in the documented columns; everything else in `reported_other`/`reported_eval`.
"""

from __future__ import annotations

import math
import shutil
from pathlib import Path

import pytest

from rlstream.pipeline.local import analyze_local
from tests.formats.trackers.helpers import FIXTURES, expected
from tests.formats.trainer_runs import table

# docs/formats.md, "Trackers": trainer key -> steps column, for the keys these runs log.
COLUMNS = {
    "verl": {
        "critic/score/mean": "reported_reward_mean_with_unusable",
        "response_length/mean": "reported_completion_len_mean",
        "actor/entropy": "reported_entropy_estimate",
    },
    "trl": {"train/reward": "reported_reward_mean_with_unusable"},
    None: {},
}


def copy_fixtures(root: Path) -> Path:
    """Every fixture run under one ROOT, mixed (MLflow's file store two levels up, so
    its runs sit within discovery's depth)."""
    runs = root / "runs"
    shutil.copytree(FIXTURES, runs, symlinks=True, ignore=shutil.ignore_patterns("*.py", "*.json"))
    shutil.move(runs / "mlflow" / "files" / "mlruns", runs / "mlruns")
    return runs


def newest(points) -> tuple[dict[int, dict[str, float]], set[tuple[int, str]]]:
    """{step: {key: value}} from [step, time, key, value] points, the latest time
    winning (ties: the later point), and the (step, key) whose value is not finite."""
    out: dict[int, dict[str, float]] = {}
    bad: set[tuple[int, str]] = set()
    for step, _, key, value in sorted(points, key=lambda p: p[1]):
        v = float(value)
        out.setdefault(step, {}).pop(key, None)
        bad.discard((step, key))
        if math.isfinite(v):
            out[step][key] = v
        else:
            bad.add((step, key))
    return out, bad


def rows_points(rows, drop=("_step", "_timestamp", "timestamp", "step")):
    pts = []
    for r in rows:
        step = r.get("_step", r.get("step"))
        t = r.get("_timestamp", r.get("timestamp"))
        pts += [[step, t or 0, k, v] for k, v in r.items() if k not in drop]
    return pts


def expectations() -> dict[str, tuple[str, dict, set]]:
    """run_id -> (format as run_health names it, {step: {key: value}}, bad points)."""
    out = {}
    w = expected("wandb")
    out["fx0001"] = ("wandb/verl", *newest(rows_points(w["history"])))
    out["ncrqf3ic"] = ("swanlab", *newest(expected("swanlab")["scalars"]))
    tb = expected("tensorboard")
    for run in ("tbx", "tensor"):
        pts = []
        for path, points in tb.items():
            parts = path.split("/")
            if parts[1] != run:
                continue
            sub = "/".join(parts[2:-1])
            pts += [[s, t, f"{sub}/{k}" if sub else k, v] for s, t, k, v in points]
        out[run] = ("tensorboard/verl" if run == "tensor" else "tensorboard", *newest(pts))
    for name, run in expected("trackio").items():
        logs = [
            {**r, "step": r.get("train/global_step", r["step"]), "timestamp": i}
            for i, r in enumerate(run["logs"])
        ]
        fmt = "trackio/trl" if "train/global_step" in run["logs"][0] else "trackio"
        pts = rows_points(logs, drop=("timestamp", "step", "train/global_step"))
        out[f"rl-fixture/{name}"] = (fmt, *newest(pts))
    for store in ("sqlite", "files"):
        for run in expected("mlflow")[store].values():
            out[run["run_id"]] = ("mlflow", *newest(run["points"]))
    return out


def as_raw(row: dict, trainer: str | None) -> dict[str, float]:
    """A steps row back under the tracker's own keys (the documented columns)."""
    raw = {key: row[col] for key, col in COLUMNS[trainer].items() if row[col] is not None}
    raw.update(dict(row["reported_other"]))
    raw.update({f"eval/{k}": v for k, v in dict(row["reported_eval"]).items()})
    return raw


@pytest.fixture(scope="module")
def analyzed(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("trackers")
    runs = copy_fixtures(tmp)
    states = analyze_local([str(runs)], str(tmp / "out"))
    return states, tmp / "out"


def test_every_tracker_run_is_found_beside_the_others(analyzed):
    states, out = analyzed
    want = expectations()
    assert sorted(s.run_id for s in states) == sorted(want)
    health = {h["run_id"]: h for h in table(out, "run_health")}
    assert {r: h["format"] for r, h in health.items()} == {r: w[0] for r, w in want.items()}


def test_rows_hold_what_each_library_wrote_the_newest_value_winning(analyzed):
    _, out = analyzed
    steps = table(out, "steps", "order by run_id, step")
    for run_id, (fmt, points, _) in expectations().items():
        trainer = fmt.split("/")[1] if "/" in fmt else None
        rows = [r for r in steps if r["run_id"] == run_id]
        assert [r["step"] for r in rows] == sorted(points), run_id
        for r in rows:
            got = as_raw(r, trainer)
            assert got == pytest.approx(points[r["step"]], rel=1e-12), (run_id, r["step"])


def test_non_finite_values_are_quarantined_with_their_step_and_replaced_steps_counted(analyzed):
    _, out = analyzed
    q = table(out, "quarantine")
    health = {h["run_id"]: h for h in table(out, "run_health")}
    for run_id, (_, _, bad) in expectations().items():
        mine = [r for r in q if r["run_id"] == run_id]
        assert all(r["reason"].startswith("non_finite_value:") for r in mine), run_id
        assert sorted(r["step"] for r in mine) == sorted(s for s, _ in bad), run_id
        assert health[run_id]["quarantined"] == len(bad)
    # Trackio's grpo-a resumed and logged steps 30..39 again; TensorBoard's tbx restart
    # file re-logs 30..44 of train/reward (gen_trackio.py, gen_tensorboard.py).
    assert health["rl-fixture/grpo-a"]["replaced_steps"] == 10
    assert health["tbx"]["replaced_steps"] > 0
    assert health["fx0001"]["replaced_steps"] == 0
