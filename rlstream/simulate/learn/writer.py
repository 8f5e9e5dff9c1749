"""Writing the learning trainer's runs: `simulate_learn(root, preset, ...)`.

Contract
--------
Writes ``runs`` runs of one preset under ROOT (``run-<index:03d>-<preset>/``) in the
run format (docs/run-format.md) through the simulator's record code
(``simulate.records.step_events``), with synthetic, seed-determined clocks (same seed,
same bytes), and ROOT/labels.json with the labels observed in each run
(``observe.label_run``). Returns the labels. Run ``i`` depends only on
``(seed, preset, i, steps, mode, agent)``; with ``agent`` its attempts are written as a
coding agent's model calls (``LearnConfig.agent``).
"""

from __future__ import annotations

import hashlib
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import orjson

from rlstream.simulate.config import EPOCH, FORMAT_VERSION, RunLabel
from rlstream.simulate.learn import policy as P
from rlstream.simulate.learn.observe import label_run
from rlstream.simulate.learn.presets import PRESETS, LearnConfig, async_variant, preset
from rlstream.simulate.learn.trainer import Trainer
from rlstream.simulate.records import Transcript, step_events
from rlstream.simulate.stats import step_metrics
from rlstream.simulate.writer import SETUP_SECONDS, _lines_bytes, write_atomic


def run_config(c: LearnConfig, steps: int) -> dict[str, Any]:
    """run.json ``config`` of a learning run."""
    return {
        "training": {
            "max_steps": steps,
            "max_steps_off_policy": c.max_steps_off_policy,
            # Never reached: too_hard runs keep going so their rows can be scored.
            "max_consecutive_unusable_groups": c.groups * steps + 1,
            "max_group_losses": c.group_size // 2,
            "mode": c.mode,
            "group_size": c.group_size,
            "groups_per_step": c.groups,
            "learning_rate": c.learning_rate,
        },
        "rollout": {"max_turns": 4 if c.agent else 1},
        "sampling": {"max_tokens": c.max_tokens, "temperature": 1.0},
        "output": {},
        "model": {"name": "learn-digits-tabular", "vocab_size": P.VOCAB_SIZE},
        "grader": {"kind": c.reward, "answer_len": c.answer_len},
    }


def _run_json(run_id: str, cfg: dict, created: float, finished: float | None) -> bytes:
    doc: dict[str, Any] = {
        "format_version": FORMAT_VERSION,
        "run_id": run_id,
        "created_at": round(created, 3),
        "config": cfg,
    }
    if finished is not None:
        doc["finished_at"] = round(finished, 3)
    return orjson.dumps(doc, option=orjson.OPT_INDENT_2) + b"\n"


def write_run(
    d: Path, run_id: str, c: LearnConfig, steps: int, seed: list[int], created: float
) -> tuple[tuple[str, ...], int | None, dict[str, Any]]:
    """Train one run and write it to ``d``; returns its observed label."""
    (d / "transcripts").mkdir(parents=True, exist_ok=True)
    cfg = run_config(c, steps)
    write_atomic(d / "run.json", _run_json(run_id, cfg, created, None))
    trainer = Trainer(c, steps, seed)
    shape = SimpleNamespace(trace="full")
    clock = created + SETUP_SECONDS
    obs, kl = [], []
    with open(d / "steps.jsonl", "wb") as fs, open(d / "rollouts.jsonl", "wb") as fr:
        files = {"steps.jsonl": fs, "rollouts.jsonl": fr}
        for t in range(steps):
            sd, ob = trainer.step(t)
            metrics = step_metrics(sd)  # the guide's definitions (docs/run-format.md)
            obs.append(ob)
            kl.append(metrics.get("train/mismatch_kl"))
            for ev in step_events(shape, sd, metrics):  # type: ignore[arg-type]
                if isinstance(ev.item, Transcript):
                    write_atomic(d / "transcripts" / ev.item.name, ev.item.data)
                else:
                    files[ev.item.file].write(_lines_bytes(ev.item, clock + ev.frac * sd.duration))
            clock += sd.duration
    write_atomic(d / "run.json", _run_json(run_id, cfg, created, clock + 1.0))
    return label_run(d.name.split("-", 2)[2], obs, kl)


def simulate_learn(
    root: str | Path,
    preset_name: str,
    *,
    runs: int = 1,
    steps: int = 300,
    seed: int = 0,
    mode: str = "sync",
    agent: bool = False,
) -> list[RunLabel]:
    """Train and write ``runs`` runs of ``preset_name``; returns their labels."""
    if preset_name not in PRESETS:
        raise ValueError(f"unknown preset {preset_name!r}; choose from {', '.join(PRESETS)}")
    if runs < 1 or steps < 20:
        raise ValueError(f"need runs >= 1 and steps >= 20 (got {runs}, {steps})")
    root = Path(root)
    names = [f"run-{i:03d}-{preset_name}" for i in range(runs)]
    for name in names:
        if (root / name).exists() and any((root / name).iterdir()):
            raise FileExistsError(f"{root / name} already exists and is not empty")
    root.mkdir(parents=True, exist_ok=True)
    offset = float(np.random.default_rng([seed, 0]).integers(0, 86400 * 30))
    labels, docs = [], []
    for i, name in enumerate(names):
        c = preset(preset_name, np.random.default_rng([seed, i, 0]))
        if mode == "async" and c.mode == "sync":
            c = async_variant(c)
        if agent:
            c = replace(c, agent=True)
        key = f"rlstream-learn:{seed}:{preset_name}:{mode}:{i}{':agent' if agent else ''}".encode()
        run_id = "learn-" + hashlib.blake2b(key, digest_size=6).hexdigest()
        codes, onset, facts = write_run(
            root / name, run_id, c, steps, [seed, i, 1], EPOCH + offset + i * 37.0
        )
        hack = facts.get("transcript_hack_onset")
        also = (("transcript_hack_flags", hack),) if hack is not None else ()
        lab = RunLabel(name, run_id, preset_name, onset, codes, also)
        labels.append(lab)
        docs.append({**lab.to_json(), "trainer": "learn", "observed": facts})
    doc = {"format_version": FORMAT_VERSION, "seed": seed, "runs": docs}
    write_atomic(root / "labels.json", orjson.dumps(doc, option=orjson.OPT_INDENT_2) + b"\n")
    return labels


__all__ = ["simulate_learn"]
