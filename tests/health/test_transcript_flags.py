"""transcript_hack_flags on runs of three writers: the scripted simulator (text-level
hacking whose reward curve is the honest twin's), the learning trainer (the loophole
preset's credited wildcard answers) and the simulator's verl files; honest runs of the
same writers never fire it, and a run without text says it cannot be judged."""

from __future__ import annotations

import json

import pytest

from rlstream.pipeline.local import analyze_local
from rlstream.simulate import SimConfig, simulate
from rlstream.simulate.learn import simulate_learn
from rlstream.simulate.trainers import convert_tree
from tests.outputs import out_sql


def _fired(out) -> dict[str, list[int]]:
    rows = out_sql(
        out,
        "select run_id, step from alerts where code = 'transcript_hack_flags' "
        "and to_state = 'firing' order by step",
    )
    got: dict[str, list[int]] = {}
    for run, step in rows:
        got.setdefault(run, []).append(step)
    return got


def _labels(labels) -> dict[str, tuple[str, int | None]]:
    return {lab.run_id: (lab.scenario, lab.onset_step) for lab in labels}


@pytest.fixture(scope="module")
def scripted(tmp_path_factory):
    base = tmp_path_factory.mktemp("hack")
    scen = ("transcript_hack_flags", "healthy")
    labels = simulate(base / "runs", SimConfig(runs=4, steps=60, scenarios=scen, seed=21))
    analyze_local([str(base / "runs")], str(base / "out"))
    return base, _labels(labels)


def test_scripted_hacking_fires_soon_after_onset_and_honest_twins_never(scripted):
    base, labels = scripted
    fired = _fired(base / "out")
    for run, (scenario, onset) in labels.items():
        if scenario == "healthy":
            assert run not in fired
        else:
            assert run in fired and onset <= fired[run][0] <= onset + 10, (run, onset, fired)
    # the reward curve does not tell them apart: the hack adds no reward
    means = dict(
        out_sql(base / "out", "select run_id, avg(reward_mean) from steps group by run_id")
    )
    hack = [means[r] for r, (s, _) in labels.items() if s != "healthy"]
    honest = [means[r] for r, (s, _) in labels.items() if s == "healthy"]
    assert max(hack) < max(honest) + 0.15


def test_the_message_names_scanners_and_attempts_that_exist(scripted):
    base, _ = scripted
    (msg,) = out_sql(
        base / "out",
        "select message from alerts where code = 'transcript_hack_flags' and to_state = "
        "'firing' order by run_id, step limit 1",
    )[0:1][0]
    assert any(
        s in msg for s in ("early_exit", "test_tampering", "grader_marker", "special_casing")
    )
    ids = [w.strip(",;:") for w in msg.split("read ")[1].split(":")[0].split()]
    kept = {r[0] for r in out_sql(base / "out", "select attempt_id from samples")}
    assert ids and set(ids) <= kept


def test_learning_trainer_loophole_fires_and_healthy_does_not(tmp_path):
    labels = simulate_learn(tmp_path / "runs", "loophole", runs=1, steps=40, seed=3)
    labels += simulate_learn(tmp_path / "runs", "healthy", runs=1, steps=40, seed=3)
    analyze_local([str(tmp_path / "runs")], str(tmp_path / "out"))
    fired = _fired(tmp_path / "out")
    for run, (scenario, _) in _labels(labels).items():
        assert (run in fired) == (scenario != "healthy"), (run, scenario, fired)


def test_verl_files_fire_it_and_a_run_without_text_is_not_evaluable(scripted, tmp_path):
    base, _ = scripted
    convert_tree(base / "runs", tmp_path / "verl", "verl")
    simulate(tmp_path / "bare", SimConfig(runs=1, steps=8, seed=2, trace="samples"))
    analyze_local([str(tmp_path / "verl"), str(tmp_path / "bare")], str(tmp_path / "out"))
    fired = _fired(tmp_path / "out")
    conv = json.loads((tmp_path / "verl" / "labels.json").read_text())["runs"]
    labels = {r["run_id"]: r["scenario"] for r in conv}
    hack = {r for r, s in labels.items() if s != "healthy"}
    assert len(hack) == 2
    ne = dict(out_sql(tmp_path / "out", "select run_id, not_evaluable from latest"))
    for run, codes in ne.items():
        if run in labels:
            assert (run in fired) == (run in hack)
            assert "transcript_hack_flags" not in codes
        else:
            assert "transcript_hack_flags" in codes and run not in fired


def test_text_without_rewards_is_not_evaluable_not_quiet(scripted, tmp_path):
    """Loops transcripts whose optional `reward` is absent (docs/run-format.md), in a
    run whose rollouts.jsonl has no reward either, carry text the scanners flag, but no
    attempt is known to be high-reward: the run lists transcript_hack_flags as not
    evaluable rather than looking like a run without hacks, and `rlstream samples`
    says why it shows no ranked samples. (With rewards in rollouts.jsonl they are
    joined: tests/pipeline/test_samples_join.py.)"""
    base, labels = scripted
    hack = next(r for r, (s, _) in labels.items() if s == "transcript_hack_flags")
    src = next(
        d for d in (base / "runs").iterdir()
        if d.is_dir() and json.loads((d / "run.json").read_text())["run_id"] == hack
    )  # fmt: skip
    run = tmp_path / "runs" / src.name
    run.mkdir(parents=True)
    for f in ("run.json", "steps.jsonl"):
        (run / f).write_bytes((src / f).read_bytes())
    lines = [json.loads(x) for x in (src / "rollouts.jsonl").read_text().splitlines()]
    (run / "rollouts.jsonl").write_text(
        "".join(json.dumps({**r, "reward": None}) + "\n" for r in lines)
    )
    (run / "transcripts").mkdir()
    for p in (src / "transcripts").glob("*.json"):
        doc = json.loads(p.read_text())
        doc.pop("reward")
        (run / "transcripts" / p.name).write_text(json.dumps(doc))
    analyze_local([str(tmp_path / "runs")], str(tmp_path / "out"))
    ((codes,),) = out_sql(tmp_path / "out", "select not_evaluable from latest")
    assert "transcript_hack_flags" in codes
    assert _fired(tmp_path / "out") == {}
    # the scanners still flagged the text: flagged (and probe) samples, none ranked
    rows = out_sql(tmp_path / "out", "select kept, reward from samples")
    assert all(set(kept) <= {"flagged", "probe"} and r is None for kept, r in rows)
    assert any("flagged" in kept for kept, _ in rows)
