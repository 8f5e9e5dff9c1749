"""Simulations shared by the simulator tests (each written once per session)."""

from __future__ import annotations

from pathlib import Path

import pytest

from rlstream.simulate import SCENARIOS, SimConfig, simulate


@pytest.fixture(scope="session")
def all_scenarios(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One run per scenario, 30 steps, top-5 logprobs, short completions (fast)."""
    root = tmp_path_factory.mktemp("all")
    simulate(
        root,
        SimConfig(runs=len(SCENARIOS), steps=30, scenarios=SCENARIOS, seed=7, topk=5, tokens=32),
    )
    return root


@pytest.fixture(scope="session")
def healthy(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("healthy")
    simulate(root, SimConfig(runs=2, steps=40, seed=3, topk=4))
    return root
