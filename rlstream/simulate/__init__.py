"""rlstream.simulate: realistic RL run directories in the run format, version 1.

    from rlstream.simulate import SimConfig, simulate
    labels = simulate("/tmp/runs", SimConfig(runs=4, steps=50, scenarios=("healthy",)))

`simulate` writes every run at once with synthetic, seed-determined times (same seed,
same bytes); `simulate_live` writes all runs concurrently in real time. Each run follows
a scenario named by the health finding it should trigger (`SCENARIOS`); ground truth
goes to ROOT/labels.json. The format is documented in docs/run-format.md.

Modules: config (SimConfig, plans, labels), scenarios (per-step knobs), engine (one
step's attempts and tokens as arrays), tokens (token sampling), stats (what the trainer
reports), records (JSON records and write order), writer (disk), cli.
"""

from rlstream.simulate.config import RunLabel, SimConfig
from rlstream.simulate.scenarios import SCENARIOS
from rlstream.simulate.writer import simulate, simulate_live

__all__ = ["SCENARIOS", "RunLabel", "SimConfig", "simulate", "simulate_live"]
