"""The simulator's multi-turn agent mode (--agent), and how rlstream judges its runs.

A healthy agent run (attempts of 4-8 generations whose fixed tool-call turns are the
same in every attempt) raises no ``degenerate_outputs``; an agent run whose answers
collapse onto one response across tasks still does.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import numpy as np
import orjson
import pytest

from rlstream.fleet.read import read_latest
from rlstream.pipeline.local import analyze_local
from rlstream.simulate import SimConfig, simulate
from rlstream.simulate.agent import ACTIONS, FINISH, LIST, RUN
from tests.simulate import simreader as rd

LOUD = ("warning", "critical")


@pytest.fixture(scope="module")
def agent_runs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("agent")
    scenarios = ("healthy", "healthy", "degenerate_outputs")
    simulate(root, SimConfig(runs=3, steps=60, scenarios=scenarios, seed=5, agent=True))
    return root


@pytest.fixture(scope="module")
def analysed(agent_runs: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict]:
    out = tmp_path_factory.mktemp("agent-out")
    analyze_local([str(agent_runs)], str(out))
    return {r["run_id"]: r for r in read_latest(str(out))}


def _label(root: Path, name: str) -> dict:
    (lab,) = [
        r for r in orjson.loads((root / "labels.json").read_bytes())["runs"] if r["run"] == name
    ]
    return lab


def _run_id(d: Path) -> str:
    return _label(d.parent, d.name)["run_id"]


def _loud(row: dict) -> set[str]:
    return {
        f["code"] for f in row["findings"] or [] if f["state"] == "firing" and f["severity"] in LOUD
    }


def test_attempts_are_an_agents_turns(agent_runs: Path) -> None:
    d = agent_runs / "run-000-healthy"
    fixed = {tuple(a.tolist()): i for i, a in enumerate(ACTIONS)}
    turns: Counter[int] = Counter()
    per_action_tasks: dict[int, set[str]] = {LIST: set(), RUN: set(), FINISH: set()}
    for t in rd.transcripts(d).values():
        gens = t["generations"]
        turns[len(gens)] += 1
        kinds = [fixed.get(tuple(g["completion_tokens"]), -1) for g in gens]
        for k in kinds:
            if k >= 0:
                per_action_tasks[k].add(t["task_id"])
        assert kinds[0] == LIST
        assert all(k == RUN for k in kinds[2:-1:2])
        assert all(k == -1 for k in kinds[1:-1:2])  # the model-written turns
        stops = [g["stop_reason"] for g in gens]
        assert all(s == "tool_call" for s in stops[:-1])
        if stops[-1] == "stop":
            assert kinds[-1] == FINISH and len(gens) in (4, 6, 8)
        for g in gens:  # a fixed action is sampled, never spliced tool output
            if fixed.get(tuple(g["completion_tokens"]), -1) >= 0:
                assert None not in g["sampler_logprobs"]
    assert set(turns) <= {2, 3, 4, 5, 6, 7, 8} and turns[4] > turns[6] > turns[8] > 0
    assert sum(turns[n] for n in (4, 6, 8)) > 0.9 * sum(turns.values())
    # The same short turns answer every task of the run.
    n_tasks = len({t["task_id"] for t in rd.transcripts(d).values()})
    assert all(len(v) == n_tasks for v in per_action_tasks.values())


def test_degenerate_agent_keeps_its_boilerplate_around_one_answer(agent_runs: Path) -> None:
    d = agent_runs / "run-002-degenerate_outputs"
    at = _label(agent_runs, d.name)["onset_step"]
    answers: dict[tuple, set[str]] = {}
    for t in rd.transcripts(d).values():
        if t["step"] >= at + 5:
            key = tuple(tuple(g["completion_tokens"]) for g in t["generations"])
            answers.setdefault(key, set()).add(t["task_id"])
    top = max(answers.values(), key=len)
    assert len(top) >= 30
    key = next(k for k, v in answers.items() if v is top)
    assert len(key) == 4
    assert [np.array(k).tolist() for k in (key[0], key[2], key[3])] == [
        ACTIONS[LIST].tolist(),
        ACTIONS[RUN].tolist(),
        ACTIONS[FINISH].tolist(),
    ]


def test_healthy_agent_runs_raise_no_degenerate_outputs(agent_runs, analysed) -> None:
    for name in ("run-000-healthy", "run-001-healthy"):
        row = analysed[_run_id(agent_runs / name)]
        codes = {f["code"] for f in row["findings"] or []}
        assert "degenerate_outputs" not in codes, row["findings"]
        assert row["status"] == "finished", row["findings"]


def test_collapsed_agent_answers_are_still_degenerate(agent_runs, analysed) -> None:
    row = analysed[_run_id(agent_runs / "run-002-degenerate_outputs")]
    assert row["status"] == "critical"
    assert "degenerate_outputs" in _loud(row), row["findings"]


# -- the learning trainer's agent layout (simulate --learn --agent) --------------------


@pytest.fixture(scope="module")
def learn_runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict]:
    from rlstream.simulate.learn import simulate_learn

    root = tmp_path_factory.mktemp("learn-agent")
    simulate_learn(root / "agent-healthy", "healthy", runs=1, steps=150, seed=9, agent=True)
    simulate_learn(root / "agent-loophole", "loophole", runs=1, steps=150, seed=9, agent=True)
    simulate_learn(root / "single-loophole", "loophole", runs=1, steps=150, seed=9)
    out = tmp_path_factory.mktemp("learn-agent-out")
    analyze_local([str(root)], str(out))
    rows = {r["run_uri"].split("/")[-2]: r for r in read_latest(str(out))}
    return {"root": root, **rows}


def test_learning_agent_wraps_the_answer_in_fixed_turns(learn_runs) -> None:
    d = learn_runs["root"] / "agent-healthy" / "run-000-healthy"
    n = 0
    for t in rd.transcripts(d).values():
        gens = t["generations"]
        stops = [g["stop_reason"] for g in gens]
        if stops[1] == "length":  # a truncated answer ends the attempt
            assert len(gens) == 2
        else:
            assert len(gens) == 4 and stops == ["tool_call"] * 3 + ["stop"]
            n += 1
        for i in (0, 2, 3)[: len(gens) - 1]:  # the harness's turns: not sampled
            assert set(gens[i]["sampler_logprobs"]) == {None}
        assert None not in gens[1]["sampler_logprobs"]
    assert n > 1000
    cfg = orjson.loads((d / "run.json").read_bytes())["config"]
    assert cfg["rollout"]["max_turns"] == 4


def test_learning_agent_verdicts_match_the_single_turn_run(learn_runs) -> None:
    healthy = learn_runs["agent-healthy"]
    assert "degenerate_outputs" not in {f["code"] for f in healthy["findings"] or []}
    assert _loud(healthy) == set(), healthy["findings"]
    # The same training written one call per attempt and as an agent: same findings
    # (this loophole run fires degenerate_outputs from its single-turn figures).
    agent, single = learn_runs["agent-loophole"], learn_runs["single-loophole"]
    assert "degenerate_outputs" in _loud(single)
    assert _loud(agent) == _loud(single)
