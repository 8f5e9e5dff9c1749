"""rlstream.simulate.learn: a small, real RL trainer that writes the run format.

    from rlstream.simulate.learn import simulate_learn
    labels = simulate_learn("/tmp/runs", "healthy", runs=4, steps=300, seed=0)

A categorical policy over a 32-token vocabulary (numpy, CPU) is trained with a
GRPO-style update on digit-mapping tasks with real graders, groups of attempts and
real discards (policy: `policy.py`; one update: `trainer.py`). Presets
(`presets.PRESETS`) are configurations of the same trainer; what happened in each run
is observed and labelled in ROOT/labels.json (`observe.py`). Runs are written through
the simulator's record code (`writer.py`). docs/run-format.md describes the runs.
"""

from rlstream.simulate.learn.presets import PRESETS, LearnConfig
from rlstream.simulate.learn.writer import simulate_learn

__all__ = ["PRESETS", "LearnConfig", "simulate_learn"]
