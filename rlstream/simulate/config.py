"""Simulator configuration, per-run plans and ground-truth labels.

`SimConfig` is the one typed, frozen source of defaults (the CLI parses into it).
`plan_runs(config)` turns it into one `RunPlan` per run: scenario, onset step, the
run's TOML config (as written to run.json) and the latent parameters the engine draws
from. Plans depend only on `(seed, run index)`, so any run can be regenerated alone.

Random streams: every run draws from `numpy.random.default_rng([seed, index, stream])`
with one stream per purpose (`STREAM_PLAN`, `STREAM_CONTENT`, `STREAM_WRITES`), so the
way a live writer splits lines never changes what is written.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from rlstream.simulate.scenarios import SCENARIOS, ZERO_ONSET

STREAM_PLAN = 0
STREAM_CONTENT = 1
STREAM_WRITES = 2

# 2026-01-01T00:00:00Z: synthetic clocks start here plus a seed-derived offset.
EPOCH = 1767225600.0
FORMAT_VERSION = 1


@dataclass(frozen=True, slots=True)
class SimConfig:
    """What to simulate. Defaults are the CLI's defaults."""

    runs: int = 4
    steps: int = 50
    scenarios: tuple[str, ...] = ("healthy",)
    seed: int = 0
    trace: Literal["full", "samples"] = "full"
    topk: int | None = None
    groups: int = 4
    group_size: int = 4
    tokens: float = 48.0
    mode: Literal["sync", "async"] = "sync"
    onset_frac: float = 0.4
    vocab_size: int = 32000
    eval_every: int = 10
    vary_healthy: bool = True
    cohort_size: int = 0
    """With n > 0, runs come in cohorts of n consecutive runs that share one recipe: the
    same config and latent parameters (drawn from the seed and the cohort's index),
    differing only in their random content, as seeds of one sweep do."""
    agent: bool = False
    """Multi-turn agent mode (simulate/agent.py): every run's attempts are 4 to 8
    generations, a coding agent's written turns between fixed actions (the same
    "Running the tests now." call in every attempt); max_turns 8."""
    odd_kl: float = 1.0
    """With cohorts: in every second cohort (odd cohort index) the last run's
    sampler/trainer KL is this many times its siblings' from the first step (its
    folder name ends in `-odd`): a run unlike its peers that no per-run rule sees."""

    def __post_init__(self) -> None:
        unknown = [s for s in self.scenarios if s not in SCENARIOS]
        if unknown:
            raise ValueError(f"unknown scenario(s) {unknown}; choose from {', '.join(SCENARIOS)}")
        if not self.scenarios:
            raise ValueError("give at least one scenario")
        if self.runs < 1 or self.steps < 1:
            raise ValueError(f"runs and steps must be >= 1 (got {self.runs}, {self.steps})")
        if self.groups < 1 or self.group_size < 2:
            raise ValueError(
                f"need groups >= 1 and group_size >= 2 (got {self.groups}, {self.group_size})"
            )
        if self.trace not in ("full", "samples"):
            raise ValueError(f"trace must be 'full' or 'samples', not {self.trace!r}")
        if self.mode not in ("sync", "async"):
            raise ValueError(f"mode must be 'sync' or 'async', not {self.mode!r}")
        if self.topk is not None and not 1 <= self.topk <= 64:
            raise ValueError(f"topk must be in 1..64 (got {self.topk})")
        if self.vocab_size < 1000:
            raise ValueError(f"vocab_size must be >= 1000 (got {self.vocab_size})")
        if self.tokens < 2:
            raise ValueError(f"tokens must be >= 2 (got {self.tokens})")
        if self.cohort_size < 0 or self.odd_kl <= 0:
            raise ValueError("cohort_size must be >= 0 and odd_kl > 0")


