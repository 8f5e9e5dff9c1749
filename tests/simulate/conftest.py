"""Simulations shared by the simulator tests (each written once per session).

RLSTREAM_SIM_SEED overrides the scenario suite's seed, to check that the pathology
tests hold beyond the default seed.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from rlstream.simulate import SCENARIOS, SimConfig, simulate

SEED = int(os.environ.get("RLSTREAM_SIM_SEED", "7"))


@pytest.fixture(scope="session")
def all_scenarios(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One run per scenario, 24 steps, top-5 logprobs, short completions (fast)."""
    root = tmp_path_factory.mktemp("all")
    simulate(
        root,
        SimConfig(runs=len(SCENARIOS), steps=24, scenarios=SCENARIOS, seed=SEED, topk=5, tokens=32),
    )
    return root


@pytest.fixture(scope="session")
def healthy(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("healthy")
    simulate(root, SimConfig(runs=2, steps=40, seed=3, topk=4))
    return root
