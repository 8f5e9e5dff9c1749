"""Configuration of the learning trainer, and its named presets.

Contract
--------
``LearnConfig`` (frozen) is everything one run of the trainer depends on besides its
seed. ``preset(name, rng)`` returns the configuration of a named preset for one run;
healthy runs vary (learning rate, group size, answer length, mode) from ``rng``. Every
preset is the same trainer: a pathology comes only from a setting (learning rate,
grader, task, sampler lag), never from a scripted curve. What happened is observed in
the run and labelled afterwards (``observe.py``).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Literal

import numpy as np

PRESETS = ("healthy", "lr_too_high", "loophole", "too_hard", "stale_sampler")


@dataclass(frozen=True, slots=True)
class LearnConfig:
    """One run's settings. Grader kinds: ``partial`` (share of answer digits right),
    ``binary`` (1 only when every digit is right). ``wildcard``: a grader bug that also
    accepts this digit at any position (None: no bug). The sampler runs
    ``lag_start`` policy versions behind at step 0 and ``lag_end`` at the last step
    (async mode), each group's lag drawn around that mean."""

    learning_rate: float = 1.0
    groups: int = 4
    group_size: int = 8
    answer_len: int = 4
    think_len: float = 8.0
    max_tokens: int = 40
    reward: Literal["partial", "binary"] = "partial"
    wildcard: int | None = None
    mode: Literal["sync", "async"] = "sync"
    lag_start: float = 0.0
    lag_end: float = 0.0
    max_steps_off_policy: int = 4
    precision: Literal["float16", "bfloat16"] = "float16"
    fail_rollout: float = 0.01
    fail_grading: float = 0.003
    n_tasks: int = 256
    n_eval: int = 64
    eval_every: int = 10
    agent: bool = False
    """Multi-turn agent layout: each attempt is the policy's answer between the fixed
    turns of the simulator's agent mode (simulate/agent.py), written by the harness."""

    def __post_init__(self) -> None:
        if not self.learning_rate > 0:
            raise ValueError(f"learning_rate must be > 0 (got {self.learning_rate})")
        if self.groups < 1 or self.group_size < 2:
            raise ValueError("need groups >= 1 and group_size >= 2")
        if not 1 <= self.answer_len <= 8:
            raise ValueError(f"answer_len must be in 1..8 (got {self.answer_len})")
        if self.max_tokens < self.answer_len + 2:
            raise ValueError("max_tokens must leave room for a STOP token and the answer")
        if self.mode == "sync" and (self.lag_start or self.lag_end):
            raise ValueError("a sampler lag needs mode = 'async'")


def preset(name: str, rng: np.random.Generator) -> LearnConfig:
    """The configuration of preset ``name`` for one run (see docs/run-format.md)."""
    if name not in PRESETS:
        raise ValueError(f"unknown preset {name!r}; choose from {', '.join(PRESETS)}")
    base = LearnConfig(
        learning_rate=float(rng.uniform(2.5, 4.0)),
        group_size=int(rng.choice([6, 8])),
        think_len=float(rng.uniform(2.0, 10.0)),
    )
    if name == "healthy":
        return base
    if name == "lr_too_high":
        return replace(base, learning_rate=float(rng.uniform(300.0, 600.0)))
    if name == "loophole":
        # The grader's digit parser treats this digit as a wildcard.
        return replace(base, wildcard=int(rng.integers(0, 10)))
    if name == "too_hard":
        # Exact match on a long answer: almost never right by chance.
        return replace(base, reward="binary", answer_len=6, max_tokens=44)
    # stale_sampler: async, the sampler falls further behind the trainer.
    return replace(
        base,
        mode="async",
        lag_start=0.3,
        lag_end=float(rng.uniform(16.0, 24.0)),
        max_steps_off_policy=32,
    )


def async_variant(c: LearnConfig) -> LearnConfig:
    """A healthy async run: a steady lag of about one version."""
    return replace(c, mode="async", lag_start=1.0, lag_end=1.0)