@dataclass(frozen=True, slots=True)
class RunLabel:
    """Ground truth for one run, as written to ROOT/labels.json."""

    run: str
    run_id: str
    scenario: str
    onset_step: int | None
    expected_codes: tuple[str, ...]
    also: tuple[tuple[str, int], ...] = ()
    """Further codes the run should raise, each with its own onset step (a learning
    loophole run: transcript_hack_flags from the step its text first shows the
    shortcut in more than 2 % of the high-reward attempts)."""

    def to_json(self) -> dict[str, Any]:
        return {
            "run": self.run,
            "run_id": self.run_id,
            "scenario": self.scenario,
            "onset_step": self.onset_step,
            "expected_codes": list(self.expected_codes),
            "also_expected": dict(self.also),
        }


@dataclass(frozen=True, slots=True)
class RunPlan:
    """Everything fixed about one run before its first step."""

    index: int
    name: str
    run_id: str
    scenario: str
    onset: int | None
    steps: int
    trace: str
    topk: int | None
    vocab_size: int
    eval_every: int
    groups: int
    group_size: int
    tokens: float
    mode: str
    max_turns: int
    max_tokens: int
    max_steps_off_policy: int
    max_consecutive_unusable_groups: int
    max_group_losses: int
    progress_every_seconds: float | None
    created_at: float
    seed: int
    agent: bool = False
    """Attempts laid out as a coding agent's turns (simulate/agent.py)."""
    recipe: str = ""
    """With cohorts: the recipe's name (its task set, in the config as `data.tasks`)."""
    # Latent parameters (never written): see engine.py for how they are used.
    params: dict[str, float] = field(default_factory=dict)

    @property
    def label(self) -> RunLabel:
        codes = () if self.scenario == "healthy" else (self.scenario,)
        return RunLabel(self.name, self.run_id, self.scenario, self.onset, codes)

    def run_config(self) -> dict[str, Any]:
        """The run's TOML as JSON (run.json "config")."""
        output: dict[str, Any] = {}
        if self.progress_every_seconds is not None:
            output["progress_every_seconds"] = self.progress_every_seconds
        return {
            "training": {
                "max_steps": self.steps,
                "max_steps_off_policy": self.max_steps_off_policy,
                "max_consecutive_unusable_groups": self.max_consecutive_unusable_groups,
                "max_group_losses": self.max_group_losses,
                "mode": self.mode,
                "group_size": self.group_size,
                "groups_per_step": self.groups,
                "learning_rate": self.params["learning_rate"],
            },
            "rollout": {"max_turns": self.max_turns},
            "sampling": {"max_tokens": self.max_tokens, "temperature": 1.0},
            "output": output,
            "model": {"name": "sim-policy-1b", "vocab_size": self.vocab_size},
            **({"data": {"tasks": self.recipe}} if self.recipe else {}),
        }


def run_id_for(seed: int, index: int) -> str:
    digest = hashlib.blake2b(f"rlstream-sim:{seed}:{index}".encode(), digest_size=6).hexdigest()
    return f"sim-{digest}"


def _onset(config: SimConfig, scenario: str, rng: np.random.Generator) -> int | None:
    if scenario == "healthy":
        return None
    if scenario in ZERO_ONSET:
        return 0
    s = config.steps
    jitter = rng.uniform(-0.08, 0.08) * s
    onset = round(config.onset_frac * s + jitter)
    return int(min(max(onset, 1), max(s - 2, 1)))


def plan_run(config: SimConfig, index: int) -> RunPlan:
    """The plan of run `index`: a pure function of (config, index)."""
    scenario = config.scenarios[index % len(config.scenarios)]
    rng = np.random.default_rng([config.seed, index, STREAM_PLAN])
    cohort = index // config.cohort_size if config.cohort_size else None
    if cohort is not None:  # the recipe comes from the cohort, not the run
        rng = np.random.default_rng([config.seed, cohort, STREAM_PLAN, 1])
    onset = _onset(config, scenario, rng)

    group_size = config.group_size
    max_turns = int(rng.choice([1, 1, 4, 8]))
    reward_kind = "partial" if rng.random() < 0.3 else "binary"
    mode = config.mode
    if scenario == "healthy" and config.vary_healthy:
        group_size = int(group_size * rng.choice([1, 1, 2]))
    if scenario == "out_of_room":
        max_turns = 6
    if scenario == "stale_rollouts":
        mode = "async"
    if scenario == "degenerate_outputs":
        max_turns = 1
        reward_kind = "binary"
    if config.agent:
        max_turns = 8
    # Cap at about 3.5x the median length, rounded up to a multiple of 64.
    max_tokens = int(np.ceil(config.tokens * 3.5 / 64.0) * 64)
    progress = 20.0 if rng.random() < 0.5 else None
    offset = float(np.random.default_rng([config.seed, STREAM_PLAN]).integers(0, 86400 * 30))

    params = {
        "s0": float(rng.uniform(-1.6, -0.6)),
        "gain": float(rng.uniform(2.2, 3.4)),
        "tau": float(config.steps * rng.uniform(0.25, 0.5)),
        "skill_walk": float(rng.uniform(0.02, 0.08)),
        "diff_sd": float(rng.uniform(0.8, 1.6)),
        "partial": 1.0 if reward_kind == "partial" else 0.0,
        "turn_p": float(rng.uniform(0.3, 0.5)) if max_turns > 1 else 0.0,
        "len_sigma": float(rng.uniform(0.4, 0.6)),
        "conf0": float(rng.uniform(4.6, 5.4)),
        "kl_sd": float(rng.uniform(0.01, 0.03)),
        "fail_rollout": float(rng.uniform(0.003, 0.02)),
        "fail_grading": float(rng.uniform(0.0, 0.008)),
        "unversioned": float(rng.choice([0.0, 0.0, 0.004])),
        "flip": float(rng.choice([0.0, 0.0, 0.03])),
        "unknown_key_p": float(rng.choice([0.0, 0.3, 1.0])),
        "base_seconds": float(rng.uniform(25.0, 45.0)),
        "learning_rate": float(rng.choice([1e-6, 2e-6, 4e-6])),
    }
    if scenario == "healthy" and config.vary_healthy:
        params["diff_sd"] *= float(rng.uniform(0.8, 1.3))
        params["s0"] += float(rng.uniform(-0.4, 0.4))
    odd = is_odd(config, index)
    if odd:  # KL of small logprob noise grows as its variance
        params["kl_sd"] *= float(np.sqrt(config.odd_kl))

    return RunPlan(
        index=index,
        name=f"run-{index:03d}-{scenario}" + ("-odd" if odd else ""),
        run_id=run_id_for(config.seed, index),
        scenario=scenario,
        onset=onset,
        steps=config.steps,
        trace=config.trace,
        topk=config.topk,
        vocab_size=config.vocab_size,
        eval_every=config.eval_every,
        groups=config.groups,
        group_size=group_size,
        tokens=config.tokens,
        mode=mode,
        max_turns=max_turns,
        max_tokens=max_tokens,
        max_steps_off_policy=2,
        max_consecutive_unusable_groups=8 * config.groups,
        max_group_losses=max(1, group_size // 2),
        progress_every_seconds=progress,
        created_at=EPOCH + offset + index * 37.0,
        seed=config.seed,
        agent=config.agent,
        recipe="" if cohort is None else f"sim-tasks-{config.seed}-{cohort}",
        params=params,
    )


def is_odd(config: SimConfig, index: int) -> bool:
    """Whether run `index` is the odd run of its cohort (`SimConfig.odd_kl`)."""
    n = config.cohort_size
    return bool(n) and config.odd_kl != 1.0 and (index // n) % 2 == 1 and index % n == n - 1


def plan_runs(config: SimConfig) -> list[RunPlan]:
    return [plan_run(config, i) for i in range(config.runs)]
